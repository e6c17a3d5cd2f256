// The gated serial backward (fast/backward/gated.hpp) for `hla verify --gates --grad`, instantiated once, in this unit:
// exact rationals (exact cases), MPFR-256 (random cases) and Magnitude (the bounds). verify/gradients.cpp
// declares them extern.
// clang-format off
#include "fast/backward/dual.hpp"       // before any form header (see its comment)
#include "fast/backward/magnitude.hpp"  // likewise
#include "fast/backward/gated.hpp"
// clang-format on

HLA_GATED_BACKWARD_SCALARS()
