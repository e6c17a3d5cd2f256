// `hla verify --grad`: the gradients an outside backward pass is held to, and their bounds.
//
// Loss L = Σ_t ⟨dO_t, o_t⟩ for the case's upstream gradient dO (do.npy); the implementation returns
// ∂L/∂Q, ∂L/∂K, ∂L/∂V (dq.npy, dk.npy, dv.npy) and, from a given state, optionally ∂L/∂state_in.
//
// Expected values: the harness's serial backward (fast/backward) in exact rationals (exact cases) or MPFR-256,
// which the ledger proves equal to the reference's own derivatives (claims hla2.backward*, ahla.backward;
// numerics/gradient_checks.hpp). Operators: hla2, ahla, linear — the ones with a backward.
//
// Bounds (per entry), by the forward's argument (numerics/bounds.hpp): every backward of the operator adds up
// monomials of the unmasked expansion's derivative, and the serial backward run on magnitudes
// (fast/backward/magnitude.hpp: |Q|, |K|, |V|, |dO|, |state|) bounds their absolute sum M — hla2's serial
// backward carries S_t C_t and G_t, the unmasked terms, before they cancel — so |error| ≤ γ_h · 2M, with h the
// larger of the magnitude run's own depth and twice the forward's serial depth. Normalized: o = N/D is the
// unnormalized operator on [V 1] read with upstream g = (dO/D, −⟨dO, N⟩/D²), so ∂L/∂x is an unnormalized
// gradient with that upstream; its bound is γ_h · 2M(|g|) plus M(δg), the error of g (from the forward
// bounds of N and D) carried through the same magnitudes.
//
// With per-token gates (--gates; `gates` given, opt.gamma 1): the gated serial backward (fast/backward/gated.hpp),
// which also gives ∂L/∂γ_t (dgamma.npy, optional: judged when returned), in exact rationals or MPFR-256, and the same
// bounds from the same backward run on magnitudes with the case's gates. dgamma's bound also covers kernels written in
// cumulative log-gates (exp(G_t − G_s), the stable form), whose ∂/∂log γ_r reaches every pair s < t with r ≤ t —
// pairs with r ≤ s cancel exactly, but not in rounding: (e/γ_r) Σ_{t≥r} Σ_j |upstream_tj| A_tj, e the largest power of
// one gate in a term (2 for hla2, else 1), A the abs operator per output entry (`abs_terms`, n × (dv + 1)).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/types.hpp"

namespace hla::verify::ext {

bool has_gradient_battery(const std::string& op);

struct GradientValues {
  Mat<mpfr256> dQ, dK, dV;
  Mat<mpfr256> dgamma;         // --gates: ∂L/∂γ_t (n × 1)
  NamedState<mpfr256> dstate;  // ∂L/∂state_in (from a given state)
};
struct GradientBounds {
  Mat<double> dQ, dK, dV;
  Mat<double> dgamma;         // --gates (n × 1)
  NamedState<double> dstate;  // unnormalized only (empty: not checked)
};

// ∂L/∂(Q, K, V, state_in) exactly (exact = true: rationals; else MPFR-256) for op with options opt, the
// given inputs, upstream dO and state (nullptr: zero).
GradientValues expected_gradients(const std::string& op, const Problem<double>& in, const Options& opt,
                                  const NamedState<double>* init, const Mat<double>& dO, bool exact,
                                  const ColVec<double>* gates = nullptr);

// The per-entry bounds above: u the roundoff, h the forward's serial depth, forward the exact numerator and
// denominator (n × (dv+1), N then den + ε, for normalized options), forward_bound the forward's own per-entry
// bound of those (n × (dv+1)), eps the stabilizer.
GradientBounds gradient_bounds(const std::string& op, const Problem<double>& in, const Options& opt,
                               const NamedState<double>* init, const Mat<double>& dO, double u, long h,
                               const Mat<mpfr256>* forward, const Mat<double>* forward_bound,
                               const ColVec<double>* gates = nullptr, const Mat<double>* abs_terms = nullptr);

// Adds an absolute `floor` to every bound (the format's underflow: a rounding below its smallest normal number errs
// by up to the subnormal spacing whatever u says).
void add_underflow_floor(GradientBounds& b, double floor);

// What a wrong backward pass computes instead: candidates evaluated exactly on the small exact cases, each
// giving all three gradients, compared per returned matrix (dq, dk, dv).
//   the gradients of another forward: Algorithm 1's decay rule as printed, no decay, decay squared, the unmasked
//   operator (hla2), another operator, a chunk form without its carry (state restarted every w tokens)
//   backward-only mistakes: the normalizer detached from the graph (treated as a constant), dq and dk swapped
struct ExactGradients {
  Mat<rational> dQ, dK, dV;
};
struct GradientCandidate {
  std::string key, description, claim;
  std::function<std::optional<ExactGradients>(const Problem<rational>&, const Options&, const Mat<rational>& dO)> eval;
};
std::vector<GradientCandidate> gradient_candidates(const std::string& op);

// The largest magnitude M of the gradient's terms (for an exact case's magnitude limit).
double gradient_magnitude(const std::string& op, const Problem<double>& in, const Options& opt, const Mat<double>& dO,
                          const ColVec<double>* gates = nullptr);

}  // namespace hla::verify::ext
