// One error metric everywhere: a result in scalar T against a high-precision (MPFR) or exact reference.
#pragma once

#include <algorithm>
#include <string>

#include "core/types.hpp"

namespace hla {

struct ErrorStats {
  double max_abs = 0;        // max_{t,c} |o − r|
  double max_rel = 0;        // max over entries with r ≠ 0 of |o − r| / |r|
  double normwise_rel = 0;   // max|o − r| / max|r|  (0 when the reference is identically 0 and o = r)
  double in_units_of_u = 0;  // normwise_rel / u  (u = unit roundoff of T; 0 for exact types)
  bool exact_equal = false;  // all entries equal exactly (exact scalars), or all errors 0
  long mismatches = 0;       // entries that differ
};

// Exact comparison, for rational or prime-field results against a reference in the same type.
template <class T> ErrorStats compare_exact(const Mat<T>& got, const Mat<T>& ref) {
  ErrorStats e;
  if (got.rows() != ref.rows() || got.cols() != ref.cols()) {
    e.mismatches = -1;
    return e;
  }
  for (Eigen::Index i = 0; i < got.size(); ++i)
    if (got(i) != ref(i)) ++e.mismatches;
  e.exact_equal = e.mismatches == 0;
  return e;
}

// Rounded result against an MPFR reference of the same inputs.
template <class T> ErrorStats compare_to(const Mat<T>& got, const Mat<mpfr256>& ref) {
  ErrorStats e;
  if (got.rows() != ref.rows() || got.cols() != ref.cols()) {
    e.mismatches = -1;
    return e;
  }
  mpfr256 max_err(0), max_ref(0), max_rel(0);
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    mpfr256 r = ref(i), err = abs(to_mpfr(got(i)) - r);
    if (err != 0) ++e.mismatches;
    max_err = std::max(max_err, err);
    max_ref = std::max(max_ref, mpfr256(abs(r)));
    if (r != 0) max_rel = std::max(max_rel, mpfr256(err / abs(r)));
  }
  e.max_abs = max_err.template convert_to<double>();
  e.max_rel = max_rel.template convert_to<double>();
  e.normwise_rel = max_ref != 0 ? mpfr256(max_err / max_ref).template convert_to<double>() : e.max_abs;
  const double u = unit_roundoff<T>();
  e.in_units_of_u = u > 0 ? e.normwise_rel / u : 0.0;
  e.exact_equal = e.mismatches == 0;
  return e;
}

}  // namespace hla
