// Forward-mode dual numbers x + ẋ·ε (ε² = 0) over any scalar T of the harness: the exact derivative of
// any rational expression, in exact arithmetic when T is exact. The gradient checker
// (numerics/gradient_checks.hpp) runs the *unchanged* reference templates (reference/) and serial forms
// (fast/serial/) in Dual<T> with one tangent direction per input entry; L = Σ ⟨dO, O⟩ then has
// tangent ∂L/∂x for the seeded entry x. This is the yardstick of every hand-written backward.
//
// The forms convert parameters with `from_rational<T>(r)` (core/scalar.hpp), which hands a Dual to its static
// from_rational below. A free overload would be found by ordinary lookup only if declared before the forms' templates
// (the argument is a boost rational, so ADL cannot find it later); a member is found whatever the include order. The
// test checks from_rational<Dual<rational>>(1/3).
//
// Comparisons (==, !=) compare values only: the forms use them for `γ != 1` and `den + ε == 0` guards.
#pragma once

#include <concepts>
#include <ostream>

#include "core/scalar.hpp"

namespace hla {

template <class T> struct Dual {
  using value_type = T;
  T v{0};  // value
  T d{0};  // tangent (one direction)

  Dual() = default;
  Dual(int x) : v(T(x)), d(T(0)) {}  // NOLINT: T(0), T(1), T(static_cast<int>(..)) in the forms
  // Exactly T (a constrained template so that no other number type converts through T implicitly).
  template <class U>
  requires std::same_as<U, T> Dual(const U& x) : v(x), d(T(0)) {}  // NOLINT
  Dual(const T& x, const T& dx) : v(x), d(dx) {}
  // The exact value of a parameter, tangent 0 (γ, ε, λ are not differentiated); core's from_rational calls it.
  static Dual from_rational(const rational& r) { return Dual(hla::from_rational<T>(r)); }

  friend Dual operator+(const Dual& a, const Dual& b) { return {T(a.v + b.v), T(a.d + b.d)}; }
  friend Dual operator-(const Dual& a, const Dual& b) { return {T(a.v - b.v), T(a.d - b.d)}; }
  friend Dual operator-(const Dual& a) { return {T(-a.v), T(-a.d)}; }
  friend Dual operator*(const Dual& a, const Dual& b) { return {T(a.v * b.v), T(a.d * b.v + a.v * b.d)}; }
  friend Dual operator/(const Dual& a, const Dual& b) {
    const T q = a.v / b.v;
    return {q, T((a.d - q * b.d) / b.v)};
  }
  Dual& operator+=(const Dual& b) { return *this = *this + b; }
  Dual& operator-=(const Dual& b) { return *this = *this - b; }
  Dual& operator*=(const Dual& b) { return *this = *this * b; }
  Dual& operator/=(const Dual& b) { return *this = *this / b; }
  friend bool operator==(const Dual& a, const Dual& b) { return a.v == b.v; }
  friend bool operator!=(const Dual& a, const Dual& b) { return !(a.v == b.v); }
  friend std::ostream& operator<<(std::ostream& os, const Dual& a) { return os << a.v << " + " << a.d << "ε"; }
};

}  // namespace hla

namespace Eigen {
template <class T> struct NumTraits<hla::Dual<T>> : NumTraits<T> {
  using Real = hla::Dual<T>;
  using NonInteger = hla::Dual<T>;
  using Nested = hla::Dual<T>;
  using Literal = hla::Dual<T>;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2 * NumTraits<T>::ReadCost,
    AddCost = 2 * NumTraits<T>::AddCost,
    MulCost = 3 * NumTraits<T>::MulCost + NumTraits<T>::AddCost,
  };
};
}  // namespace Eigen
