// Backward points of a sweep (axis `backward` = serial | checkpointed | scan; experiments/README.md):
// the gradients of L = Σ_t ⟨dO_t, o_t⟩ through the operator's serial form, timed and measured like a
// forward point, with the checkpoints and states the pass keeps, and (n ≤ gradient_max_n) the error of
// every gradient entry against an MPFR-256 reference gradient and its rounding-error bound.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "experiments/lib/sweep.hpp"

namespace hla::sweep {

// Caches the MPFR reference gradients and the fp61 verdicts over a sweep's points.
class BackwardEvaluator {
 public:
  explicit BackwardEvaluator(const ReferenceLimits& lim);
  ~BackwardEvaluator();
  // Fills f's measurement columns for a backward point. `form_exact`: the fp61 verdict (yes/no/n/a) that
  // the serial form with the point's variant and options is SPEC's operator.
  void evaluate(const Point& pt, const Problem<double>& inputs, const std::string& form_exact,
                std::map<std::string, std::string>& f);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hla::sweep
