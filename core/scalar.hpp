// The scalar types every form is generic over, and the exact conversions between them.
//
//   rational  exact rationals (GMP mpq): decide small identities, print counterexamples by hand
//   fp61      the prime field Z/(2^61-1): decide identities exactly at any n
//   mpfr256   MPFR at 256 bits: the high-precision reference that float/double errors are measured against
//   double, float
//
// Expression templates are off for the multiprecision types: Eigen products then see plain values, and
// binding a result to `auto` is safe (SPEC "Facts").
#pragma once

#include "core/eigen.hpp"  // before Boost's Eigen glue, which includes Eigen itself (core/eigen.hpp says why)

#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/mpfr.hpp>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/prime_field.hpp"

namespace hla {

namespace bmp = boost::multiprecision;
using rational = bmp::number<bmp::gmp_rational, bmp::et_off>;
// 78 decimal digits = 259 bits of mantissa: "MPFR at 256 bits", fixed at compile time so that OpenMP
// threads need no per-thread default-precision setup.
using mpfr256 = bmp::number<bmp::mpfr_float_backend<78>, bmp::et_off>;
using fp61 = Fp;

template <class T> inline constexpr bool is_exact_v = std::is_same_v<T, rational> || std::is_same_v<T, fp61>;
template <class T> inline constexpr bool has_order_v = !std::is_same_v<T, fp61>;  // fields mod p are unordered
template <class T> inline constexpr bool has_exp_v = std::is_floating_point_v<T> || std::is_same_v<T, mpfr256>;

// An Eigen expression whose products are evaluated coefficient by coefficient (below): any scalar but float
// and double.
template <class Xpr>
concept coefficient_product_operand = !std::is_floating_point_v<typename Xpr::Scalar>;

}  // namespace hla

// Products of the multiprecision and prime-field scalars are evaluated coefficient by coefficient, not by
// Eigen's blocked GEMM/GEMV kernels (gebp, gemm_pack_*, general_matrix_vector_product, the triangular
// products). Those kernels exist for cache and SIMD, which a GMP, MPFR or mod-p multiply does not use, yet
// each was instantiated per scalar in every unit that multiplies matrices: a third of the exact units'
// object code and about half of their compile time (docs/build.md "Fifth pass"). A constrained partial
// specialization is more specialized than Eigen's own for the same arguments (C++20 [temp.constr.order]),
// so float and double keep Eigen's kernels. rational and fp61 give the same values in any order of summation;
// MPFR's sums may differ in the last of its 259 bits.
namespace Eigen::internal {
template <hla::coefficient_product_operand Lhs, class Rhs>
struct generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, GemmProduct>
    : generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, CoeffBasedProductMode> {};
template <hla::coefficient_product_operand Lhs, class Rhs>
struct generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, GemvProduct>
    : generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, CoeffBasedProductMode> {};
// A triangular view times a dense matrix: the triangle with its zeros, then the same coefficient product.
template <hla::coefficient_product_operand Lhs, class Rhs, int Tag>
struct generic_product_impl<Lhs, Rhs, TriangularShape, DenseShape, Tag>
    : generic_product_impl_base<Lhs, Rhs, generic_product_impl<Lhs, Rhs, TriangularShape, DenseShape, Tag>> {
  using Scalar = typename Product<Lhs, Rhs>::Scalar;
  template <class Dest> static void scaleAndAddTo(Dest& dst, const Lhs& lhs, const Rhs& rhs, const Scalar& alpha) {
    const Matrix<Scalar, Dynamic, Dynamic> triangle = lhs.toDenseMatrix();
    dst.noalias() += alpha * triangle.lazyProduct(rhs);
  }
};
}  // namespace Eigen::internal

namespace hla {

template <class T> std::string scalar_name();
template <> inline std::string scalar_name<rational>() { return "rational"; }
template <> inline std::string scalar_name<fp61>() { return "fp61"; }
template <> inline std::string scalar_name<mpfr256>() { return "mpfr256"; }
template <> inline std::string scalar_name<double>() { return "double"; }
template <> inline std::string scalar_name<float>() { return "float"; }

// Unit roundoff u of a floating type (0 for exact types).
template <class T> double unit_roundoff() {
  if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::epsilon() / 2;
  else if constexpr (std::is_same_v<T, mpfr256>)
    return std::ldexp(1.0, -258);
  else
    return 0.0;
}

// Exact conversion from a rational parameter or input into T (rounded once for floating types). A number type of its
// own (fast/backward/dual.hpp, magnitude.hpp) converts itself with a static T::from_rational: a member is looked up
// when a form is instantiated, so its header may come before or after the forms' headers.
template <class T> T from_rational(const rational& r) {
  if constexpr (requires { T::from_rational(r); })
    return T::from_rational(r);
  else if constexpr (std::is_same_v<T, rational>)
    return r;
  else if constexpr (std::is_same_v<T, fp61>) {
    auto num = bmp::numerator(r), den = bmp::denominator(r);
    auto reduce = [](const auto& z) {
      using Z = std::decay_t<decltype(z)>;
      Z m = z % Z(Fp::P);
      if (m < 0) m += Z(Fp::P);
      return Fp::from_raw(static_cast<std::uint64_t>(m.template convert_to<unsigned long long>()));
    };
    return reduce(num) / reduce(den);
  } else if constexpr (std::is_same_v<T, mpfr256>) {
    return mpfr256(bmp::numerator(r)) / mpfr256(bmp::denominator(r));
  } else {
    return static_cast<T>(mpfr256(bmp::numerator(r)) / mpfr256(bmp::denominator(r)));
  }
}

// Every finite double is a dyadic rational, so this is exact for every T but float (which rounds).
template <class T> T from_double(double x) {
  if constexpr (std::is_same_v<T, rational>)
    return rational(x);
  else if constexpr (std::is_same_v<T, fp61>)
    return from_rational<fp61>(rational(x));
  else
    return T(x);
}

// Rounded value, for error measurement and display. Not defined for the prime field.
template <class T> double to_double(const T& x) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<double>(x);
  else if constexpr (std::is_same_v<T, fp61>)
    return static_cast<double>(x.raw());
  else
    return x.template convert_to<double>();
}

template <class T> mpfr256 to_mpfr(const T& x) {
  if constexpr (std::is_floating_point_v<T>)
    return mpfr256(x);
  else if constexpr (std::is_same_v<T, mpfr256>)
    return x;
  else if constexpr (std::is_same_v<T, rational>)
    return mpfr256(bmp::numerator(x)) / mpfr256(bmp::denominator(x));
  else
    static_assert(!sizeof(T), "no MPFR value for a prime-field element");
}

template <class T> bool is_finite(const T& x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isfinite(x);
  else if constexpr (std::is_same_v<T, mpfr256>)
    return bmp::isfinite(x);
  else
    return true;
}

// base^k for k ≥ 0 by repeated squaring (exact in rational and fp61; ⌈log2 k⌉ + popcount(k) roundings in
// floating point): the decay γ^k over a stretch of k tokens.
template <class T> T power(T base, Eigen::Index k) {
  T r(1);
  for (; k > 0; k >>= 1) {
    if (k & 1) r = r * base;
    if (k > 1) base = base * base;
  }
  return r;
}

}  // namespace hla
