// `hla mpi-bench`: times one sequence-parallel form on the ranks of the job and prints one JSON object
// (rank 0): the time to each rank's own rows (time_s), its phases (local, cross-rank scan, finishing — each
// the maximum over ranks, median over repeats), and apart from it the gather of the whole output on every
// rank (gather_s: what `hla check` and the sweeps add); bytes sent per rank; the serial chunked form's time
// on the whole sequence at P = 1 for reference; with --calibrate also the MPI point-to-point latency and
// bandwidth (ping-pong between ranks 0 and 1) and the cost of one combine of the operator's segments, from
// which experiments/plots/distributed.py fits the scan's cost model. scripts/bench-distributed.sh drives it.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/inputs.hpp"
#include "core/limits.hpp"
#include "core/registry.hpp"
#include "fast/distributed/exscan.hpp"
#include "fast/distributed/plan.hpp"
#include "fast/distributed/sequence.hpp"
#include "fast/scan/operators.hpp"
#include "mpi/comm.hpp"

namespace hla::cli {
namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double max_over_ranks(double x) {
  double m = x;
  if (distributed::mpi_active()) MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

struct BenchArgs {
  std::string op = "hla2", form = "mpi-chunked";
  long n = 16384, d = 16, dv = 16;
  int chunk = 64, repeats = 5;
  bool calibrate = false, outputs_only = false;
};

// Round-trip time of `bytes` between ranks 0 and 1, median of `reps` (half of it is one message).
double ping_pong(std::size_t bytes, int reps) {
  const int me = distributed::world_rank();
  std::vector<char> buf(std::max<std::size_t>(bytes, 1));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock_type::now();
    if (me == 0) {
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (me == 1) {
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

// Everything checked before MPI or memory is touched: an operator and form of the distributed plan (`--form serial`
// dereferenced the end of the form table), a shape that fits (--n 1e12 was a bad_alloc), and for --calibrate the 16
// tokens its two segments of 8 take (--n 4 read tokens 8-16 of a 4-token input).
void validate_bench(const BenchArgs& a) {
  const auto& plan = distributed::distributed_plan();
  if (std::none_of(plan.begin(), plan.end(), [&](const auto& x) { return x.op == a.op; })) {
    std::string ops;
    for (const auto& x : plan) ops += (ops.empty() ? "" : ", ") + x.op;
    throw InputError("--op '" + a.op + "' has no sequence-parallel form (" + ops + " have)");
  }
  const auto& forms = distributed::distributed_forms();
  if (std::none_of(forms.begin(), forms.end(), [&](const auto& f) { return f.first == a.form; })) {
    std::string names;
    for (const auto& f : forms) names += (names.empty() ? "" : ", ") + f.first;
    throw InputError("--form '" + a.form + "' is not a sequence-parallel form (" + names + ")");
  }
  require_shape(Shape{a.n, a.d, a.dv}, "hla mpi-bench", bytes_per_value<double>());
  if (a.calibrate && a.n < 16) throw InputError("--calibrate combines two segments of 8 tokens: it needs --n >= 16");
}

nlohmann::json run_bench(const BenchArgs& a) {
  const int P = distributed::world_size();
  const auto& reg = registry<double>();
  const auto& plan = *std::find_if(distributed::distributed_plan().begin(), distributed::distributed_plan().end(),
                                   [&](const auto& x) { return x.op == a.op; });
  const Entry<double>& form = reg.find(a.op, a.form, scan::variant_name(plan.scan_variant));  // checks the name
  const distributed::CrossScan how =
      std::find_if(distributed::distributed_forms().begin(), distributed::distributed_forms().end(),
                   [&](const auto& f) { return f.first == a.form; })
          ->second;
  const Problem<double> p = gaussian_problem(Shape{a.n, a.d, a.dv}, 1);
  Options o;
  o.chunk = a.chunk;
  o.state = !a.outputs_only;
  std::vector<double> total, local, scan_t, finish, gather;
  distributed::PhaseStats last;
  for (int r = 0; r < a.repeats + 1; ++r) {  // the first run warms caches and the MPI connections
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock_type::now();
    // Timed: the rank's own rows (what a sequence-parallel step keeps). The gather that `hla check` and the
    // sweeps need for the whole output comes after, timed apart.
    distributed::LocalRun<double> mine = distributed::run_local<double>(plan, how, p, o, nullptr);
    const double t = max_over_ranks(seconds_since(t0));
    (void)distributed::gather_run(std::move(mine), p.n(), p.dv());
    last = distributed::last_phase_stats();
    if (r == 0) continue;
    total.push_back(t);
    local.push_back(max_over_ranks(last.local_seconds));
    scan_t.push_back(max_over_ranks(last.scan_seconds));
    finish.push_back(max_over_ranks(last.finish_seconds));
    gather.push_back(max_over_ranks(last.gather_seconds));
  }
  double scan_bytes = static_cast<double>(last.scan_bytes_sent), max_scan_bytes = scan_bytes;
  MPI_Allreduce(&scan_bytes, &max_scan_bytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  nlohmann::json j{{"op", a.op},
                   {"form", a.form},
                   {"variant", form.variant},
                   {"P", P},
                   {"n", a.n},
                   {"d", a.d},
                   {"dv", a.dv},
                   {"chunk", a.chunk},
                   {"outputs_only", a.outputs_only},
                   {"scalar", "double"},
                   {"repeats", a.repeats},
                   {"host", distributed::host_name()},
                   {"time_s", median(total)},
                   {"local_s", median(local)},
                   {"scan_s", median(scan_t)},
                   {"finish_s", median(finish)},
                   {"gather_s", median(gather)},
                   {"scan_bytes_per_rank_max", max_scan_bytes},
                   {"gather_bytes_rank0", last.gather_bytes_sent},
                   {"state_bytes", scan::with_scan_op<double>(a.op, plan.scan_variant, o, [&](const auto& op) {
                      using Op = std::decay_t<decltype(op)>;
                      return scan::state_bytes<Op, double>(static_cast<std::size_t>(a.d),
                                                           static_cast<std::size_t>(a.dv));
                    })}};
  if (a.calibrate) {
    // One combine of two multi-token segments of the operator, in double, on this rank.
    scan::with_scan_op<double>(a.op, plan.scan_variant, o, [&](const auto& op) {
      const auto A = scan::segment(op, p, 0, 8), B = scan::segment(op, p, 8, 16);
      std::vector<double> t;
      for (int r = 0; r < 21; ++r) {
        const auto t0 = clock_type::now();
        for (int k = 0; k < 50; ++k) {
          const auto C = op.combine(A, B);
          asm volatile("" : : "g"(&C) : "memory");  // keeps the combine
        }
        t.push_back(seconds_since(t0) / 50);
      }
      j["combine_s"] = median(t);
      // The cross-rank scan alone, both algorithms, on every rank's segment of this shape (after a barrier,
      // so that no rank's lateness is counted): the basis of the default (docs/distributed.md).
      for (const auto& [name, how] : {std::pair{"recursive_doubling", distributed::CrossScan::recursive_doubling},
                                      std::pair{"mpi_exscan", distributed::CrossScan::mpi_exscan}}) {
        std::vector<double> ts;
        distributed::PhaseStats st;
        for (int r = 0; r < 101; ++r) {
          MPI_Barrier(MPI_COMM_WORLD);
          const auto t0 = clock_type::now();
          (void)distributed::exclusive_scan_ranks<double>(op, A, MPI_COMM_WORLD, how, st);
          ts.push_back(max_over_ranks(seconds_since(t0)));
        }
        j[std::string("scan_") + name + "_s"] = median(ts);
      }
    });
    if (P >= 2) {
      nlohmann::json pp = nlohmann::json::array();
      for (std::size_t bytes : {std::size_t(8), std::size_t(1024), std::size_t(16384), std::size_t(131072),
                                std::size_t(1048576), std::size_t(4194304)})
        pp.push_back({{"bytes", bytes}, {"round_trip_s", ping_pong(bytes, 51)}});
      j["ping_pong"] = pp;
    }
  }
  return j;
}

const CommandRegistrar mpi_bench_registrar([](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub =
      app.add_subcommand("mpi-bench", "Time a sequence-parallel mpi-* form on the job's ranks (JSON on stdout)");
  sub->add_option("--op", a->op, "operator: hla2, ahla, hla3, linear");
  sub->add_option("--form", a->form, "mpi-chunked or mpi-chunked-rd");
  sub->add_option("--n", a->n, "sequence length")->check(positive_count());
  sub->add_option("--d", a->d, "query/key width")->check(positive_count());
  sub->add_option("--dv", a->dv, "value width")->check(positive_count());
  sub->add_option("--chunk", a->chunk, "chunk width")->check(positive_count());
  sub->add_option("--repeats", a->repeats, "timed repeats (median)")->check(positive_count());
  sub->add_flag("--calibrate", a->calibrate, "also measure MPI latency/bandwidth and one combine");
  sub->add_flag("--outputs-only", a->outputs_only, "no final state (Options::state = false), as make bench times");
  sub->callback([a] {
    validate_bench(*a);
    if (!distributed::mpi_active()) throw InputError("mpi-bench: run it under mpirun (it times the ranks of a job)");
    const nlohmann::json j = run_bench(*a);
    if (distributed::world_rank() == 0) fmt::print("{}\n", j.dump());
  });
});

}  // namespace
}  // namespace hla::cli
