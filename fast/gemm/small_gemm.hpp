// The matrix-product layer of the chunk kernels: one product shape, fixed for a call, run many times.
//
//   C (m×n, leading dimension ldc) = A (m×k, lda) · op(B)  [+ C when accumulating],
//   op(B) = B (k×n, ldb), or Bᵀ with B stored n×k (trans_b). Column-major, α = 1.
//
// For float and double the product is a LIBXSMM kernel generated for exactly that shape at run time
// (JIT, for the instruction set of the CPU it runs on: AVX-512 here, AVX2 on an older machine), which
// reads A and B in place: no packing, no zeroing of C (β = 0 overwrites). Measured at the chunk form's
// shapes (w×64·64×64, w×w·w×64, ... at w = 32..128; `make bench`, gemm/<library>/... entries) LIBXSMM is
// the fastest library Debian offers there; Eigen packs both operands on every call. Any other scalar
// (the exact rationals, the prime field, MPFR) and any shape LIBXSMM declines go through Eigen, so the
// same kernel code is exact where the scalar is.
#pragma once

#include <type_traits>

#include "core/types.hpp"

namespace hla::gemm {

struct Shape {
  Eigen::Index m, n, k, lda, ldb, ldc;
  bool trans_b = false;     // op(B) = Bᵀ
  bool accumulate = false;  // C += A·op(B) instead of C = A·op(B)
};

namespace detail {
// LIBXSMM's kernel for the shape (float or double), or null when it has none (fast/gemm/xsmm.cpp).
template <class T> const void* xsmm_dispatch(const Shape& s);
template <class T> void xsmm_run(const void* kernel, const T* a, const T* b, T* c);
}  // namespace detail

template <class T> class Product {
 public:
  Product() = default;
  explicit Product(const Shape& s) : s_(s) {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) jit_ = detail::xsmm_dispatch<T>(s);
  }

  void operator()(const T* A, const T* B, T* C) const {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>)
      if (jit_) return detail::xsmm_run<T>(jit_, A, B, C);
    using Stride = Eigen::OuterStride<>;
    const Eigen::Map<const Mat<T>, 0, Stride> a(A, s_.m, s_.k, Stride(s_.lda));
    Eigen::Map<Mat<T>, 0, Stride> c(C, s_.m, s_.n, Stride(s_.ldc));
    if (s_.trans_b) {
      const Eigen::Map<const Mat<T>, 0, Stride> b(B, s_.n, s_.k, Stride(s_.ldb));
      if (s_.accumulate)
        c.noalias() += a * b.transpose();
      else
        c.noalias() = a * b.transpose();
    } else {
      const Eigen::Map<const Mat<T>, 0, Stride> b(B, s_.k, s_.n, Stride(s_.ldb));
      if (s_.accumulate)
        c.noalias() += a * b;
      else
        c.noalias() = a * b;
    }
  }

  // "libxsmm" or "eigen": what runs this shape.
  const char* library() const { return jit_ ? "libxsmm" : "eigen"; }

 private:
  Shape s_{};
  const void* jit_ = nullptr;
};

}  // namespace hla::gemm
