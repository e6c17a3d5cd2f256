// Gradient claims of the ledger (§4.2 "Backward for gradients"); see numerics/gradient_checks.hpp.
#pragma once

#include "claims/claims.hpp"
#include "fast/serial/hla2.hpp"

namespace hla::verify {

ClaimResult check_backward(const std::string& op, bool decay, bool normalized, fast::DecayRule rule,
                           const LedgerContext& ctx);

}  // namespace hla::verify
