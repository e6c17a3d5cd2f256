// Arithmetic modulo the Mersenne prime p = 2^61 - 1: an exact field in which every claim of the paper
// (a polynomial or rational identity in the inputs) can be decided at any n without the denominator
// growth of exact rationals. Division is multiplication by the modular inverse (Fermat).
#pragma once

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include "core/eigen.hpp"

namespace hla {

class Fp {
 public:
  static constexpr std::uint64_t P = (std::uint64_t{1} << 61) - 1;

  constexpr Fp() = default;
  // Integers map to their residue; negative integers wrap.
  constexpr Fp(long long v) : v_(reduce_signed(v)) {}     // NOLINT(google-explicit-constructor)
  constexpr Fp(int v) : Fp(static_cast<long long>(v)) {}  // NOLINT(google-explicit-constructor)
  static constexpr Fp from_raw(std::uint64_t r) {
    Fp f;
    f.v_ = r % P;
    return f;
  }

  constexpr std::uint64_t raw() const { return v_; }

  friend constexpr Fp operator+(Fp a, Fp b) {
    std::uint64_t s = a.v_ + b.v_;
    return from_reduced(s >= P ? s - P : s);
  }
  friend constexpr Fp operator-(Fp a, Fp b) { return from_reduced(a.v_ >= b.v_ ? a.v_ - b.v_ : a.v_ + P - b.v_); }
  friend constexpr Fp operator-(Fp a) { return from_reduced(a.v_ == 0 ? 0 : P - a.v_); }
  friend constexpr Fp operator*(Fp a, Fp b) { return from_reduced(mulmod(a.v_, b.v_)); }
  friend Fp operator/(Fp a, Fp b) { return a * b.inverse(); }
  Fp& operator+=(Fp b) { return *this = *this + b; }
  Fp& operator-=(Fp b) { return *this = *this - b; }
  Fp& operator*=(Fp b) { return *this = *this * b; }
  Fp& operator/=(Fp b) { return *this = *this / b; }
  friend constexpr bool operator==(Fp a, Fp b) { return a.v_ == b.v_; }
  friend constexpr bool operator!=(Fp a, Fp b) { return a.v_ != b.v_; }

  Fp pow(std::uint64_t e) const {
    Fp base = *this, acc = Fp(1);
    while (e) {
      if (e & 1) acc *= base;
      base *= base;
      e >>= 1;
    }
    return acc;
  }
  Fp inverse() const {
    if (v_ == 0) throw std::domain_error("prime field: division by zero (a denominator vanished mod 2^61-1)");
    return pow(P - 2);
  }

  friend std::ostream& operator<<(std::ostream& os, Fp a) { return os << a.v_ << " (mod 2^61-1)"; }

 private:
  static constexpr Fp from_reduced(std::uint64_t r) {
    Fp f;
    f.v_ = r;
    return f;
  }
  static constexpr std::uint64_t reduce_signed(long long v) {
    long long r = v % static_cast<long long>(P);
    return static_cast<std::uint64_t>(r < 0 ? r + static_cast<long long>(P) : r);
  }
  static constexpr std::uint64_t mulmod(std::uint64_t a, std::uint64_t b) {
    unsigned __int128 z = static_cast<unsigned __int128>(a) * b;
    std::uint64_t lo = static_cast<std::uint64_t>(z & P), hi = static_cast<std::uint64_t>(z >> 61);
    std::uint64_t s = lo + hi;  // < 2P, since 2^61 * 2^61 fits and each part < P + 1
    return s >= P ? s - P : s;
  }
  std::uint64_t v_ = 0;
};

// Comparisons that Eigen's generic code may instantiate; a field has no order, so these are only
// equality-based and must never decide anything numerical.
inline Fp abs(Fp a) { return a; }

}  // namespace hla

namespace Eigen {
template <> struct NumTraits<hla::Fp> : GenericNumTraits<hla::Fp> {
  using Real = hla::Fp;
  using NonInteger = hla::Fp;
  using Nested = hla::Fp;
  using Literal = hla::Fp;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 2,
    MulCost = 4
  };
  static inline hla::Fp epsilon() { return hla::Fp(0); }
  static inline hla::Fp dummy_precision() { return hla::Fp(0); }
  static inline int digits10() { return 18; }
};
}  // namespace Eigen
