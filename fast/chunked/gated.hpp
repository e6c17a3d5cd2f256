// Chunked forms of the gated operators (docs/operators.md "Gated (data-dependent) decay"): linear, hla2 and ahla
// with per-token gates γ_t, in the two-level scheme of fast/chunked/common.hpp — per chunk, an intra-chunk
// product weighted by the gate products Γ, a carry of each chunk's summary across chunks, and the outputs from
// the state entering each chunk. Each is the fixed-γ chunk form of its operator (docs/operators.md "Chunk forms";
// linear.hpp, hla2.hpp's u-form, ahla.hpp) with every γ-power replaced by the Γ of the same ages.
//
// The per-chunk gate factors (st, en, g, the mask F) and how each scalar computes them: fast/chunked/chunk_gates.hpp.
// The states are the gated serial forms' (fast/serial/gated.hpp), part by part, so split-and-carry works and
// states compare exactly with the serial forms in rationals and F_p.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/gates.hpp"
#include "fast/chunked/chunk_gates.hpp"
#include "fast/chunked/common.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/serial/ahla.hpp"
#include "fast/serial/linear.hpp"
#include "reference/gated.hpp"

namespace hla::fast::chunked {

// ---- linear -------------------------------------------------------------------------------------------------
// o_t = Σ_{j≤t} Γ(t,j) (q_t·k_j) v_j splits at a chunk starting at c into
//   j < c:   st(a) q_tᵀ S0               (Γ(t,j) = Γ(t,c−1) Γ(c−1,j); S0 the gated serial S at c−1)
//   j ≥ c:   [((Q Kᵀ) ⊙ F) [V 1]]_a
// and S = g S0 + Kᵀ diag(en) [V 1] (z rides along as the last column).
template <class T> Run<T> gated_linear_chunked(const Problem<T>& p, const ColVec<T>& token_gates, const Options& opt,
                                               const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  using St = LinearState<T>;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const ChunkGates<T> gates(token_gates, plan, how, threads);

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> S = join(st0.S, st0.z);
  Mat<T> Sb(d, NG * da), Out(n, da);

  struct Ws {
    Mat<T> V, W, F, Y;
  };
  auto make_ws = [&] { return Ws{Mat<T>(w, da), Mat<T>(w, w), Mat<T>(w, w), Mat<T>(w, da)}; };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk, c = plan.begin(k), len = plan.len(k);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto F = ws.F.topLeftCorner(len, len);
      gates.decay_mask(k, F);
      auto W = ws.W.topLeftCorner(len, len);
      W.noalias() = p.Q.middleRows(c, len) * p.K.middleRows(c, len).transpose();
      W = W.cwiseProduct(F);
      Out.middleRows(c, len).noalias() = W * V;
      scale_rows<T>(V, gates.en.segment(c, len), true);
      Sb.middleCols(kk * da, da).noalias() = p.K.middleRows(c, len).transpose() * V;
    });

    carry(Sb, S, gates.g.data() + k0, cnt, true, threads);

    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index c = plan.begin(k0 + kk), len = plan.len(k0 + kk);
      auto Y = ws.Y.topRows(len);
      Y.noalias() = p.Q.middleRows(c, len) * Sb.middleCols(kk * da, da);
      scale_rows<T>(Y, gates.st.segment(c, len), true);
      Out.middleRows(c, len) += Y;
    });
  }
  St fin{S.leftCols(dv), S.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

// ---- hla2 ---------------------------------------------------------------------------------------------------
// SPEC's u-form (docs/operators.md "Gated", ledger gated.hla2.u-form): Γ(t,i)Γ(t,j) = Γ(t,j)² Γ(j,i) for
// i ≤ j ≤ t, so o_t = Σ_{j≤t} Γ(t,j)² (q_t·u_j) v_j [+ λ Σ_{j≤t} Γ(t,j) (q_t·q_j) v_j] with u_j = S_j q_j and
// S_j = Σ_{i≤j} Γ(j,i) k_i k_iᵀ the gated serial S: gated linear attention over keys u_j, decayed by Γ².
// Its state C'_t = Σ_{j≤t} Γ(t,j)² u_j v_jᵀ is S_t C_t − G_t of the gated serial form (the corrected rule gives
// S_t C_t − G_t = γ_t² (S C − G)_{t−1} + S_t q_t v_tᵀ). Per chunk, with S0, C'0, C0 entering:
//   U   = diag(st) Q S0 + ((Q Kᵀ) ⊙ F) K                                 rows u_{c+a}
//   out = ((Q Uᵀ) ⊙ F²) [V 1] + diag(st²) Q C'0 [+ λ ((Q Qᵀ) ⊙ F) [V 1] + λ diag(st) Q C0]
//   S ← g S0 + Kᵀ diag(en) K,  C' ← g² C'0 + Uᵀ diag(en²) [V 1],  C ← g C0 + Qᵀ diag(en) [V 1]
// and the final state in the serial form's terms: G = S C − C', h = S m − m'. This is the fixed-γ u-form with
// every γ-power a Γ: the same code, fast/chunked/hla2.hpp's hla2_chunked_heads, reading its decay from ChunkDecay
// (until 2026-12-07 a copy of its own here, without the fixed form's triangular products and narrow outputs-only
// products, and with each chunk's mask computed twice by exps: 1.15-1.6x the fixed form's time at one thread).
template <class T> Run<T> gated_hla2_chunked(const Problem<T>& p, const ColVec<T>& token_gates, const Options& opt,
                                             const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  return std::move(hla2_chunked_heads<T>({&p.Q}, p.K, p.V, opt, {init}, &token_gates, how).front());
}

// ---- ahla ---------------------------------------------------------------------------------------------------
// o_t = Σ_{i≤t} Σ_{j≤i} Γ(t,j) (q_t·k_i)(q_i·k_j) v_j with the gated serial state entering the chunk,
// P0 = Σ_{j<c} Γ(c−1,j) k_j v_jᵀ, E0 = Σ_{j≤i<c} Γ(c−1,j) k_i (q_i·k_j) v_jᵀ (E_t = Σ_{i≤t} Γ(t,i) k_i q_iᵀ P_i and
// Γ(t,i) Γ(i,j) = Γ(t,j)). With A = L ⊙ Q Kᵀ (no gate inside: the weight depends on j and t only):
//   i, j < c         st(a) q_tᵀ E0
//   j < c ≤ i ≤ t    st(a) [A (Q P0)]_a
//   c ≤ j ≤ i ≤ t    [((A A) ⊙ F) [V 1]]_a
// After the chunk: P = g P0 + Kᵀ diag(en) [V 1], E = g E0 + g Kᵀ Q P0 + Kᵀ A diag(en) [V 1].
template <class T> Run<T> gated_ahla_chunked(const Problem<T>& p, const ColVec<T>& token_gates, const Options& opt,
                                             const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  using St = AhlaState<T>;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const ChunkGates<T> gates(token_gates, plan, how, threads);

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> P = join(st0.P, st0.m), E = join(st0.E, st0.n);
  Mat<T> Pb(d, NG * da), Eb(d, NG * da), Out(n, da);

  struct Ws {
    Mat<T> V, A, Mm, F, Y, Z;
    // A = L ⊙ Q Kᵀ of the chunk [c, c+len).
    auto causal_scores(const Problem<T>& pr, Eigen::Index c, Eigen::Index len) {
      auto Ac = A.topLeftCorner(len, len);
      auto Mc = Mm.topLeftCorner(len, len);
      Mc.noalias() = pr.Q.middleRows(c, len) * pr.K.middleRows(c, len).transpose();
      Ac = Mc.template triangularView<Eigen::Lower>();
      return Ac;
    }
  };
  auto make_ws = [&] {
    return Ws{Mat<T>(w, da), Mat<T>(w, w), Mat<T>(w, w), Mat<T>(w, w), Mat<T>(w, da), Mat<T>(w, da)};
  };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Chunk-local: ((A A) ⊙ F) [V 1], P_B = Kᵀ diag(en) [V 1], E_B = Kᵀ A diag(en) [V 1].
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk, c = plan.begin(k), len = plan.len(k);
      const auto K = p.K.middleRows(c, len);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto A = ws.causal_scores(p, c, len);
      auto F = ws.F.topLeftCorner(len, len);
      gates.decay_mask(k, F);
      auto Mm = ws.Mm.topLeftCorner(len, len);
      Mm.noalias() = A * A;
      Mm = Mm.cwiseProduct(F);
      Out.middleRows(c, len).noalias() = Mm * V;
      scale_rows<T>(V, gates.en.segment(c, len), true);
      Pb.middleCols(kk * da, da).noalias() = K.transpose() * V;
      auto Y = ws.Y.topRows(len);
      Y.noalias() = A * V;
      Eb.middleCols(kk * da, da).noalias() = K.transpose() * Y;
    });

    // 2. Carry P, then the coupling g Kᵀ (Q P0) into E_B, then carry E.
    carry(Pb, P, gates.g.data() + k0, cnt, true, threads);
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk, c = plan.begin(k), len = plan.len(k);
      auto Y = ws.Y.topRows(len);
      Y.noalias() = p.Q.middleRows(c, len) * Pb.middleCols(kk * da, da);
      Eb.middleCols(kk * da, da).noalias() += gates.g[k] * (p.K.middleRows(c, len).transpose() * Y);
    });
    carry(Eb, E, gates.g.data() + k0, cnt, true, threads);

    // 3. Carry-dependent outputs: diag(st) (Q E0 + A (Q P0)).
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index c = plan.begin(k0 + kk), len = plan.len(k0 + kk);
      const auto Q = p.Q.middleRows(c, len);
      auto A = ws.causal_scores(p, c, len);
      auto Y = ws.Y.topRows(len);
      auto Z = ws.Z.topRows(len);
      Y.noalias() = Q * Pb.middleCols(kk * da, da);
      Z.noalias() = Q * Eb.middleCols(kk * da, da);
      Z.noalias() += A * Y;
      scale_rows<T>(Z, gates.st.segment(c, len), true);
      Out.middleRows(c, len) += Z;
    });
  }
  St fin{P.leftCols(dv), P.rightCols(1), E.leftCols(dv), E.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

// The same forms on a GatedProblem (the gates beside the inputs; tests and hla verify's gated battery). The registry's
// entries call the forms above with the problem's own rows and gates: GatedProblem's copy of Q, K and V (split_gates)
// was a serial copy of 3 n×d matrices on every call, which at 16 threads took longer than the gated form itself
// (linear/chunked, float, n = 65536, d = dv = 64, H100 host: 9.0 ms gated against 3.8 ms at γ = 0.9).
template <class T>
Run<T> gated_linear_chunked(const GatedProblem<T>& g, const Options& o, const NamedState<T>* init, GateFactors how) {
  return gated_linear_chunked<T>(g.qkv, g.gamma, o, init, how);
}
template <class T>
Run<T> gated_hla2_chunked(const GatedProblem<T>& g, const Options& o, const NamedState<T>* init, GateFactors how) {
  return gated_hla2_chunked<T>(g.qkv, g.gamma, o, init, how);
}
template <class T>
Run<T> gated_ahla_chunked(const GatedProblem<T>& g, const Options& o, const NamedState<T>* init, GateFactors how) {
  return gated_ahla_chunked<T>(g.qkv, g.gamma, o, init, how);
}

}  // namespace hla::fast::chunked
