// Claims about the scan operators themselves (associativity, segment-state size) and the chunked cost.
#pragma once

#include <string>

#include "claims/claims.hpp"

namespace hla::verify {

// Associativity of the (family, variant) operator on random multi-token segments A, B, C:
// (A ⊕ B) ⊕ C = A ⊕ (B ⊕ C), part by part, plus the identity laws E ⊕ A = A = A ⊕ E.
ClaimResult check_monoid(const std::string& op, const std::string& variant, bool decay, const LedgerContext& ctx);
// cost.hla3.scan-state: numbers in a ⊗3 segment state, counted, vs d.
ClaimResult hla3_scan_state(const LedgerContext& ctx);
// cost.chunked: time of the chunked forms vs n and chunk width.
ClaimResult chunked_cost(const LedgerContext& ctx);

}  // namespace hla::verify
