// The ledger's gated-decay claims (SPEC "Gated (data-dependent) decay"), listed after SPEC's own ids.
#pragma once

#include <string>
#include <vector>

#include "claims/claims.hpp"

namespace hla::verify {

std::vector<Claim> gated_claims();

// gated.<op>.backward: the gated backward passes = forward-mode gradients of the gated reference
// (claims/gated_gradients.cpp).
ClaimResult check_gated_backward(const std::string& op, const LedgerContext& ctx);

}  // namespace hla::verify
