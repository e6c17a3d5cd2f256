// The claims ledger: every claim of the paper (SPEC "Claims ledger"), with a verdict computed here.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/names.hpp"

namespace hla::verify {

// A claim's verdict; the ledger (results/claims.json and .md) writes its name.
enum class ClaimVerdict { holds, fails, inconclusive };
constexpr NameTable<ClaimVerdict, 3> name_table(ClaimVerdict) {
  return {
      "claim verdict",
      {{{ClaimVerdict::holds, "holds"}, {ClaimVerdict::fails, "fails"}, {ClaimVerdict::inconclusive, "inconclusive"}}}};
}
// In JSON a verdict is its name wherever it is written (the ledger, evidence, the ranks' messages), never
// nlohmann's default for an enum, the enumerator's number.
inline void to_json(nlohmann::json& j, ClaimVerdict v) { j = name_of(v); }
inline void from_json(const nlohmann::json& j, ClaimVerdict& v) { v = parse<ClaimVerdict>(j.get<std::string>()); }

struct ClaimResult {
  std::string id, paper, statement;
  ClaimVerdict verdict = ClaimVerdict::inconclusive;
  std::string method;             // how the verdict was computed
  std::string bound;              // e.g. "≤ 2^-112 (N=..., D=..., S=2^61-1, T=...)"; empty for measured claims
  nlohmann::json evidence;        // numbers a reviewer can re-derive
  nlohmann::json counterexample;  // null unless the claim fails
  double seconds = 0;
};

struct LedgerContext {
  std::uint64_t seed = 20251031;
  bool quick = false;                              // fewer shapes and shorter timings (tests)
  std::map<std::string, double> previous_seconds;  // claim id → seconds in the last ledger (longest first under mpirun)
};

struct Claim {
  std::string id, paper, statement;
  std::function<ClaimResult(const LedgerContext&)> check;
};

// Every claim, in SPEC's order, followed by the ones this harness added (.corrected and new findings).
const std::vector<Claim>& all_claims();

// Runs the claims (all, or those whose id is in `only`), printing progress to stderr. Under mpirun the
// claims are spread over the ranks; rank 0 returns them all, the other ranks an empty list.
std::vector<ClaimResult> run_ledger(const LedgerContext& ctx, const std::vector<std::string>& only);
// The claims `only` names (all of them when it is empty), in ledger order; InputError for an unknown id.
std::vector<const Claim*> select_claims(const std::vector<std::string>& only);

// The claims decided from measured times (cost.*): their verdicts can move with the machine's load, in
// one process as across ranks; under mpirun each runs alone on its host.
bool is_timed_claim(const std::string& id);

nlohmann::json ledger_json(const std::vector<ClaimResult>& results, const LedgerContext& ctx);
std::string ledger_markdown(const std::vector<ClaimResult>& results, const LedgerContext& ctx);

// Build/run metadata recorded in every result file.
nlohmann::json run_metadata();

}  // namespace hla::verify
