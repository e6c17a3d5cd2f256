// What an implementation computes instead: the candidates its outputs are compared with on the exact cases.
//
//   registered  every form and variant of the operator in the registry — the paper's formulas as printed,
//               the corrected ones, the drawn chunk figures at several chunk widths
//   operators   the other operators' references (hla2 for ahla, the unmasked operator for the masked, ...)
//   mistakes    a catalogue of plausible, named mistakes: the state read before the token's own update,
//               queries and keys swapped, decay dropped / squared / on one index only, ε dropped or put
//               inside |den|, the ridge dropped / in the numerator only / undecayed, the chunk form without
//               its carry (state reset every w tokens), normalization flipped
// Each candidate is exact (rationals), so a match on every exact case is strong evidence of what the code
// computes; the report lists every candidate that matches.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/registry.hpp"

namespace hla::verify::ext {

struct Candidate {
  std::string key;          // e.g. "hla2/serial/paper", "mistake:decay-squared", "hla2/chunk-figure1c/paper@w=64"
  std::string description;  // one line: what it computes
  std::string claim;        // the ledger claim that decides it against the operator, when there is one
  // The candidate's output, or nullopt where it is not defined for these options.
  std::function<std::optional<Mat<rational>>(const Problem<rational>&, const Options&)> eval;
};

// Every candidate for an implementation of `op` (the operator's own reference excluded).
std::vector<Candidate> diagnosis_candidates(const std::string& op);

}  // namespace hla::verify::ext
