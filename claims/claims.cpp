// The claims ledger. Every verdict below is computed: identities by randomized identity testing in the
// prime field (numerics/identity.hpp), failures by an exact mismatch plus the smallest rational
// counterexample found (claims/counterexample.hpp), costs by fitted exponents of measured time and
// counted state sizes. Nothing here knows what the paper says is true.
#include "claims/claims.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <thread>

#include "claims/counterexample.hpp"
#include "claims/support.hpp"
#include "core/build_info.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "mpi/comm.hpp"
#include "mpi/farm.hpp"
#include "numerics/compare.hpp"
#include "numerics/evaluate.hpp"
#include "numerics/identity.hpp"

namespace hla::verify {

nlohmann::json run_metadata() {
  nlohmann::json m;
  m["commit"] = build_info::head_commit();
  m["source_tree"] = build_info::source_tree();
  m["compiler"] = build_info::compiler();
  m["flags"] = build_info::cxx_flags();
  m["build_type"] = build_info::build_type();
  m["cpu"] = build_info::cpu_model();
  m["date"] = build_info::utc_now();
  // The load when the ledger started (timed claims record theirs in their evidence): on a machine with fewer cores
  // than its load, timings share them.
  if (const double load = build_info::load_1min(); std::isfinite(load)) m["load_1min"] = load;
  m["cores"] = std::thread::hardware_concurrency();
  return m;
}

bool is_timed_claim(const std::string& id) { return id.rfind("cost.", 0) == 0; }

// Under mpirun the claims are spread over the ranks (mpi/farm.hpp), the longest first by
// `ctx.previous_seconds`; rank 0 gathers every result (in ledger order) and alone prints and returns them.
std::vector<const Claim*> select_claims(const std::vector<std::string>& only) {
  std::vector<const Claim*> selected;
  for (const Claim& c : all_claims())
    if (only.empty() || std::find(only.begin(), only.end(), c.id) != only.end()) selected.push_back(&c);
  for (const auto& id : only)
    if (std::none_of(selected.begin(), selected.end(), [&](const Claim* c) { return c->id == id; }))
      throw InputError("unknown claim id '" + id + "' (see `hla claims --list`)");
  return selected;
}

std::vector<ClaimResult> run_ledger(const LedgerContext& ctx, const std::vector<std::string>& only) {
  const std::vector<const Claim*> selected = select_claims(only);
  const bool distributed_run = distributed::world_size() > 1;
  std::vector<std::size_t> order(selected.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (distributed_run) {
    auto previous = [&](std::size_t i) {
      const auto it = ctx.previous_seconds.find(selected[i]->id);
      return it == ctx.previous_seconds.end() ? 1e9 : it->second;  // unknown: first
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return previous(x) > previous(y); });
  }
  auto run_one = [&](std::size_t i) {
    const Claim& c = *selected[i];
    if (!distributed_run) fmt::print(stderr, "[claims] {:<40} ", c.id);
    auto start = std::chrono::steady_clock::now();
    ClaimResult r;
    try {
      r = c.check(ctx);
    } catch (const std::exception& e) {
      r.verdict = ClaimVerdict::inconclusive;
      r.method = std::string("the check itself raised an error: ") + e.what();
    }
    r.id = c.id;
    r.paper = c.paper;
    r.statement = c.statement;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  std::vector<std::optional<ClaimResult>> slots(selected.size());
  auto deliver = [&](std::size_t i, ClaimResult r) {
    if (distributed_run) fmt::print(stderr, "[claims] {:<40} ", r.id);
    fmt::print(stderr, "{:<13} ({:.1f} s)\n", name_of(r.verdict), r.seconds);
    slots[i] = std::move(r);
  };
  distributed::farm(
      order,
      [&](std::size_t i) {
        if (!distributed_run) {  // one process: no round trip through bytes
          deliver(i, run_one(i));
          return distributed::Bytes{};
        }
        const ClaimResult r = run_one(i);
        const nlohmann::json j{{"verdict", r.verdict},
                               {"method", r.method},
                               {"bound", r.bound},
                               {"evidence", r.evidence},
                               {"counterexample", r.counterexample},
                               {"seconds", r.seconds}};
        distributed::ByteWriter w;
        w.text(j.dump());
        return w.take();
      },
      [&](std::size_t i, const distributed::Bytes& b) {
        if (!distributed_run) return;
        distributed::ByteReader rd(b);
        const nlohmann::json j = nlohmann::json::parse(rd.text());
        ClaimResult r;
        r.id = selected[i]->id;
        r.paper = selected[i]->paper;
        r.statement = selected[i]->statement;
        r.verdict = j.at("verdict");
        r.method = j.at("method");
        r.bound = j.at("bound");
        r.evidence = j.at("evidence");
        r.counterexample = j.at("counterexample");
        r.seconds = j.at("seconds");
        deliver(i, std::move(r));
      },
      // A cost claim fits exponents to measured times: it runs alone on its host, as in one process.
      distributed::FarmOptions{false, [&](std::size_t i) { return is_timed_claim(selected[i]->id); }});
  std::vector<ClaimResult> results;
  for (auto& r : slots)
    if (r) results.push_back(std::move(*r));
  return results;
}

nlohmann::json ledger_json(const std::vector<ClaimResult>& results, const LedgerContext& ctx) {
  nlohmann::json j;
  j["meta"] = run_metadata();
  j["meta"]["seed"] = ctx.seed;
  j["meta"]["quick"] = ctx.quick;
  j["claims"] = nlohmann::json::array();
  for (const auto& r : results)
    j["claims"].push_back({{"id", r.id},
                           {"paper", r.paper},
                           {"statement", r.statement},
                           {"verdict", r.verdict},
                           {"method", r.method},
                           {"bound", r.bound},
                           {"evidence", r.evidence},
                           {"counterexample", r.counterexample},
                           {"seconds", r.seconds}});
  return j;
}

namespace {
std::string md_escape(std::string s) {
  for (std::size_t pos = 0; (pos = s.find('|', pos)) != std::string::npos; pos += 2) s.replace(pos, 1, "\\|");
  return s;
}
std::string matrix_md(const nlohmann::json& m) {
  std::string out;
  for (const auto& row : m) {
    out += "[";
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? ", " : "") + row[i].get<std::string>();
    out += "] ";
  }
  return out;
}
}  // namespace

std::string ledger_markdown(const std::vector<ClaimResult>& results, const LedgerContext& ctx) {
  nlohmann::json meta = run_metadata();
  std::string md = "# Claims ledger\n\n";
  md += fmt::format(
      "Generated by `hla claims --seed {}` — commit `{}`, {}, {}, {}, load {:.1f} on {} cores. Every verdict is "
      "computed; none is written by hand. Re-run one claim with `hla claims --id <id>`.\n\n",
      ctx.seed, meta["commit"].get<std::string>(), meta["compiler"].get<std::string>(), meta["cpu"].get<std::string>(),
      meta["date"].get<std::string>(), meta.value("load_1min", NAN), meta["cores"].get<unsigned>());
  int holds = 0, fails = 0, inconclusive = 0;
  for (const auto& r : results)
    (r.verdict == ClaimVerdict::holds ? holds : r.verdict == ClaimVerdict::fails ? fails : inconclusive)++;
  md +=
      fmt::format("**{} claims: {} hold, {} fail, {} inconclusive.**\n\n", results.size(), holds, fails, inconclusive);
  md += "| id | paper | verdict | method | bound / fit |\n|---|---|---|---|---|\n";
  for (const auto& r : results)
    md += fmt::format("| `{}` | {} | **{}** | {} | {} |\n", r.id, md_escape(r.paper), name_of(r.verdict),
                      md_escape(r.method), md_escape(r.bound));
  md += "\n## Failing claims\n";
  for (const auto& r : results) {
    if (r.verdict != ClaimVerdict::fails) continue;
    md += fmt::format("\n### `{}` — {}\n\n{}\n\n", r.id, md_escape(r.paper), r.statement);
    md += fmt::format("Method: {}\n\n", r.method);
    if (r.evidence.contains("finding")) md += fmt::format("Finding: {}\n\n", r.evidence["finding"].get<std::string>());
    const auto& c = r.counterexample;
    if (!c.is_null() && c.contains("Q")) {
      md += fmt::format("Smallest counterexample found (exact rationals): n={}, d={}, dv={}, options: {}\n\n",
                        c["n"].get<int>(), c["d"].get<int>(), c["dv"].get<int>(), c["options"].get<std::string>());
      md += fmt::format("- Q = {}\n- K = {}\n- V = {}\n- {} = {}\n- {} = {}\n\n", matrix_md(c["Q"]), matrix_md(c["K"]),
                        matrix_md(c["V"]), c["lhs_name"].get<std::string>(), matrix_md(c["lhs"]),
                        c["rhs_name"].get<std::string>(), matrix_md(c["rhs"]));
    } else if (!c.is_null()) {
      md += fmt::format("Counterexample: `{}`\n\n", c.dump());
    }
    if (r.evidence.contains("float_evidence"))
      md += fmt::format("In floating point: {}\n\n", r.evidence["float_evidence"].dump());
    if (r.evidence.contains("correction"))
      md += fmt::format("Correction: {}\n\n", r.evidence["correction"].get<std::string>());
  }
  md +=
      "\n## How verdicts are decided\n\n"
      "- **Identities** (`holds`/`fails`): both sides are evaluated exactly in the prime field F_p, p = 2^61 − 1, at "
      "uniform random points (inputs Q, K, V and the parameters γ, ε, λ all random), for every listed shape. A false "
      "identity of degree ≤ D survives T points with probability ≤ (D/p)^T; the bound column is the union bound over "
      "all output entries and shapes. One mismatch is a proof of failure; the counterexample is then searched in exact "
      "rationals over small shapes and shrunk to entries in {−1, 0, 1} where possible.\n"
      "- **Costs**: fitted log–log exponents of measured thread-CPU time (median of repeats) against n (or d), with "
      "the "
      "RMS residual of the fit; a fit with an RMS residual over 0.25 is inconclusive, and a miss counts as a failure "
      "only when the series, measured again, misses too, both by more than twice the exponent's standard error "
      "(otherwise inconclusive, with the reason and the load); state sizes are counted from the real state types.\n"
      "- **Measured accuracy** (`gated.chunked.cumprod*`): float and double outputs against MPFR-256, each held to "
      "its proven rounding bound (numerics/bounds.hpp); a claim holds when every case is finite and within its "
      "bound, and the first case outside (in order of increasing gate log mass) is the counterexample.\n";
  return md;
}

}  // namespace hla::verify
