// Eigen, included once for the whole harness: every file that needs Eigen includes this header, before any
// other header that includes Eigen itself (core/scalar.hpp: Boost.Multiprecision's Eigen glue).
//
// GCC 12 reports -Wmaybe-uninitialized inside its own avx512fintrin.h when Eigen's AVX-512 packet code
// (ptranspose, gemm_pack_rhs, ...) is inlined: the intrinsics start from _mm256_undefined_pd(), whose
// "uninitialized" value is by design (a known false positive, GCC PR 105593). Thousands of lines on an
// AVX-512 machine, none about our code. The warning is switched off only for the text included here
// (Eigen and the intrinsics headers it pulls in): GCC classifies a middle-end warning by the location it
// points at, so a real (maybe-)uninitialized in our own code is still reported.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)  // clang (the fuzz and tsan builds) has no such warning
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same value, when our code calls the intrinsics itself (bench)
#include <Eigen/Core>
#pragma GCC diagnostic pop
#else
#include <Eigen/Core>
#endif
