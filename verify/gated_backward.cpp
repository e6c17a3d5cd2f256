// The gated serial backward (fast/backward/gated.hpp) for `hla verify --gates --grad`, instantiated once, in this unit:
// exact rationals (exact cases), MPFR-256 (random cases) and Magnitude (the bounds). verify/gradients.cpp
// declares them extern.
#include "fast/backward/gated.hpp"

HLA_GATED_BACKWARD_SCALARS()
