// Chunked forms of the gated operators (docs/operators.md "Gated (data-dependent) decay"): linear, hla2 and ahla
// with per-token gates γ_t, in the two-level scheme of fast/chunked/common.hpp — per chunk, an intra-chunk
// product weighted by the gate products Γ, a carry of each chunk's summary across chunks, and the outputs from
// the state entering each chunk. Each is the fixed-γ chunk form of its operator (docs/operators.md "Chunk forms";
// linear.hpp, hla2.hpp's u-form, ahla.hpp) with every γ-power replaced by the Γ of the same ages.
//
// For a chunk [c, c+len) with local positions a (output) and b (source), the forms need only
//   F(a, b)  = Γ(c+a, c+b) for b ≤ a, 0 above the diagonal     (the fixed forms' D_{ab} = γ^{a−b})
//   st(a)    = Γ(c+a, c−1) = γ_c ⋯ γ_{c+a}                     (the incoming state seen from position a; γ^{a+1})
//   en(b)    = Γ(c+len−1, c+b)                                  (token b seen from the chunk's end; γ^{len−1−b})
//   g        = Γ(c+len−1, c−1)                                  (what the chunk does to a carried state; γ^{len})
// All of them are ≤ 1. How they are computed is the one choice (GateFactors) that differs between scalars:
//   products       exact scalars (rational, fp61; no log/exp): products of gates within the chunk, no division
//   log_stable     floating scalars: L_a = Σ_{r=0..a} log γ_{c+r}, reset at each chunk start; st, en and g are
//                  exp of L_a, of L_e − L_a ≤ 0 and of L_e. The mask F(a, b) = exp(L_a − L_b) (b ≤ a; 0 above the
//                  diagonal, never exponentiated) is, in a chunk whose whole log mass −L_e keeps exp(L_a) and
//                  exp(−L_b) normal numbers (kFactorizedMass), the product st(a) · exp(−L_b) of two per-token
//                  exps: 2w exps per chunk instead of w(w−1)/2, the mask then w² products (measured below at
//                  ChunkGates::decay_mask). A chunk of stronger gates takes the exp of each difference instead.
//                  Either way nothing overflows, and no cumulative product over the call is divided by
//   naive_cumprod  P_t = γ_0 ⋯ γ_t over the whole call and every factor a quotient P_t / P_s — the formulation
//                  many kernels start with. P underflows after a long span of strong gates (float: Σ −log γ
//                  ≈ 87..103), its quotients lose accuracy and then become 0/0 = NaN. Only for measuring that;
//                  never a default (stable_gate_factors).
// The states are the gated serial forms' (fast/serial/gated.hpp), part by part, so split-and-carry works and
// states compare exactly with the serial forms in rationals and F_p.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/gates.hpp"
#include "fast/chunked/common.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/serial/ahla.hpp"
#include "fast/serial/linear.hpp"
#include "reference/gated.hpp"

namespace hla::fast::chunked {

enum class GateFactors { products, log_stable, naive_cumprod };

// What rows [r0, r1) do to a state carried through them (a segment's ρ): γ^{r1−r0} without gates, else the product
// of their gates (the gated scan operator's segment decay; the ρ of an MPI rank's block and of a fused pass's block).
template <class T> T segment_decay(const ColVec<T>& gates, const T& gamma, Eigen::Index r0, Eigen::Index r1) {
  if (gates.size() == 0) return power(gamma, r1 - r0);
  T rho(1);
  for (Eigen::Index t = r0; t < r1; ++t) rho *= gates(t);
  return rho;
}

// The stable way for scalar T: exact products where there is no log/exp (and none is needed), log-domain
// differences where there is.
template <class T> constexpr GateFactors stable_gate_factors() {
  if constexpr (has_exp_v<T>)
    return GateFactors::log_stable;
  else
    return GateFactors::products;
}

// The factors of every chunk of one call: st and en per token (for the token's own chunk), g per chunk, and
// F(a, b) filled on demand for one chunk (w² numbers per chunk are not stored).
template <class T> class ChunkGates {
 public:
  // threads: the chunks' factors are independent of each other (L restarts at each chunk) and are computed in
  // parallel (n logs and 3n exps: serial, they were a fixed cost every thread of a threaded form waited for);
  // the naive cumulative product runs over the whole call, serially.
  ChunkGates(const ColVec<T>& gamma, const ChunkPlan& plan, GateFactors how, int threads = 1)
      : gamma_(gamma), plan_(plan), how_(how), st(gamma.size()), en(gamma.size()), g(plan.count) {
    if constexpr (!has_exp_v<T>) {
      if (how != GateFactors::products)
        throw InputError("gated chunked forms: " + scalar_name<T>() + " has no log/exp; its gate factors are products");
    }
    const Eigen::Index n = gamma.size();
    aux_.resize(n);
    if (how == GateFactors::log_stable) inv_.resize(n);
    if (how == GateFactors::naive_cumprod) {
      aux_(0) = gamma(0);  // P_t = γ_0 ⋯ γ_t over the whole call (P_{−1} = 1)
      for (Eigen::Index t = 1; t < n; ++t) aux_(t) = aux_(t - 1) * gamma(t);
    }
    const bool parallel = threads > 1 && how != GateFactors::naive_cumprod;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
    for (Eigen::Index k = 0; k < plan.count; ++k) chunk_factors(k);
  }

  // F(a, b) = Γ(c+a, c+b) for b ≤ a and 0 above the diagonal, for chunk k (F is len×len).
  // In floating point, where the chunk's mass allows (factorized(k)), F(a, b) = st(c+a) · exp(−L_b): each factor is
  // then exp(L_a − L_b) e^δ with |δ| ≤ the two L's errors, which the difference's own error bound already counted,
  // times three roundings (two exps within 1 ulp each and the product) where the difference's exp had one ulp —
  // numerics/bounds.hpp's log_gate_depth counts five per factor. Measured with the parallel factors and hla2_fused's
  // narrower outputs-only products (hla_bench, n = 65536, d = dv = 64, gates in 0.8..1 against γ = 0.9, one thread,
  // medians of three alternating runs of each build, a 2-core VM under load): hla2/chunked-fused float 74.2 → 66.3 ms
  // (γ = 0.9: 62.8 / 63.6), double 146 → 122 (125 / 119).
  template <class Out> void decay_mask(Eigen::Index k, Out&& F) const {
    const Eigen::Index c = plan_.begin(k), len = plan_.len(k);
    if (factorized(k)) {
      for (Eigen::Index b = 0; b < len; ++b) {  // column by column: contiguous, vectorized
        auto col = F.col(b);
        col.head(b).setZero();
        col(b) = T(1);
        col.segment(b + 1, len - b - 1) = st.segment(c + b + 1, len - b - 1) * inv_(c + b);
      }
      return;
    }
    F.setZero();
    for (Eigen::Index a = 0; a < len; ++a) {
      F(a, a) = T(1);
      switch (how_) {
        case GateFactors::products:  // Γ(c+a, c+b) = γ_{c+b+1} Γ(c+a, c+b+1)
          for (Eigen::Index b = a - 1; b >= 0; --b) F(a, b) = gamma_(c + b + 1) * F(a, b + 1);
          break;
        case GateFactors::log_stable:
          if constexpr (has_exp_v<T>) {
            using std::exp;
            for (Eigen::Index b = 0; b < a; ++b) F(a, b) = T(exp(T(aux_(c + a) - aux_(c + b))));
          }
          break;
        case GateFactors::naive_cumprod:
          for (Eigen::Index b = 0; b < a; ++b) F(a, b) = aux_(c + a) / aux_(c + b);
          break;
      }
    }
  }

  // Whether chunk k's mask is the product of per-token factors (decay_mask): in float and double, when the chunk's
  // log mass −L_e is small enough that exp(L_a) and exp(−L_b) are normal numbers for every a, b of it (−L_e below
  // 0.9 × −log of the smallest normal number: 78.6 in float, 637 in double).
  bool factorized(Eigen::Index k) const {
    if constexpr (std::is_floating_point_v<T>) {  // not MPFR: its results stay those of the differences
      if (how_ != GateFactors::log_stable) return false;
      constexpr T limit = T(0.9) * -(std::numeric_limits<T>::min_exponent - 1) * T(0.6931471805599453);
      return aux_(plan_.begin(k) + plan_.len(k) - 1) >= -limit;
    }
    return false;
  }

 private:
  const ColVec<T>& gamma_;
  const ChunkPlan& plan_;
  GateFactors how_;
  ColVec<T> aux_;  // log_stable: L within each chunk; naive_cumprod: P over the call; products: unused
  ColVec<T> inv_;  // log_stable: exp(−L) per token (0 where the chunk is not factorized)

  // st, en and g of chunk k (and, log_stable, L and exp(−L)); writes only the chunk's own entries.
  void chunk_factors(Eigen::Index k) {
    const Eigen::Index c = plan_.begin(k), len = plan_.len(k), e = c + len - 1;
    const ColVec<T>& gamma = gamma_;
    switch (how_) {
      case GateFactors::products:
        st(c) = gamma(c);
        for (Eigen::Index t = c + 1; t <= e; ++t) st(t) = st(t - 1) * gamma(t);
        en(e) = T(1);
        for (Eigen::Index t = e - 1; t >= c; --t) en(t) = gamma(t + 1) * en(t + 1);
        g[k] = st(e);
        break;
      case GateFactors::log_stable:
        if constexpr (has_exp_v<T>) {
          using std::exp, std::log;
          aux_(c) = T(log(gamma(c)));  // L, reset at the chunk's start
          for (Eigen::Index t = c + 1; t <= e; ++t) aux_(t) = aux_(t - 1) + T(log(gamma(t)));
          const bool fact = factorized(k);
          for (Eigen::Index t = c; t <= e; ++t) {
            st(t) = T(exp(aux_(t)));
            en(t) = T(exp(T(aux_(e) - aux_(t))));  // L_e − L_t ≤ 0: L never increases (log γ ≤ 0)
            inv_(t) = fact ? T(exp(T(-aux_(t)))) : T(0);
          }
          g[k] = st(e);
        }
        break;
      case GateFactors::naive_cumprod: {
        const T before = c > 0 ? aux_(c - 1) : T(1);
        for (Eigen::Index t = c; t <= e; ++t) {
          st(t) = aux_(t) / before;
          en(t) = aux_(e) / aux_(t);
        }
        g[k] = aux_(e) / before;
        break;
      }
    }
  }

 public:
  ColVec<T> st, en;  // per token t of chunk k: st(t) = Γ(t, c−1), en(t) = Γ(c+len−1, t)
  std::vector<T> g;  // per chunk: Γ(c+len−1, c−1)
};

// The carry of a part that decays with Γ² (hla2's C'): the squares of every factor.
template <class T> std::vector<T> squares(const std::vector<T>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * x[i];
  return y;
}

// ---- linear -------------------------------------------------------------------------------------------------
// o_t = Σ_{j≤t} Γ(t,j) (q_t·k_j) v_j splits at a chunk starting at c into
//   j < c:   st(a) q_tᵀ S0               (Γ(t,j) = Γ(t,c−1) Γ(c−1,j); S0 the gated serial S at c−1)
//   j ≥ c:   [((Q Kᵀ) ⊙ F) [V 1]]_a
// and S = g S0 + Kᵀ diag(en) [V 1] (z rides along as the last column).
template <class T>
Run<T> gated_linear_chunked(const GatedProblem<T>& gp, const Options& opt, const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  using St = LinearState<T>;
  const Problem<T>& p = gp.qkv;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const ChunkGates<T> gates(gp.gamma, plan, how, threads);

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
// and the final state in the serial form's terms: G = S C − C', h = S m − m' (Hla2UStart for the way in).
template <class T>
Run<T> gated_hla2_chunked(const GatedProblem<T>& gp, const Options& opt, const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  const Problem<T>& p = gp.qkv;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const ChunkGates<T> gates(gp.gamma, plan, how, threads);
  const std::vector<T> g2 = squares(gates.g);
  const T lambda = from_rational<T>(opt.ridge);
  const bool ridge = opt.ridge != 0;

  Hla2UStart<T> st0(init, d, dv);
  Mat<T> S = std::move(st0.S), C = std::move(st0.C), Cp = std::move(st0.Cp);
  Mat<T> Sb(d, NG * d), Cb(d, NG * da), Cpb(d, NG * da), Ub(NG * w, d), Out(n, da);

  struct Ws {
    Mat<T> V, Vd, Kd, Qs, W, F, R;
  };
  auto make_ws = [&] {
    return Ws{Mat<T>(w, da), Mat<T>(w, da), Mat<T>(w, d), Mat<T>(w, d), Mat<T>(w, w), Mat<T>(w, w), Mat<T>(w, w)};
  };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // (A) S_B = Kᵀ diag(en) K; carry S.
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index c = plan.begin(k0 + kk), len = plan.len(k0 + kk);
      const auto K = p.K.middleRows(c, len);
      auto Kd = ws.Kd.topRows(len);
      Kd = K;
      scale_rows<T>(Kd, gates.en.segment(c, len), true);
      Sb.middleCols(kk * d, d).noalias() = Kd.transpose() * K;
    });
    carry(Sb, S, gates.g.data() + k0, cnt, true, threads);

    // (B) U; C'_B = Uᵀ diag(en²) [V 1]; C_B = Qᵀ diag(en) [V 1]; carry C' (by g²) and C (by g).
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk, c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      const auto K = p.K.middleRows(c, len);
      auto F = ws.F.topLeftCorner(len, len);
      gates.decay_mask(k, F);
      auto W = ws.W.topLeftCorner(len, len);
      W.noalias() = Q * K.transpose();
      W = W.cwiseProduct(F);
      auto U = Ub.middleRows(kk * w, len);
      U.noalias() = W * K;
      auto Qs = ws.Qs.topRows(len);
      Qs = Q;
      scale_rows<T>(Qs, gates.st.segment(c, len), true);
      U.noalias() += Qs * Sb.middleCols(kk * d, d);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto Vd = ws.Vd.topRows(len);
      Vd = V;
      scale_rows<T>(Vd, gates.en.segment(c, len), true);
      Cb.middleCols(kk * da, da).noalias() = Q.transpose() * Vd;
      scale_rows<T>(Vd, gates.en.segment(c, len), true);  // en² = Γ(c+len−1, c+b)²
      Cpb.middleCols(kk * da, da).noalias() = U.transpose() * Vd;
    });
    carry(Cpb, Cp, g2.data() + k0, cnt, true, threads);
    carry(Cb, C, gates.g.data() + k0, cnt, true, threads);

    // (C) out = ((Q Uᵀ) ⊙ F² [+ λ (Q Qᵀ) ⊙ F]) [V 1] + diag(st²) Q C'0 [+ λ diag(st) Q C0].
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk, c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      const auto U = Ub.middleRows(kk * w, len);
      auto F = ws.F.topLeftCorner(len, len);
      gates.decay_mask(k, F);
      auto W = ws.W.topLeftCorner(len, len);
      W.noalias() = Q * U.transpose();
      W = W.cwiseProduct(F).cwiseProduct(F);
      if (ridge) {
        auto R = ws.R.topLeftCorner(len, len);
        R.noalias() = Q * Q.transpose();
        W += lambda * R.cwiseProduct(F);
      }
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto out = Out.middleRows(c, len);
      out.noalias() = W * V;
      auto Qs = ws.Qs.topRows(len);
      Qs = Q;
      scale_rows<T>(Qs, gates.st.segment(c, len), true);
      if (ridge) out.noalias() += lambda * (Qs * Cb.middleCols(kk * da, da));
      scale_rows<T>(Qs, gates.st.segment(c, len), true);  // st² = Γ(c+a, c−1)²
      out.noalias() += Qs * Cpb.middleCols(kk * da, da);
    });
  }
  const Mat<T> G = S * C - Cp;  // back to the serial state's terms
  const Hla2State<T, true> fin{S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<Hla2State<T, true>, T>(fin)};
}

// ---- ahla ---------------------------------------------------------------------------------------------------
// o_t = Σ_{i≤t} Σ_{j≤i} Γ(t,j) (q_t·k_i)(q_i·k_j) v_j with the gated serial state entering the chunk,
// P0 = Σ_{j<c} Γ(c−1,j) k_j v_jᵀ, E0 = Σ_{j≤i<c} Γ(c−1,j) k_i (q_i·k_j) v_jᵀ (E_t = Σ_{i≤t} Γ(t,i) k_i q_iᵀ P_i and
// Γ(t,i) Γ(i,j) = Γ(t,j)). With A = L ⊙ Q Kᵀ (no gate inside: the weight depends on j and t only):
//   i, j < c         st(a) q_tᵀ E0
//   j < c ≤ i ≤ t    st(a) [A (Q P0)]_a
//   c ≤ j ≤ i ≤ t    [((A A) ⊙ F) [V 1]]_a
// After the chunk: P = g P0 + Kᵀ diag(en) [V 1], E = g E0 + g Kᵀ Q P0 + Kᵀ A diag(en) [V 1].
template <class T>
Run<T> gated_ahla_chunked(const GatedProblem<T>& gp, const Options& opt, const NamedState<T>* init, GateFactors how) {
  reference::require_no_scalar_decay(opt);
  using St = AhlaState<T>;
  const Problem<T>& p = gp.qkv;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const ChunkGates<T> gates(gp.gamma, plan, how, threads);

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

}  // namespace hla::fast::chunked
