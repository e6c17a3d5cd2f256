// Byte codec for everything that crosses ranks: scalars of every type, matrices, named states and scan
// segments (whose parts are listed once, in Seg::fields — fast/scan/common.hpp).
//
// Exact scalars cross ranks exactly: a rational is its numerator and denominator as GMP magnitudes
// (mpz_export, little-endian 64-bit words) with signs; an MPFR number is m·2^e with m an integer
// (mpfr_get_z_2exp), so all 259 bits survive; fp61 is its residue. float/double are their bytes (the
// ranks of one job share an ABI). Decoding checks every length and refuses a truncated or oversized
// buffer with InputError rather than reading past its end.
#pragma once

#include <gmp.h>
#include <mpfr.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/state.hpp"

namespace hla::distributed {

using Bytes = std::vector<std::byte>;

class ByteWriter {
 public:
  void u64(std::uint64_t x) { raw(&x, sizeof x); }
  void i64(std::int64_t x) { raw(&x, sizeof x); }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  void text(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  Bytes take() { return std::move(buf_); }
  std::size_t size() const { return buf_.size(); }

 private:
  Bytes buf_;
};

class ByteReader {
 public:
  ByteReader(const std::byte* p, std::size_t n) : p_(p), end_(p + n) {}
  explicit ByteReader(const Bytes& b) : ByteReader(b.data(), b.size()) {}
  explicit ByteReader(Bytes&&) = delete;  // it would read a temporary that is already gone
  std::uint64_t u64() {
    std::uint64_t x;
    raw(&x, sizeof x);
    return x;
  }
  std::int64_t i64() {
    std::int64_t x;
    raw(&x, sizeof x);
    return x;
  }
  void raw(void* out, std::size_t n) {
    need(n);
    if (n == 0) return;  // memcpy with a null pointer (an empty part's data()) is undefined even for 0 bytes (UBSan)
    std::memcpy(out, p_, n);
    p_ += n;
  }
  const std::byte* take(std::size_t n) {
    need(n);
    const std::byte* at = p_;
    p_ += n;
    return at;
  }
  std::string text() {
    const std::uint64_t n = u64();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  bool done() const { return p_ == end_; }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }

 private:
  void need(std::uint64_t n) const {
    if (n > static_cast<std::uint64_t>(end_ - p_)) throw InputError("codec: truncated buffer");
  }
  const std::byte* p_;
  const std::byte* end_;
};

namespace detail {
// |z| as 64-bit words, preceded by (sign, word count).
inline void put_mpz(ByteWriter& w, mpz_srcptr z) {
  const int sign = mpz_sgn(z);
  const std::size_t words = sign == 0 ? 0 : (mpz_sizeinbase(z, 2) + 63) / 64;
  w.i64(sign);
  w.u64(words);
  if (words == 0) return;
  std::vector<std::uint64_t> buf(words);
  std::size_t count = 0;
  mpz_export(buf.data(), &count, -1, sizeof(std::uint64_t), 0, 0, z);
  w.raw(buf.data(), words * sizeof(std::uint64_t));
}
inline void get_mpz(ByteReader& r, mpz_ptr z) {
  const std::int64_t sign = r.i64();
  const std::uint64_t words = r.u64();
  if (sign < -1 || sign > 1 || (sign == 0) != (words == 0)) throw InputError("codec: malformed integer");
  const std::byte* at = r.take(words * sizeof(std::uint64_t));
  mpz_import(z, words, -1, sizeof(std::uint64_t), 0, 0, at);
  if (sign < 0) mpz_neg(z, z);
}
}  // namespace detail

template <class T> void put_scalar(ByteWriter& w, const T& x) {
  if constexpr (std::is_floating_point_v<T>) {
    w.raw(&x, sizeof x);
  } else if constexpr (std::is_same_v<T, fp61>) {
    w.u64(x.raw());
  } else if constexpr (std::is_same_v<T, rational>) {
    const mpq_srcptr q = x.backend().data();
    detail::put_mpz(w, mpq_numref(q));
    detail::put_mpz(w, mpq_denref(q));
  } else if constexpr (std::is_same_v<T, mpfr256>) {
    const mpfr_srcptr f = x.backend().data();
    // kind: 0 number, 1 NaN, 2 +Inf, 3 −Inf, 4 −0 (+0 is the number 0·2^0)
    const std::int64_t kind = mpfr_nan_p(f)                       ? 1
                              : mpfr_inf_p(f)                     ? (mpfr_sgn(f) > 0 ? 2 : 3)
                              : mpfr_zero_p(f) && mpfr_signbit(f) ? 4
                                                                  : 0;
    w.i64(kind);
    if (kind != 0) return;
    mpz_t m;
    mpz_init(m);
    const mpfr_exp_t e = mpfr_zero_p(f) ? 0 : mpfr_get_z_2exp(m, f);
    w.i64(static_cast<std::int64_t>(e));
    detail::put_mpz(w, m);
    mpz_clear(m);
  } else {
    static_assert(!sizeof(T), "no codec for this scalar");
  }
}

template <class T> T get_scalar(ByteReader& r) {
  if constexpr (std::is_floating_point_v<T>) {
    T x;
    r.raw(&x, sizeof x);
    return x;
  } else if constexpr (std::is_same_v<T, fp61>) {
    const std::uint64_t v = r.u64();
    if (v >= Fp::P) throw InputError("codec: fp61 residue out of range");
    return Fp::from_raw(v);
  } else if constexpr (std::is_same_v<T, rational>) {
    T x;
    mpq_ptr q = x.backend().data();
    detail::get_mpz(r, mpq_numref(q));
    detail::get_mpz(r, mpq_denref(q));
    if (mpz_sgn(mpq_denref(q)) <= 0) throw InputError("codec: rational with a non-positive denominator");
    mpq_canonicalize(q);
    return x;
  } else if constexpr (std::is_same_v<T, mpfr256>) {
    T x;
    mpfr_ptr f = x.backend().data();
    const std::int64_t kind = r.i64();
    if (kind == 1)
      mpfr_set_nan(f);
    else if (kind == 2 || kind == 3)
      mpfr_set_inf(f, kind == 2 ? 1 : -1);
    else if (kind == 4)
      mpfr_set_zero(f, -1);
    else if (kind == 0) {
      const std::int64_t e = r.i64();
      mpz_t m;
      mpz_init(m);
      detail::get_mpz(r, m);
      mpfr_set_z_2exp(f, m, static_cast<mpfr_exp_t>(e), MPFR_RNDN);  // exact: m has ≤ the precision's bits
      mpz_clear(m);
    } else {
      throw InputError("codec: malformed MPFR number");
    }
    return x;
  }
}

template <class T> void put_matrix(ByteWriter& w, const Mat<T>& m) {
  w.i64(m.rows());
  w.i64(m.cols());
  if constexpr (std::is_floating_point_v<T>)
    w.raw(m.data(), sizeof(T) * static_cast<std::size_t>(m.size()));
  else
    for (Eigen::Index i = 0; i < m.size(); ++i) put_scalar(w, m(i));
}

template <class T> Mat<T> get_matrix(ByteReader& r) {
  const std::int64_t rows = r.i64(), cols = r.i64();
  // Every entry takes at least 8 bytes (4 for float): a shape larger than what is left is malformed.
  const std::uint64_t least = std::is_same_v<T, float> ? 4 : 8;
  if (rows < 0 || cols < 0 ||
      (rows > 0 && cols > 0 && static_cast<std::uint64_t>(rows) > r.left() / least / static_cast<std::uint64_t>(cols)))
    throw InputError("codec: malformed matrix shape");
  Mat<T> m(rows, cols);
  if constexpr (std::is_floating_point_v<T>)
    r.raw(m.data(), sizeof(T) * static_cast<std::size_t>(m.size()));
  else
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = get_scalar<T>(r);
  return m;
}

// A scan segment, part by part in Seg::fields order (matrices with their shapes, scalars such as ρ).
template <class T, class Seg> void put_segment(ByteWriter& w, const Seg& s) {
  Seg::fields(s, [&](const char*, const auto& part) {
    if constexpr (std::is_same_v<std::decay_t<decltype(part)>, T>)
      put_scalar(w, part);
    else
      put_matrix(w, part);
  });
}
template <class T, class Seg> Seg get_segment(ByteReader& r) {
  Seg s;
  Seg::fields(s, [&](const char*, auto& part) {
    if constexpr (std::is_same_v<std::decay_t<decltype(part)>, T>)
      part = get_scalar<T>(r);
    else
      part = get_matrix<T>(r);
  });
  return s;
}
template <class T, class Seg> Bytes encode_segment(const Seg& s) {
  ByteWriter w;
  put_segment<T>(w, s);
  return w.take();
}
template <class T, class Seg> Seg decode_segment(const std::byte* p, std::size_t n) {
  ByteReader r(p, n);
  Seg s = get_segment<T, Seg>(r);
  if (!r.done()) throw InputError("codec: trailing bytes after a segment");
  return s;
}

// A named state (the calling convention's final state), with its part names.
template <class T> void put_state(ByteWriter& w, const NamedState<T>& s) {
  w.u64(s.parts.size());
  for (const auto& [name, m] : s.parts) {
    w.text(name);
    put_matrix(w, m);
  }
}
template <class T> NamedState<T> get_state(ByteReader& r) {
  NamedState<T> s;
  const std::uint64_t count = r.u64();
  if (count > r.left()) throw InputError("codec: malformed state");
  for (std::uint64_t i = 0; i < count; ++i) {
    std::string name = r.text();
    s.parts.emplace_back(std::move(name), get_matrix<T>(r));
  }
  return s;
}

}  // namespace hla::distributed
