// The gated forms by the names the ledger gives them (SPEC "Gated (data-dependent) decay"): linear, hla2 and ahla
// as literal-sum references, serial recurrences, decoding kernels, scans and chunk forms, each taking per-token gates
// γ_t (core/gates.hpp). All but the proposal's recurrences are the registry's forms run with Problem::gates
// (Entry::gated, given in each kind's register.hpp); this names them as the gated ledger (claims/gated.cpp),
// hla verify and the tests hold them against each other, and keeps the proposal's recurrences, which are not forms
// of the harness. Compiled once per scalar group (fast/gated_forms_impl.hpp): rational, fp61, mpfr256, double, float.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/gates.hpp"

namespace hla::gated {

// (operator, form, variant), as in the registry: form ∈ {reference, serial, scan-fold, scan-blelloch,
// scan-twolevel, chunked, decode} (decode: fast/serial/decode.hpp; chunked: fast/chunked/gated.hpp, stable gate factors
// — products of gates in the exact scalars, differences of within-chunk log-gates in floating point); variant "spec"
// for SPEC's gated definitions and recurrences. hla2's serial form also has the recurrences the ledger holds against
// them: "algorithm1-rule" (Alg. 1's G_t = γ_t G_{t−1} + k_t k_tᵀ C_{t−1} with gates), "proposal" (the gated-HLA
// proposal's G ← a_t G + k kᵀ(γ_t C), a_t = √γ_t) and "proposal-corrected" (its G keeping a_t⁴ = γ_t²). The proposal's
// forms need every γ_t to be a square (an exact a_t); they refuse other gates.
struct FormRef {
  std::string op, form, variant = "spec";
  std::string name() const { return "gated " + op + "/" + form + "/" + variant; }
};
const std::vector<FormRef>& forms();
// The forms that exist for the floating scalars only (double, float, mpfr256): "chunked-naive-cumprod", the chunk
// form with every gate factor a quotient of cumulative products P_t / P_s over the whole sequence — the
// formulation many kernels start with, kept to measure where it underflows and loses accuracy (never a default).
// The exact scalars refuse them (an InputError).
const std::vector<FormRef>& floating_only_forms();

// Runs a gated form: validates the shapes, the gates and the options (Options::gamma must stay 1: the decay
// is the gates'), from `init` (nullptr: the zero state) when the form keeps a state (all but the references).
// A non-finite output is refused with a NumericalError, as the registry refuses it.
template <class T>
Run<T> run(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init = nullptr);

// The gated scan operator of `op` on segments A = [0, n/3), B = [n/3, 2n/3), C = [2n/3, n) of g:
// ((A⊕B)⊕C ; E⊕A ; A⊕E) against (A⊕(B⊕C) ; A ; A), every state part stacked in one column.
template <class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string& op, const GatedProblem<T>& g);

// a with a² = x, exactly: the positive root of a rational square, x^((p+1)/4) in F_p (p ≡ 3 mod 4).
// Throws InputError when x is not a square.
template <class T> T exact_square_root(const T& x);

}  // namespace hla::gated
