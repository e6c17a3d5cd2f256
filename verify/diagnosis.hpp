// What an implementation computes instead: the candidates its outputs are compared with on the exact cases.
//
//   registered  every form and variant of the operator in the registry — the paper's formulas as printed,
//               the corrected ones, the drawn chunk figures at several chunk widths
//   operators   the other operators' references (hla2 for ahla, the unmasked operator for the masked, ...)
//   mistakes    a catalogue of plausible, named mistakes: the state read before the token's own update,
//               queries and keys swapped, decay dropped / squared / on one index only, ε dropped or put
//               inside |den|, the ridge dropped / in the numerator only / undecayed, the chunk form without
//               its carry (state reset every w tokens), normalization flipped
// Each candidate is one template, evaluated in exact rationals on the small exact cases and in float64 on
// the long or wide ones (fixed head sizes, n up to 300), where rationals cost minutes: on an exact case
// every partial sum is bounded by A ≤ 2^10, so float64's own error (≤ γ_h(2^-53)·2A) is ~2^-29 of the
// float32-level tolerance a match is judged with, and the decision is the one exact arithmetic would make.
// The report lists every candidate that matches.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/gates.hpp"
#include "core/registry.hpp"

namespace hla::verify::ext {

template <class T> struct Candidate {
  std::string key;          // e.g. "hla2/serial/paper", "mistake:decay-squared", "hla2/chunk-figure1c/paper@w=64"
  std::string description;  // one line: what it computes
  std::string claim;        // the ledger claim that decides it against the operator, when there is one
  // The candidate's output, or nullopt where it is not defined for these options.
  std::function<std::optional<Mat<T>>(const Problem<T>&, const Options&)> eval;
};

// Every candidate for an implementation of `op` (the operator's own reference excluded), in the same order
// for every scalar (T = rational or double).
template <class T> std::vector<Candidate<T>> diagnosis_candidates(const std::string& op);
extern template std::vector<Candidate<rational>> diagnosis_candidates<rational>(const std::string&);
extern template std::vector<Candidate<double>> diagnosis_candidates<double>(const std::string&);

// The gated catalogue (--gates): what a gated implementation computes instead, evaluated like the candidates above
// but on the case's tokens and gates, in exact rationals only (the exact cases' gates are dyadic squares, so the
// gated-HLA proposal's a_t = √γ_t is exact too). Named mistakes: Algorithm 1's rule with gates, the proposal's
// recurrence, gates misaligned by one token (late: γ_{t−1} for token t; early: γ_{t+1}), and a chunk form whose
// cross-chunk carry is decayed by the wrong product (without the chunk's first gate, with the previous chunk's last
// gate too, or by the chunk's first gate to the power of the offset + 1), at the chunk widths above.
struct GatedCandidate {
  std::string key, description, claim;
  bool last_row_undefined = false;  // the candidate needs γ_{t+1}: its last row depends on a gate that does not exist
  std::function<std::optional<Mat<rational>>(const GatedProblem<rational>&, const Options&)> eval;
  // The same candidate in float64 (empty where it has none), for cases too long or wide for rationals: the inputs
  // with their gates in Problem::gates. The mistakes that use the wrong gates somewhere and Algorithm 1's rule have
  // one (the registered gated serial forms in double); those needing exact square roots or cubic literal sums do not.
  std::function<std::optional<Mat<double>>(const Problem<double>&, const Options&)> eval_double = {};
};
std::vector<GatedCandidate> gated_diagnosis_candidates(const std::string& op);

// The gated state mistake (--gates --state), matched on the cases that start from a given state: the state handed in
// not decayed by the first token's gate (γ_0 taken as 1 for it; right from the zero state, and whenever γ_0 = 1). True
// when every such case's outputs are SPEC's gated serial form from its state_in with that gate 1 (MPFR-256; within the
// case's bound) and at least one of them differs from SPEC there.
struct CarriedOutputs {
  Options opt;
  Problem<double> in;
  ColVec<double> gamma;
  NamedState<double> state_in;
  Mat<double> got, bound;
  Mat<mpfr256> expected;
};
bool state_in_undecayed(const std::string& op, const std::vector<CarriedOutputs>& cases);

// The state mistake of the catalogue: a chunked kernel's zero padding to a multiple of w tokens, which still decays
// the state it returns. A returned state (got) of a case of n tokens against the true one (truth), with its bound:
// the smallest w at which every given state is the true one advanced by (−n mod w) zero tokens, if any.
struct ReturnedState {
  Options opt;
  long n = 0, d = 0, dv = 0;
  NamedState<double> truth, got, bound;
};
std::optional<int> padding_decay_width(const std::string& op, const std::vector<ReturnedState>& states);

}  // namespace hla::verify::ext
