// The gated forms by the names the ledger gives them (SPEC "Gated (data-dependent) decay"): linear, hla2 and
// ahla as literal-sum references, serial recurrences and scans, each taking per-token gates γ_t
// (core/gates.hpp). All but the proposal's recurrences are the registry's forms run with Problem::gates
// (Entry::gated); this names them as the gated ledger (verify/claims_gated.cpp) holds them against each other,
// and keeps the proposal's recurrences, which are not forms of the harness. Compiled in fast/gated_forms.cpp
// for the exact scalars (rational and fp61).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/gates.hpp"

namespace hla::gated {

// (operator, form, variant), as in the registry: form ∈ {reference, serial, scan-fold, scan-blelloch,
// scan-twolevel}; variant "spec" for SPEC's gated definitions and recurrences. hla2's serial form also has
// the recurrences the ledger holds against them: "algorithm1-rule" (Alg. 1's G_t = γ_t G_{t−1} + k_t k_tᵀ C_{t−1}
// with gates), "proposal" (the gated-HLA proposal's G ← a_t G + k kᵀ(γ_t C), a_t = √γ_t) and
// "proposal-corrected" (its G keeping a_t⁴ = γ_t²). The proposal's forms need every γ_t to be a square
// (an exact a_t); they refuse other gates.
struct FormRef {
  std::string op, form, variant = "spec";
  std::string name() const { return "gated " + op + "/" + form + "/" + variant; }
};
const std::vector<FormRef>& forms();

// Runs a gated form: validates the shapes, the gates and the options (Options::gamma must stay 1: the decay
// is the gates'), from `init` (nullptr: the zero state) when the form keeps a state (all but the references).
template <class T>
Run<T> run(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init = nullptr);

// The gated scan operator of `op` on segments A = [0, n/3), B = [n/3, 2n/3), C = [2n/3, n) of g:
// ((A⊕B)⊕C ; E⊕A ; A⊕E) against (A⊕(B⊕C) ; A ; A), every state part stacked in one column.
template <class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string& op, const GatedProblem<T>& g);

// a with a² = x, exactly: the positive root of a rational square, x^((p+1)/4) in F_p (p ≡ 3 mod 4).
// Throws InputError when x is not a square.
template <class T> T exact_square_root(const T& x);

}  // namespace hla::gated
