// `hla claims`: decides every claim of the paper by computation and writes results/claims.{json,md}.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>

#include "claims/claims.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/types.hpp"
#include "io/files.hpp"
#include "mpi/comm.hpp"

namespace hla::cli {
namespace {

struct ClaimsArgs {
  std::vector<std::string> ids;
  std::uint64_t seed = 20251031;
  std::string out = "results";
  bool list = false, quick = false;
};

// The ledger's folder, made if missing, and a check that its files can be written: before the ledger's
// minutes of work, not after.
void prepare_output(const std::filesystem::path& file) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path().empty() ? "." : file.parent_path(), ec);
  if (ec) throw InputError("--out: cannot create '" + file.parent_path().string() + "': " + ec.message());
  check_writable(file, "--out");
}

void run_claims(const ClaimsArgs& a) {
  if (a.list) {
    for (const auto& c : verify::all_claims()) fmt::print("{:<42} {:<34} {}\n", c.id, c.paper, c.statement);
    return;
  }
  const bool full = a.ids.empty() && !a.quick;  // a partial run (--id) or a quick run never overwrites the full ledger
  const std::filesystem::path dir(a.out);
  const std::string stem = full ? "claims" : "claims-partial";
  (void)verify::select_claims(a.ids);  // an unknown --id is refused before --out is made (it was left behind)
  if (distributed::world_rank() == 0) prepare_output(dir / (stem + ".json"));
  verify::LedgerContext ctx;
  ctx.seed = a.seed;
  ctx.quick = a.quick;
  // The last full ledger's timings order the claims under mpirun (longest first).
  try {  // a regular file only: a FIFO named claims.json blocked here
    const std::filesystem::path prev = std::filesystem::path(a.out) / "claims.json";
    std::error_code ec;
    if (std::filesystem::symlink_status(prev, ec).type() != std::filesystem::file_type::not_found)
      for (const auto& c : nlohmann::json::parse(read_regular_file(prev, 64 << 20)).at("claims"))
        ctx.previous_seconds[c.at("id")] = c.at("seconds");
  } catch (const std::exception&) {
    ctx.previous_seconds.clear();  // an unreadable old ledger only loses the ordering
  }
  auto results = verify::run_ledger(ctx, a.ids);
  if (distributed::world_rank() != 0) return;  // under mpirun rank 0 gathered the results and writes
  int holds = 0, fails = 0, other = 0;
  for (const auto& r : results)
    (r.verdict == verify::ClaimVerdict::holds ? holds : r.verdict == verify::ClaimVerdict::fails ? fails : other)++;
  write_file_atomically(dir / (stem + ".json"), json_text(verify::ledger_json(results, ctx), 2) + "\n", "ledger");
  write_file_atomically(dir / (stem + ".md"), verify::ledger_markdown(results, ctx), "ledger");
  fmt::print("{} claims: {} hold, {} fail, {} inconclusive -> {}/{}.{{json,md}}\n", results.size(), holds, fails, other,
             a.out, stem);
}

const CommandRegistrar claims_registrar([](CLI::App& app) {
  auto args = std::make_shared<ClaimsArgs>();
  auto* sub =
      app.add_subcommand("claims", "Decide every claim of the paper by computation; write results/claims.{json,md}");
  sub->add_option("--id", args->ids, "check only these claim ids (writes claims-partial.*)");
  add_seed_option(sub, args->seed, "seed of the random points (same seed -> same verdicts)");
  sub->add_option("--out", args->out, "output folder");
  sub->add_flag("--list", args->list, "list the claim ids and exit");
  sub->add_flag("--quick", args->quick, "fewer shapes and shorter timings (writes claims-partial.*)");
  sub->callback([args] { run_claims(*args); });
});

}  // namespace
}  // namespace hla::cli
