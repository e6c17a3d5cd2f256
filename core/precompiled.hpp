// The headers that nearly every unit includes, precompiled once per target (CMakeLists.txt, HLA_PCH): parsing
// Boost.Multiprecision's GMP and MPFR backends costs each unit 2.5-3 CPU s on its own (docs/build.md).
//
// Eigen is here only where the build's instruction set has no AVX-512. GCC before 13 does not keep
// `#pragma GCC diagnostic` in a precompiled header (GCC PR 64117), so core/eigen.hpp's suppression of the known
// false -Wmaybe-uninitialized in avx512fintrin.h (GCC PR 105593) would be lost: 217 warnings in one unit under
// -march=sapphirerapids, measured. Without AVX-512 that code is not compiled and the build is warning-free with
// Eigen precompiled, which saves each unit about 1.1 CPU s (docs/build.md "Fifth pass"). With AVX-512, Eigen is
// included first where it is needed (core/eigen.hpp), as before.
#pragma once

#if !defined(__AVX512F__)
#include "core/eigen.hpp"
#endif

#include <fmt/core.h>

#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/mpfr.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
