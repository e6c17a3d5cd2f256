// The headers that nearly every unit includes, precompiled once per target (CMakeLists.txt, HLA_PCH): parsing
// Boost.Multiprecision's GMP and MPFR backends costs each unit 2.5-3 CPU s on its own (docs/build.md).
//
// Eigen is deliberately not here. GCC before 13 does not keep `#pragma GCC diagnostic` in a precompiled header
// (GCC PR 64117), so core/eigen.hpp's suppression of the known false -Wmaybe-uninitialized in avx512fintrin.h
// (GCC PR 105593) would be lost: 217 warnings in one unit under -march=sapphirerapids, measured. Eigen is still
// included first where it is needed (core/eigen.hpp), since nothing here includes it.
#pragma once

#include <fmt/core.h>

#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/mpfr.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
