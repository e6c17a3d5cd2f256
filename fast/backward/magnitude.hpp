// A scalar for rounding-error bounds of division-free programs: Magnitude runs the same code on absolute
// values, with a − b and a + b both giving |a| + |b|, and counts K, the most factors (1 + δ) any monomial
// term of the result can carry: a ± b → max(K_a, K_b) + 1 (a term comes from one side), a · b → K_a + K_b + 1
// (a term is a product of one term of each side); exact inputs and constants 0.
//
// Why: under the standard model fl(a op b) = (a op b)(1 + δ), |δ| ≤ u, a program of +, −, × computes a sum of
// monomial terms each carrying at most K factors (1 + δ), K = the rounding depth of the result; hence
//   |computed − exact| ≤ γ_K · Σ |terms| ≤ γ_K · (the program run on magnitudes),  γ_K = K u / (1 − K u)
// (Higham, Accuracy and Stability of Numerical Algorithms, Lemma 3.1 and §3.5). Running a backward pass in
// Magnitude<double> gives, per gradient entry, both the magnitude sum M and K: the tolerance of that entry.
// Counting every operation (also 0 + x, and a·b + c as two) only over-counts K. Division is not supported
// (normalized forms are not division-free): it throws.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/scalar.hpp"

namespace hla {

struct Magnitude {
  double v = 0;  // the program's value on magnitudes
  int k = 0;     // rounding depth

  Magnitude() = default;
  Magnitude(int x) : v(std::fabs(double(x))) {}  // NOLINT: T(0), T(1) in the forms
  Magnitude(double x, int depth) : v(std::fabs(x)), k(depth) {}
  // A parameter (γ, λ): its magnitude with K = 0 if it is exact in double, else K = 1 (one rounding on
  // conversion); core's from_rational calls it. The bound is for T = double; for float use parameters exact in
  // float (e.g. γ = 15/16).
  static Magnitude from_rational(const rational& r) {
    const double x = r.convert_to<double>();
    return Magnitude(x, rational(x) == r ? 0 : 1);
  }

  friend Magnitude operator+(const Magnitude& a, const Magnitude& b) { return {a.v + b.v, std::max(a.k, b.k) + 1}; }
  friend Magnitude operator-(const Magnitude& a, const Magnitude& b) { return {a.v + b.v, std::max(a.k, b.k) + 1}; }
  friend Magnitude operator-(const Magnitude& a) { return a; }  // negation is exact
  friend Magnitude operator*(const Magnitude& a, const Magnitude& b) { return {a.v * b.v, a.k + b.k + 1}; }
  friend Magnitude operator/(const Magnitude&, const Magnitude&) {
    throw std::logic_error("Magnitude: division has no magnitude bound here (use an unnormalized form)");
  }
  Magnitude& operator+=(const Magnitude& b) { return *this = *this + b; }
  Magnitude& operator-=(const Magnitude& b) { return *this = *this - b; }
  Magnitude& operator*=(const Magnitude& b) { return *this = *this * b; }
  Magnitude& operator/=(const Magnitude& b) { return *this = *this / b; }
  // Guards in the forms (`γ != 1`, `λ != 0`) compare the parameters' values.
  friend bool operator==(const Magnitude& a, const Magnitude& b) { return a.v == b.v; }
  friend bool operator!=(const Magnitude& a, const Magnitude& b) { return a.v != b.v; }

  // The bound γ_K · M of the entry, with a factor (1 + 4Ku) for M itself being computed in double.
  double bound(double u) const {
    const double Ku = k * u;
    if (Ku >= 0.5) return INFINITY;
    return Ku / (1 - Ku) * v * (1 + 4 * Ku);
  }
};

}  // namespace hla

namespace Eigen {
template <> struct NumTraits<hla::Magnitude> : NumTraits<double> {
  using Real = hla::Magnitude;
  using NonInteger = hla::Magnitude;
  using Nested = hla::Magnitude;
  using Literal = hla::Magnitude;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2,
    AddCost = 2,
    MulCost = 2
  };
};
}  // namespace Eigen
