// Asymmetric second order (AHLA), chunked matrix form with decay γ and normalization — derived from
// SPEC's o_t = Σ_{i≤t} Σ_{j≤i} γ^{t−j} (q_t·k_i)(q_i·k_j) v_j.
//
// State entering a chunk at token c (Algorithm 2's state at c−1): P0 = Σ_{j<c} γ^{c−1−j} k_j v_jᵀ,
// E0 = Σ_{j≤i<c} γ^{c−1−j} k_i (q_i·k_j) v_jᵀ. With local positions a, α, b and A = L ⊙ W, W = Q Kᵀ:
//   i, j < c           γ^{a+1} q_tᵀ E0
//   j < c ≤ i ≤ t      γ^{a+1} Σ_{α≤a} (q_t·k_α) q_αᵀ P0 = γ^{a+1} [A (Q P0)]_a
//   c ≤ j ≤ i ≤ t      Σ γ^{a−b} W_{aα} W_{αb} v_b = [((A A) ⊙ D) V]_a
// so O = diag(γ^{a+1}) (Q E0 + A Q P0) + ((A A) ⊙ D) V: Figure 2(C) with R^{KQ}_{≤t} (i ≤ t, including t)
// and decay. After the chunk (g = γ^len, x_b = γ^{len−1−b}):
//   P = g P0 + Kᵀ diag(x) V,  E = g E0 + g Kᵀ Q P0 + Kᵀ A diag(x) V   (eq. 6.2 with R_B = Kᵀ Q, decayed).
// m, n and the normalizer ride along as a column of ones appended to V.
#pragma once

#include "fast/chunked/common.hpp"
#include "fast/serial/ahla.hpp"

namespace hla::fast::chunked {

// Per-thread scratch of the AHLA chunk computations.
template <class T> struct AhlaWorkspace {
  Mat<T> V, W, A, Mm, Y;
  ColVec<T> x;
  AhlaWorkspace(Eigen::Index w, Eigen::Index da) : V(w, da), W(w, w), A(w, w), Mm(w, w), Y(w, da), x(w) {}
  // A = L ⊙ Q Kᵀ of the chunk [c, c+len).
  auto causal_scores(const Problem<T>& p, Eigen::Index c, Eigen::Index len) {
    auto Wc = W.topLeftCorner(len, len);
    auto Ac = A.topLeftCorner(len, len);
    Wc.noalias() = p.Q.middleRows(c, len) * p.K.middleRows(c, len).transpose();
    Ac = Wc.template triangularView<Eigen::Lower>();
    return Ac;
  }
};

// One chunk from a zero incoming state: ((A A) ⊙ D) [V 1] into `out`; P_B = Kᵀ diag(x) [V 1],
// E_B = Kᵀ A diag(x) [V 1], x_b = γ^{len−1−b}.
template <class T, class Out, class PB, class EB>
void ahla_chunk_local(const Problem<T>& p, Eigen::Index c, Eigen::Index len, const Decay<T>& dec, AhlaWorkspace<T>& ws,
                      Out&& out, PB&& Pb, EB&& Eb) {
  const auto K = p.K.middleRows(c, len);
  auto V = ws.V.topRows(len);
  values_with_ones<T>(p.V.middleRows(c, len), V);
  auto A = ws.causal_scores(p, c, len);
  auto Mm = ws.Mm.topLeftCorner(len, len);
  Mm.noalias() = A * A;
  Mm = Mm.cwiseProduct(dec.D.topLeftCorner(len, len));
  out.noalias() = Mm * V;
  auto x = ws.x.head(len);
  dec.to_end(len, x);
  scale_rows<T>(V, x, dec.decays);  // V ← diag(x) V
  Pb.noalias() = K.transpose() * V;
  auto Y = ws.Y.topRows(len);
  Y.noalias() = A * V;
  Eb.noalias() = K.transpose() * Y;
}

template <class T> Run<T> ahla_chunked(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = AhlaState<T>;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> P = join(st0.P, st0.m), E = join(st0.E, st0.n);
  Mat<T> Pb(d, NG * da), Eb(d, NG * da), Out(p.n(), da);

  auto make_ws = [&] { return AhlaWorkspace<T>(w, da); };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Chunk-local: ((A A) ⊙ D) V and the chunk's own P_B, E_B.
    for_chunks(cnt, threads, make_ws, [&](AhlaWorkspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      ahla_chunk_local(p, c, len, dec, ws, Out.middleRows(c, len), Pb.middleCols(kk * da, da),
                       Eb.middleCols(kk * da, da));
    });

    // 2. Carry P, then the coupling g Kᵀ (Q P0) into E_B, then E.
    carry(Pb, P, g.data() + k0, cnt, decays, threads);
    for_chunks(cnt, threads, make_ws, [&](AhlaWorkspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      auto Y = ws.Y.topRows(len);
      Y.noalias() = p.Q.middleRows(c, len) * Pb.middleCols(kk * da, da);
      if (decays)
        Eb.middleCols(kk * da, da).noalias() += g[k] * (p.K.middleRows(c, len).transpose() * Y);
      else
        Eb.middleCols(kk * da, da).noalias() += p.K.middleRows(c, len).transpose() * Y;
    });
    carry(Eb, E, g.data() + k0, cnt, decays, threads);

    // 3. Carry-dependent outputs: diag(γ^{a+1}) (Q E0 + A (Q P0)).
    for_chunks(cnt, threads, make_ws, [&](AhlaWorkspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      auto A = ws.causal_scores(p, c, len);
      auto Y = ws.Y.topRows(len);
      auto Z = ws.V.topRows(len);
      Y.noalias() = Q * Pb.middleCols(kk * da, da);
      Z.noalias() = Q * Eb.middleCols(kk * da, da);
      Z.noalias() += A * Y;
      auto x = ws.x.head(len);
      dec.after_start(len, 1, x);
      scale_rows<T>(Z, x, decays);
      Out.middleRows(c, len) += Z;
    });
  }
  St fin{P.leftCols(dv), P.rightCols(1), E.leftCols(dv), E.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

}  // namespace hla::fast::chunked
