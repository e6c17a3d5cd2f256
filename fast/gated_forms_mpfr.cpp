// gated::run (fast/gated_forms.hpp) instantiated for mpfr256, the reference floating errors are measured against;
// at -O1 like the other exact and high-precision units (CMakeLists.txt).
#include "fast/gated_forms_impl.hpp"

HLA_GATED_INSTANTIATE_RUN(hla::mpfr256)
