// B = Aᵀ for small column-major blocks: the chunk kernels' transposed operands (LIBXSMM 1.17 takes no
// transposed A, so hla2/chunked-fused copies Kᵀ and [V 1]ᵀ of every chunk itself).
//
// Why not Eigen's `B = A.transpose()`: that assignment is a coefficient loop, and GCC 12 compiles it to two
// scalar loads per 8-byte store. In hla2/chunked-fused at w = 16 the chunk's two transposes were then about
// 8% of a one-thread float call (measured on an AMD Zen 4 by leaving them out: 37.7 → 34.6 ms, n = 65536,
// d = dv = 64). With AVX, float is transposed in 8×8 tiles and double in 4×4 tiles in registers (the
// textbook unpack/shuffle/permute sequence), the edges element by element; any other scalar (the exact
// rationals, the prime field, MPFR) element by element. Measured, the same call, two interleaved rounds,
// medians of 5: float 37.1-37.3 → 35.1-35.6 ms, double 63.2-63.4 → 62.6-63.1. A transpose moves values and
// rounds nothing, so the result is the same to the bit whichever path runs (tests/test_chunked.cpp).
#pragma once

#include <type_traits>

#include "core/types.hpp"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace hla::gemm {

namespace transpose_detail {

// B's columns [i, i+rows) × rows [j, j+cols) from A's rows [i, i+rows) × columns [j, j+cols), one by one.
template <class T> void by_element(const T* A, Eigen::Index lda, Eigen::Index i0, Eigen::Index i1, Eigen::Index j0,
                                   Eigen::Index j1, T* B, Eigen::Index ldb) {
  for (Eigen::Index j = j0; j < j1; ++j)
    for (Eigen::Index i = i0; i < i1; ++i) B[i * ldb + j] = A[j * lda + i];
}

#if defined(__AVX__)
// The 8×8 float tile at A (rows × columns, lda) into B (ldb): eight columns in, eight rows out.
inline void tile(const float* A, Eigen::Index lda, float* B, Eigen::Index ldb) {
  __m256 r[8], t[8], s[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(A + k * lda);
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < 2; ++h) {
      s[4 * k + 2 * h] = _mm256_shuffle_ps(t[4 * k + h], t[4 * k + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
      s[4 * k + 2 * h + 1] = _mm256_shuffle_ps(t[4 * k + h], t[4 * k + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(B + k * ldb, _mm256_permute2f128_ps(s[k], s[k + 4], 0x20));
    _mm256_storeu_ps(B + (k + 4) * ldb, _mm256_permute2f128_ps(s[k], s[k + 4], 0x31));
  }
}

// The 4×4 double tile.
inline void tile(const double* A, Eigen::Index lda, double* B, Eigen::Index ldb) {
  const __m256d r0 = _mm256_loadu_pd(A), r1 = _mm256_loadu_pd(A + lda), r2 = _mm256_loadu_pd(A + 2 * lda),
                r3 = _mm256_loadu_pd(A + 3 * lda);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(B, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(B + ldb, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(B + 2 * ldb, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(B + 3 * ldb, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif

}  // namespace transpose_detail

// B (cols × rows, leading dimension ldb) = Aᵀ, A rows × cols with leading dimension lda; column-major, the
// two not overlapping.
template <class T>
void transpose(const T* A, Eigen::Index lda, Eigen::Index rows, Eigen::Index cols, T* B, Eigen::Index ldb) {
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr Eigen::Index t = 32 / sizeof(T);  // the tile's side: one 256-bit register of T
    const Eigen::Index rt = rows - rows % t, ct = cols - cols % t;
    for (Eigen::Index j = 0; j < ct; j += t)
      for (Eigen::Index i = 0; i < rt; i += t) transpose_detail::tile(A + j * lda + i, lda, B + i * ldb + j, ldb);
    transpose_detail::by_element(A, lda, rt, rows, 0, cols, B, ldb);  // the rows below the last tile
    transpose_detail::by_element(A, lda, 0, rt, ct, cols, B, ldb);    // the columns right of it
    return;
  }
#endif
  transpose_detail::by_element(A, lda, 0, rows, 0, cols, B, ldb);
}

}  // namespace hla::gemm
