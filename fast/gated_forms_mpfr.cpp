// The gated forms in MPFR-256 (gated_forms.hpp), a unit of their own so that the exact scalars' unit does not grow:
// hla verify's random --gates cases take their expected outputs and states from the gated serial form here.
#include "fast/gated_forms_impl.hpp"

namespace hla::gated {
HLA_GATED_INSTANTIATE(mpfr256)
}  // namespace hla::gated
