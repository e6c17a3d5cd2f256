// gated::run (fast/gated_forms.hpp) instantiated for double and float, at the build's optimization like the other
// floating form units.
#include "fast/gated_forms_impl.hpp"

HLA_GATED_INSTANTIATE_RUN(double)
HLA_GATED_INSTANTIATE_RUN(float)
