// Random inputs that every scalar sees identically.
//
// Floating inputs are drawn as float-representable values (a float is exactly a double, an MPFR number
// and a rational), so float, double, MPFR and exact runs all start from the same Q, K, V and errors
// measure arithmetic only. Exact identity tests draw small integers, or uniform prime-field elements
// (S = 2^61 − 1 values) for the Schwartz–Zippel bound.
#pragma once

#include <cstdint>
#include <random>
#include <utility>

#include "core/types.hpp"

namespace hla {

struct Shape {
  Eigen::Index n = 8, d = 3, dv = 2;
};

// N(0, 1)/√d entries rounded to float, then stored as double: q·k is O(1) on average.
Problem<double> gaussian_problem(const Shape& s, std::uint64_t seed);
// Integers uniform in [−r, r]: small exact inputs whose counterexamples can be checked by hand.
Problem<double> integer_problem(const Shape& s, std::uint64_t seed, int r);
// Uniform elements of Z/(2^61 − 1).
Problem<fp61> field_problem(const Shape& s, std::uint64_t seed);

template <class T> Mat<T> convert_matrix(const Mat<double>& m) {
  Mat<T> out(m.rows(), m.cols());
  for (Eigen::Index i = 0; i < m.size(); ++i) out(i) = from_double<T>(m(i));
  return out;
}
template <class T> Problem<T> convert_problem(const Problem<double>& p) {
  ColVec<T> gates(p.gates.size());
  for (Eigen::Index t = 0; t < p.gates.size(); ++t) gates(t) = from_double<T>(p.gates(t));
  return {convert_matrix<T>(p.Q), convert_matrix<T>(p.K), convert_matrix<T>(p.V), std::move(gates)};
}

// Rows [begin, end) of a problem: the two halves of a split-and-carry test.
template <class T> Problem<T> slice_rows(const Problem<T>& p, Eigen::Index begin, Eigen::Index end) {
  const Eigen::Index len = end - begin;
  return {p.Q.middleRows(begin, len), p.K.middleRows(begin, len), p.V.middleRows(begin, len),
          p.gates.size() ? ColVec<T>(p.gates.segment(begin, len)) : ColVec<T>()};
}

}  // namespace hla
