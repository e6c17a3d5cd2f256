// Runs one registered form on shared inputs and measures it against its operator's reference:
// exactly (same exact scalar) for rational/fp61, against MPFR-256 for mpfr256/double/float.
#pragma once

#include <chrono>
#include <optional>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "numerics/compare.hpp"

namespace hla {

struct Evaluation {
  ErrorStats error;
  double seconds = 0;  // wall time of the form alone
};

// The reference output of `op` in MPFR-256 for the given inputs (the yardstick of every rounded form).
inline Mat<mpfr256> mpfr_reference(const std::string& op, const Problem<double>& inputs, const Options& opt) {
  return registry<mpfr256>().reference(op)(convert_problem<mpfr256>(inputs), opt).O;
}

template <class T> Evaluation evaluate(const Entry<T>& e, const Problem<double>& inputs, const Options& opt,
                                       const Mat<mpfr256>* mpfr_ref = nullptr) {
  const Problem<T> p = convert_problem<T>(inputs);
  auto start = std::chrono::steady_clock::now();
  Run<T> r = e(p, opt);
  Evaluation ev;
  ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if constexpr (is_exact_v<T>) {
    ev.error = compare_exact(r.O, registry<T>().reference(e.op)(p, opt).O);
  } else {
    std::optional<Mat<mpfr256>> own;
    if (!mpfr_ref) own = mpfr_reference(e.op, inputs, opt);
    ev.error = compare_to(r.O, mpfr_ref ? *mpfr_ref : *own);
  }
  return ev;
}

}  // namespace hla
