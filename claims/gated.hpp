// The ledger's gated-decay claims (SPEC "Gated (data-dependent) decay"), listed after SPEC's own ids.
#pragma once

#include <vector>

#include "claims/claims.hpp"

namespace hla::verify {

std::vector<Claim> gated_claims();

}  // namespace hla::verify
