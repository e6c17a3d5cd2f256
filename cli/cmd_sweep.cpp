// `hla sweep <config.toml> [--shard i/N] [--out DIR]`: runs a declarative sweep (experiments/lib/sweep.hpp,
// experiments/README.md), resumable; under `mpirun -n P` its points are spread over the ranks (rank 0 writes). `hla
// merge <dir-or-files...> [--out FILE]`: combines shard outputs.
#include <fmt/core.h>

#include <iostream>

#include "cli/commands.hpp"
#include "experiments/lib/sweep.hpp"
#include "mpi/comm.hpp"

namespace hla::cli {
namespace {

struct SweepArgs {
  std::string config, shard = "1/1", out;
  bool dry_run = false, one_per_host = false, same_build = false;
};

void run_sweep_cmd(const SweepArgs& a) {
  const sweep::Config c = sweep::load_config(a.config);
  const sweep::Shard shard = sweep::parse_shard(a.shard);
  if (a.dry_run) {
    if (distributed::world_rank() != 0) return;
    const sweep::Enumeration en = sweep::enumerate(c);
    const auto mine = sweep::shard_points(en.points, shard);
    fmt::print("{}: {} combinations, {} points, shard {}/{}: {} points\n", c.name, en.combinations, en.points.size(),
               shard.index, shard.count, mine.size());
    for (const auto& [why, k] : en.skipped) fmt::print("  skipped {}: {}\n", k, why);
    for (const auto& p : mine) fmt::print("  {:>5} {}\n", p.index, p.key());
    return;
  }
  sweep::SweepOptions o;
  o.out_dir = a.out;
  o.shard = shard;
  o.progress = &std::cerr;
  o.one_per_host = a.one_per_host;
  o.same_build = a.same_build;
  const sweep::SweepSummary s = sweep::run_sweep(c, o);
  if (distributed::world_rank() != 0) return;  // under mpirun rank 0 wrote the files and reports
  fmt::print("{}: {} points ({} already done, {} run, {} failed) → {}\n", c.name, s.points, s.already_done, s.ran,
             s.failed, s.csv.string());
}

const CommandRegistrar sweep_registrar([](CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* sub = app.add_subcommand("sweep", "Run a sweep config (TOML) into results/<name>/points.csv, resumable");
  sub->add_option("config", args->config, "sweep config, e.g. configs/default.toml")->required();
  sub->add_option("--shard", args->shard, "run shard i of N (1-based, e.g. 2/4): the points with index % N == i-1");
  sub->add_option("--out", args->out, "output directory (default results/<config name>)");
  sub->add_flag("--dry-run", args->dry_run, "list the points (after skips) and exit");
  sub->add_flag("--same-build", args->same_build,
                "resume only points this build measured on this machine (source tree, compiler, flags, CPU, host): "
                "an output file holding any other point is refused, never mixed (make run)");
  sub->add_flag("--one-per-host", args->one_per_host,
                "under mpirun: time at most one point per host at a time (no co-running ranks in the timings)");
  sub->callback([args] { run_sweep_cmd(*args); });
});

const CommandRegistrar merge_registrar([](CLI::App& app) {
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("merge", "Merge sweep shard outputs (directories or CSV files) into one points.csv");
  sub->add_option("inputs", *inputs, "directories (every points*.csv in them) or CSV files")->required();
  sub->add_option("--out", *out, "merged CSV (default <first directory>/points.csv); JSON lines beside it");
  sub->callback([inputs, out] {
    std::vector<std::filesystem::path> in(inputs->begin(), inputs->end());
    std::filesystem::path target = *out;
    if (target.empty()) {
      const std::filesystem::path first = in.front();
      target = (std::filesystem::is_directory(first) ? first : first.parent_path()) / "points.csv";
    }
    sweep::merge_outputs(in, target, &std::cerr);
  });
});

}  // namespace
}  // namespace hla::cli
