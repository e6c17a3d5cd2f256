// Building blocks of the claim checks: "form A equals form B" decided by identity testing, with
// counterexample and floating-point evidence; log–log fits for cost claims.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "claims/claims.hpp"
#include "claims/counterexample.hpp"
#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "numerics/identity.hpp"

namespace hla::verify {

// A registered form: operator, form, variant ("" = the paper's or the definition).
struct FormRef {
  std::string op, form, variant;
  std::string name() const { return op + "/" + form + (variant.empty() ? "" : "/" + variant); }
};

// Which options the identity ranges over. Parameters switched on are drawn at random (field-uniform in
// F_p; γ = 1/2, ε = 1/8, λ = 1/2 in the rational counterexample search).
struct ParamSpace {
  bool decay = false, normalized = false, ridge = false;
  std::vector<int> chunks{16};  // every chunk width is checked (scan/chunked forms)
  std::vector<int> threads{1};
  std::string describe() const;
};

// Evaluates `form` on p under opt once per (chunk, threads) in the space, rows stacked.
template <class T>
Mat<T> run_stacked(const FormRef& f, const Problem<T>& p, const Options& opt, const ParamSpace& space);

// Upper bound on the total degree of either side's entries, as polynomials in inputs and parameters.
int identity_degree(const std::string& op, Eigen::Index n, const ParamSpace& space);

// One column from single-column parts, in order (the sides of a claim that compares several computations at once).
template <class T> Mat<T> stack_rows(const std::vector<Mat<T>>& parts) {
  Eigen::Index rows = 0;
  for (const auto& m : parts) rows += m.rows();
  Mat<T> out(rows, 1);
  Eigen::Index at = 0;
  for (const auto& m : parts) {
    out.middleRows(at, m.rows()) = m;
    at += m.rows();
  }
  return out;
}

// The identity tester's shapes: awkward sizes, d ≠ dv, n = 1, n not a multiple of the chunk widths.
std::vector<Shape> identity_shapes(bool quick);

// Decides lhs = rhs over the space. Verdict holds/fails; a failure carries the smallest rational
// counterexample found and floating-point evidence of the size of the disagreement.
ClaimResult check_equal(const FormRef& lhs, const FormRef& rhs, const ParamSpace& space, const LedgerContext& ctx,
                        const std::string& method_note = "");

// The same, for two arbitrary field/rational evaluations (claims whose sides are not registered forms).
struct CustomSides {
  std::string lhs_name, rhs_name;
  FieldEvaluation field;
  RationalEvaluation rational_eval;  // for the counterexample search (may be empty)
  std::function<int(const Shape&)> degree;
};
ClaimResult check_custom(const CustomSides& sides, const std::vector<Shape>& shapes, const LedgerContext& ctx,
                         const std::string& method);

nlohmann::json counterexample_json(const Counterexample& c, const std::string& options, const std::string& lhs_name,
                                   const std::string& rhs_name);

// Least-squares fit of log(y) = a + b log(x): exponent b, RMS residual in log space, and the standard error of b
// (infinite with fewer than 3 points).
struct PowerFit {
  double exponent = 0, intercept = 0, rms_residual = 0, exponent_std_error = 0;
};
PowerFit fit_power(const std::vector<double>& x, const std::vector<double>& y);

// A growth claim decided from timings. Thread-CPU time keeps other processes' time out, but not their effect on the
// caches, the memory bus and the clock, so a verdict must not flip with the machine's load: the claim fails only on a
// failure that reproduces — `measure` (which times the series again and fits it) is called a second time, and both fits
// must be clean (rms residual ≤ 0.25) and miss the claim by more than twice the exponent's standard error. A noisy fit,
// or a failure the repeat does not reproduce, is inconclusive, and `reason` says which, with the load
// (/proc/loadavg) around the measurements. "Exactly like x^e" needs |b − e| ≤ tol; an O(x^e) bound (upper_bound_only)
// needs only b ≤ e + tol.
struct GrowthVerdict {
  ClaimVerdict verdict = ClaimVerdict::inconclusive;
  std::string reason;
  std::vector<PowerFit> fits;  // one, or two when a failure was measured again
};
GrowthVerdict decide_growth(const std::function<PowerFit()>& measure, double expected, double tol,
                            bool upper_bound_only = false);

// Median thread-CPU time per call of f over `repeats` samples (after one warm-up); see the .cpp.
double median_seconds(const std::function<void()>& f, int repeats);

}  // namespace hla::verify
