// The gated forms by name (gated_forms.hpp) for double and float, at the build's optimization like the other
// floating form units.
#include "fast/gated_forms_impl.hpp"

namespace hla::gated {
HLA_GATED_INSTANTIATE(double)
HLA_GATED_INSTANTIATE(float)
}  // namespace hla::gated
