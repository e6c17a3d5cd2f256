// The gate factors of the chunked forms under per-token gates γ_t (docs/operators.md "Gated (data-dependent)
// decay"), and ChunkDecay: one per-chunk decay for fixed γ and per-token gates alike, which the chunk forms read
// their masks, weights and carry factors from (hla2's u-form, fast/chunked/hla2.hpp, runs both through it).
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
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "fast/chunked/common.hpp"

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

// A chunked form's decay, chunk by chunk: fixed γ (D_γ, powers of γ, the same for every chunk; none at γ = 1) or
// per-token gates (ChunkGates: Γ of the same ages). s = 1 is the decay itself, s = 2 its square (hla2's C').
template <class T> class ChunkDecay {
 public:
  // Fixed γ, from the form's setup.
  explicit ChunkDecay(const ChunkSetup<T>& setup)
      : plan_(setup.plan),
        d1_(setup.dec),
        d2_(T(setup.gamma * setup.gamma), setup.w),
        g1_(setup.g),
        g2_(squares(g1_)) {}
  // Per-token gates (Options::gamma must be 1), their factors computed `how`, over the setup's threads.
  ChunkDecay(const ChunkSetup<T>& setup, const ColVec<T>& gates, GateFactors how) : ChunkDecay(setup) {
    gates_.emplace(gates, plan_, how, setup.threads);
    g1_ = gates_->g;
    g2_ = squares(g1_);
  }

  bool decays() const { return gates_ || d1_.decays; }
  bool gated() const { return gates_.has_value(); }
  // Per chunk: what the chunk does to a carried state decaying with the decay (s = 1) or its square (s = 2).
  const std::vector<T>& factors(int s) const { return s == 1 ? g1_ : g2_; }

  // P ← P ⊙ D^s over chunk k's L×L causal mask (lower triangle; D_γ, or Γ(c+a, c+b)). `scratch`: w×w, for the gates'.
  template <class M> void mask(Eigen::Index k, int s, M&& P, Mat<T>& scratch) const {
    const Eigen::Index len = plan_.len(k);
    if (!gates_) {
      if (d1_.decays) P = P.cwiseProduct((s == 1 ? d1_ : d2_).D.topLeftCorner(len, len));
      return;
    }
    auto F = scratch.topLeftCorner(len, len);
    gates_->decay_mask(k, F);
    if (s == 1)
      P = P.cwiseProduct(F);
    else
      P = P.cwiseProduct(F).cwiseProduct(F);
  }
  // x(b) = the decay^s from token b of chunk k to the chunk's last token: γ^{s(len−1−b)}, en(b)^s.
  template <class X> void to_end(Eigen::Index k, int s, X&& x) const {
    const Eigen::Index len = plan_.len(k);
    if (!gates_) return (s == 1 ? d1_ : d2_).to_end(len, x);
    x = gates_->en.segment(plan_.begin(k), len);
    if (s == 2) x = x.cwiseProduct(x);
  }
  // x(a) = the decay^s from the state entering chunk k to its token a: γ^{s(a+1)}, st(a)^s.
  template <class X> void after_start(Eigen::Index k, int s, X&& x) const {
    const Eigen::Index len = plan_.len(k);
    if (!gates_) return d1_.after_start(len, s, x);
    x = gates_->st.segment(plan_.begin(k), len);
    if (s == 2) x = x.cwiseProduct(x);
  }

 private:
  const ChunkPlan& plan_;
  const Decay<T>& d1_;
  Decay<T> d2_;  // γ²
  std::vector<T> g1_, g2_;
  std::optional<ChunkGates<T>> gates_;
};

}  // namespace hla::fast::chunked
