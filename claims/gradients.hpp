// Gradient claims of the ledger (§4.2 "Backward for gradients"); see numerics/gradient_checks.hpp.
#pragma once

#include "fast/serial/hla2.hpp"
#include "claims/claims.hpp"

namespace hla::verify {

ClaimResult check_backward(const std::string& op, bool decay, bool normalized, fast::DecayRule rule, const LedgerContext& ctx);

}  // namespace hla::verify
