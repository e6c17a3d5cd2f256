// The operator table: everything the harness knows about an operator, in one row per operator.
//
// Forms (reference/, fast/) say how to compute an operator; this table says what the operator is and what the
// rest of the harness needs to know about it: its order and degree (rounding bounds, identity tests), the options
// it defines, the variant that computes it exactly, whether it has a backward, its cost per token, the state it
// carries, and the ledger claims its paper formulas stand for. docs/operators.md has the definitions themselves.
//
// Adding an operator (CONTRIBUTING.md): a row here and an enumerator in `OpId`. Every place that must do something
// per operator switches on `OpId` without a default, so -Werror=switch names each one; a name that is not in the
// table is refused (InputError) by `operator_info`, wherever it comes from.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace hla {

enum class OpId { hla2, hla2_unmasked, ahla, hla3, hla3_unmasked, linear, softmax };

// The options an operator defines; a registered form's Caps may only ask for these (Registry::add checks).
struct OperatorOptions {
  bool decay = false;       // γ < 1
  bool gates = false;       // per-token gates γ_t (docs/operators.md "Gated decay")
  bool normalized = false;  // o_t / (den_t + ε)
  bool ridge = false;       // + λ Σ_j (q_t·q_j) v_j
};

// A state part that carries a value summary, and the part that carries its denominator summary (the summary of
// [V 1]'s last column): augmented problems join them into one matrix (hla verify's state cases).
struct SummaryPair {
  std::string_view values;  // "" when unused
  std::string_view denominator;
};

// A paper formula of this operator (forms registered with variant "paper" whose form name starts with
// `form_prefix`) and the ledger claim that decides it against the operator (results/claims.md).
struct PaperFormClaim {
  std::string_view form_prefix;  // "" when unused
  std::string_view claim;
};

struct OperatorInfo {
  OpId id;
  std::string_view name;        // the id used everywhere: CLI, registry, sweeps, ledger, JSON
  std::string_view definition;  // o_t, unnormalized and λ = 0 (docs/operators.md "Operators" has the whole table)
  bool streaming;               // a linear-attention operator with streaming forms; false: the softmax baseline
  int order;                    // nested prefix sums its streaming form keeps (bounds::rounding_depth)
  OpId abs_operator;            // its value on |Q|, |K|, |V| bounds Σ|terms| of any of its forms (bounds)
  int degree;                   // polynomial degree of an output entry in (Q, K, V) (identity tests)
  int gate_degree;              // degree of an output entry in one token's gate (Γ(t,i)Γ(t,j): 2)
  OperatorOptions options;      // what its definition takes (the reference's Caps)
  bool verify_gates;            // hla verify --gates has a battery for it (gated diagnosis, gated backward)
  bool backward;                // reverse-mode passes (fast/backward): serial and checkpointed
  bool scan_backward;           // a reverse scan under ⊕* as well
  bool scan;                    // a scan operator (fast/scan): hla verify --combine can test a combine
  double flops_d2, flops_ddv;   // useful flops per token of the serial recurrence: flops_d2·d² + flops_ddv·d·dv
  std::array<SummaryPair, 2> summaries;  // value/denominator summaries of its serial state
  std::string_view monoid_claim;         // the ledger claim of its decayed scan monoid's associativity, or ""
  std::string_view monoid_formula;       // that monoid's combine as the paper prints it
  std::array<PaperFormClaim, 3> paper_forms;
};

// Useful flops per token (multiply and add counted separately; O(d) terms dropped):
//   hla2           4d² + 10·d·dv   S += k kᵀ (2d²), u = qᵀS (2d²); C += q vᵀ, G += k (kᵀC) (2+2+2), u C, qᵀG
//   hla2-unmasked  4d² + 4·d·dv    S, u = qᵀS; C += q vᵀ, u C
//   ahla           8·d·dv          P += k vᵀ, r = qᵀP, E += k r, o = qᵀE
//   hla3           4d² + 8·d·dv    S^K += k kᵀ, S^K q; P += k vᵀ, qᵀP, F += (S^K q)(qᵀP), o = qᵀF
//   hla3-unmasked  8d² + 4·d·dv    S^K, S^Q updates, S^Q S^K q; P += k vᵀ, zᵀP
//   linear         4·d·dv          S += k vᵀ, o = qᵀS
// Degrees (identity tests' Schwartz–Zippel bound): hla2 and ahla entries are degree 5 in (Q, K, V), hla3's 7
// (its paper forms' S^Q carries stay ≤ 7), linear 3.
// One row per operator, its fields in OperatorInfo's order (kept by hand as a table, not by clang-format).
// clang-format off
inline constexpr std::array<OperatorInfo, 7> kOperators{{
    {OpId::hla2, "hla2", "Σ_{j≤t} Σ_{i≤j} γ^((t−i)+(t−j)) (q_t·k_i)(q_j·k_i) v_j", true, 2, OpId::hla2_unmasked, 5, 2,
     {.decay = true, .gates = true, .normalized = true, .ridge = true}, true, true, true, true, 4, 10,
     {{{"C", "m"}, {"G", "h"}}}, "hla2.monoid.masked-decay.assoc", "§4.2 ⊕γ: G = ρB GA + GB + SB(ρB CA)",
     {{{"serial", "hla2.serial.masked-decay"}, {"scan-", "hla2.scan.masked-decay"}, {"chunk-figure1c", "hla2.chunk-form"}}}},
    {OpId::hla2_unmasked, "hla2-unmasked", "Σ_{j≤t} Σ_{i≤t} γ^((t−i)+(t−j)) (q_t·k_i)(q_j·k_i) v_j = q_tᵀ S_t C_t", true, 2, OpId::hla2_unmasked, 5, 2,
     {.decay = true, .gates = true, .normalized = true, .ridge = true}, false, false, false, true, 4, 4, {}, "", "", {}},
    {OpId::ahla, "ahla", "Σ_{i≤t} Σ_{j≤i} γ^(t−j) (q_t·k_i)(q_i·k_j) v_j", true, 2, OpId::ahla, 5, 1,
     {.decay = true, .gates = true, .normalized = true, .ridge = false}, true, true, false, true, 0, 8,
     {{{"P", "m"}, {"E", "n"}}}, "ahla.monoid-decay.assoc", "§6.2: R = ρB RA + RB",
     {{{"scan-", "ahla.scan-decay"}, {"chunk-figure2c", "ahla.chunk-form"}, {}}}},
    {OpId::hla3, "hla3", "Σ_{u≤t} Σ_{i≤u} Σ_{j≤u} (q_t·k_i)(q_u·k_i)(q_u·k_j) v_j", true, 3, OpId::hla3_unmasked, 7, 0,
     {.normalized = true}, false, false, false, true, 4, 8, {}, "", "",
     {{{"serial", "hla3.masked.streaming"}, {"scan-", "hla3.scan"}, {}}}},
    {OpId::hla3_unmasked, "hla3-unmasked", "q_tᵀ S^K_t S^Q_t P_t", true, 3, OpId::hla3_unmasked, 7, 0,
     {.normalized = true}, false, false, false, false, 8, 4, {}, "", "", {}},
    {OpId::linear, "linear", "Σ_{j≤t} γ^(t−j) (q_t·k_j) v_j", true, 1, OpId::linear, 3, 1,
     {.decay = true, .gates = true, .normalized = true, .ridge = false}, true, true, false, true, 0, 4,
     {{{"S", "z"}, {}}}, "", "", {}},
    {OpId::softmax, "softmax", "causal softmax(QKᵀ/√d) V", false, 0, OpId::softmax, 0, 0, {}, false, false, false,
     false, 0, 0, {}, "", "", {}},
}};
// clang-format on

inline const OperatorInfo& operator_info(OpId id) {
  for (const OperatorInfo& o : kOperators)
    if (o.id == id) return o;
  throw std::logic_error("operator enumerator without a row in kOperators");
}

// The ids, in the table's order.
inline const std::vector<std::string>& operator_ids() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (const OperatorInfo& o : kOperators) v.emplace_back(o.name);
    return v;
  }();
  return ids;
}

// The names of the operators with `pred`, as "a, b and c" for messages.
template <class Pred> std::string operator_names(Pred pred) {
  std::vector<std::string> names;
  for (const OperatorInfo& o : kOperators)
    if (pred(o)) names.emplace_back(o.name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

inline const OperatorInfo* find_operator(std::string_view name) {
  for (const OperatorInfo& o : kOperators)
    if (o.name == name) return &o;
  return nullptr;
}

// An unknown operator is an input error everywhere; the message lists the known ones.
inline const OperatorInfo& operator_info(std::string_view name) {
  if (const OperatorInfo* o = find_operator(name)) return *o;
  throw InputError("unknown operator '" + std::string(name) +
                   "' (known: " + operator_names([](const OperatorInfo&) { return true; }) + ")");
}
inline OpId op_id(std::string_view name) { return operator_info(name).id; }

// The ledger claim a paper formula (op, form, "paper") stands for, or "" (diagnosis names it beside a verdict).
inline std::string paper_form_claim(std::string_view op, std::string_view form) {
  for (const PaperFormClaim& c : operator_info(op).paper_forms)
    if (!c.form_prefix.empty() && form.substr(0, c.form_prefix.size()) == c.form_prefix) return std::string(c.claim);
  return "";
}

// The ledger claim the harness's correction of that paper formula (op, form, "corrected") stands for, or "": the
// ledger names it after the claim it corrects, "<claim>.corrected" (claims/list.cpp; [operators] checks each exists).
inline std::string corrected_form_claim(std::string_view op, std::string_view form) {
  const std::string corrects = paper_form_claim(op, form);
  return corrects.empty() ? "" : corrects + ".corrected";
}

}  // namespace hla
