// `hla check`: every operator × form × variant × scalar on shared random inputs, with its error against
// the operator's reference — exact agreement in rational and fp61 shown as such, rounding error of
// mpfr256/double/float in units of their roundoff u.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/dispatch.hpp"
#include "core/gates.hpp"
#include "core/parse.hpp"
#include "fast/distributed/plan.hpp"
#include "mpi/comm.hpp"
#include "numerics/bounds.hpp"
#include "numerics/evaluate.hpp"

namespace hla::cli {
namespace {

struct OptionCase {
  std::string label;
  Options opt;
  bool gates = false;  // per-token gates drawn from range:1/2,1 (core/gates.hpp), for the forms that take them
};

std::vector<OptionCase> option_cases() {
  std::vector<OptionCase> cases(5);
  cases[0].label = "plain";
  cases[1].label = "gamma=3/4";
  cases[1].opt.gamma = rational(3, 4);
  cases[2].label = "normalized eps=1/8";
  cases[2].opt.normalized = true;
  cases[2].opt.eps = rational(1, 8);
  cases[3].label = "ridge=1/2";
  cases[3].opt.ridge = rational(1, 2);
  cases[4].label = "gates in [1/2,1]";
  cases[4].gates = true;
  return cases;
}

bool supports(const Caps& c, const OptionCase& oc) {
  const Options& o = oc.opt;
  return (o.gamma == 1 || c.decay) && (!o.normalized || c.normalized) && (o.ridge == 0 || c.ridge) &&
         (!oc.gates || c.gates);
}

template <class T> std::string cell(const Entry<T>& e, const Problem<double>& in, const Options& opt) {
  try {
    Evaluation ev = evaluate(e, in, opt);
    if constexpr (is_exact_v<T>)
      return ev.error.exact_equal ? "exact"
                                  : fmt::format("DIFFERS {}/{}", ev.error.mismatches, in.Q.rows() * in.V.cols());
    else
      return fmt::format("{:.3g}u", ev.error.in_units_of_u);
  } catch (const NumericalError& err) { return "non-finite"; }
}

void run_check(const Shape& shape, std::uint64_t seed) {
  const Problem<double> inputs = gaussian_problem(shape, seed);
  Problem<double> gated_inputs = inputs;
  gated_inputs.gates = draw_gates(parse_gate_spec("range:1/2,1"), shape.n, seed);
  fmt::print("Every form against its operator's reference (SPEC definitions), n={} d={} dv={} seed={}.\n", shape.n,
             shape.d, shape.dv, seed);
  fmt::print("rational, fp61: exact comparison. mpfr256, double, float: normwise relative error in units of u.\n\n");
  fmt::print("{:<14} {:<14} {:<10} {:<19}", "operator", "form", "variant", "options");
  for (const auto& s : scalar_names()) fmt::print(" {:>12}", s);
  fmt::print("\n{}\n", std::string(14 + 15 + 11 + 20 + 13 * scalar_names().size(), '-'));
  // Rows come from the double registry (every CPU form has a double instance), then the float-only forms (the GPU
  // forms' tf32 and bf16 products); other scalars fill cells.
  struct Row {
    std::string op, form, variant;
    Caps caps;
  };
  std::vector<Row> all;
  for (const auto& e : registry<double>().entries()) all.push_back({e.op, e.form, e.variant, e.caps});
  for (const auto& e : registry<float>().entries())
    if (!registry<double>().try_find(e.op, e.form, e.variant)) all.push_back({e.op, e.form, e.variant, e.caps});
  for (const Row& e : all) {
    for (const auto& oc : option_cases()) {
      if (!supports(e.caps, oc)) continue;
      fmt::print("{:<14} {:<14} {:<10} {:<19}", e.op, e.form, e.variant, oc.label);
      for (const auto& s : scalar_names()) {
        std::string text = with_scalar(s, [&]<class T>() -> std::string {
          const Entry<T>* et = registry<T>().try_find(e.op, e.form, e.variant);
          if (!et) return "-";
          return cell(*et, oc.gates ? gated_inputs : inputs, oc.opt);
        });
        fmt::print(" {:>12}", text);
      }
      fmt::print("\n");
    }
  }
}

// ---- the sequence-parallel forms (mpi-*) against their serial forms, over the ranks of the job -------------
// Every option case, with and without an initial state, at lengths that give every rank one token (n = P),
// blocks that do not divide n (n = 2P + 1) and a longer sequence; chunk widths that do not divide the blocks.
// rational, fp61: outputs and final state exactly equal to the serial form's. mpfr256, double, float: every
// output within the rounding bound of numerics/bounds.hpp (the sweeps' bound) of the MPFR reference.
struct DistributedCase {
  Eigen::Index n;
  int chunk;
  bool with_state;
  int threads = 1;  // within each rank (hla2: blocks of chunks inside the rank's block, corrected twice)
};

std::vector<DistributedCase> distributed_cases(int P) {
  std::vector<DistributedCase> cases;
  for (const Eigen::Index n : {Eigen::Index(P), Eigen::Index(2 * P + 1), Eigen::Index(13)})
    for (const bool st : {false, true}) cases.push_back({n, n == P ? 1 : 3, st});
  cases.push_back({Eigen::Index(4 * P + 3), 1, true, 3});
  return cases;
}

// Whether the mpi form agrees with the serial form on `pre` (the initial state's tokens, maybe empty) then `main`.
template <class T> std::string distributed_cell(const Entry<T>& mpi, const Entry<T>& serial, const Problem<double>& pre,
                                                const Problem<double>& main, const Options& opt, bool& ok) {
  const Problem<T> p = convert_problem<T>(main);
  std::optional<NamedState<T>> init;
  if (pre.n() > 0) init = serial(convert_problem<T>(pre), opt).state;
  const NamedState<T>* s = init ? &*init : nullptr;
  Run<T> got, want;
  try {
    got = mpi(p, opt, s);
  } catch (const NumericalError&) {
    ok = false;
    return "non-finite";
  }
  // Outputs only (Options::state = false): the same outputs to the bit, no state — across ranks the fused hla2 pass
  // then carries no C, and the last rank computes no state.
  Options bare = opt;
  bare.state = false;
  const Run<T> only = mpi(p, bare, s);
  if (!(only.O == got.O) || !only.state.parts.empty()) {
    ok = false;
    return "OUTPUTS-ONLY DIFFER";
  }
  if constexpr (is_exact_v<T>) {
    want = serial(p, opt, s);
    const ErrorStats e = compare_exact(got.O, want.O);
    const bool same_state = scan::same_named(got.state, want.state);
    ok = ok && e.exact_equal && same_state;
    if (!e.exact_equal) return fmt::format("DIFFERS {}/{}", e.mismatches, got.O.size());
    return same_state ? "exact" : "STATE DIFFERS";
  } else {
    // The reference and the bound of the whole sequence [pre; main], read on main's rows.
    // Without a prefix, pre's matrices are 0×0: Eigen's comma initializer cannot stack them (an assertion in debug
    // builds, found under make debug), so the whole sequence is main itself.
    Problem<double> full = main;
    if (pre.n() > 0) {
      full = Problem<double>{Mat<double>(pre.n() + main.n(), main.d()), Mat<double>(pre.n() + main.n(), main.d()),
                             Mat<double>(pre.n() + main.n(), main.dv())};
      full.Q << pre.Q, main.Q;
      full.K << pre.K, main.K;
      full.V << pre.V, main.V;
      if (main.gates.size()) {
        full.gates.resize(pre.n() + main.n());
        full.gates << pre.gates, main.gates;
      }
    }
    const Eigen::Index N = full.n(), n = main.n(), dv = main.dv(), off = pre.n();
    Options plain = opt;
    plain.normalized = false;
    plain.eps = 0;
    const Mat<mpfr256> num =
        registry<mpfr256>().reference(mpi.op)(convert_problem<mpfr256>(bounds::augmented(full, false)), plain).O;
    const Mat<double> A =
        registry<double>().reference(bounds::abs_operator(mpi.op))(bounds::augmented(full, true), plain).O * (1 + 1e-9);
    const mpfr256 eps = from_rational<mpfr256>(opt.eps);
    Mat<mpfr256> R(N, dv);
    ColVec<mpfr256> den(N);
    for (Eigen::Index t = 0; t < N; ++t) {
      den(t) = opt.normalized ? mpfr256(num(t, dv) + eps) : mpfr256(1);
      for (Eigen::Index c = 0; c < dv; ++c) R(t, c) = opt.normalized ? mpfr256(num(t, c) / den(t)) : num(t, c);
    }
    const bool inexact = opt.gamma != 1 && to_mpfr(from_rational<T>(opt.gamma)) != from_rational<mpfr256>(opt.gamma);
    const bool gated = full.gates.size() > 0;
    // Gated blocks are finished by the gated chunked form, whose gate factors come from log-gates within each chunk
    // (bounds::gate_factor_depth counts their roundings, per prefix-sum level).
    const long h =
        bounds::rounding_depth(mpi.op, bounds::accumulation_depth(mpi.form, N, opt.chunk), opt.gamma != 1 || gated,
                               inexact, N, main.d()) +
        bounds::order_of(mpi.op) * bounds::gate_factor_depth(mpi.form, N, opt.chunk, bounds::log_mass(full.gates));
    const Mat<double> B =
        bounds::output_bounds(R, A, opt.normalized, den, from_rational<double>(opt.eps), unit_roundoff<T>(), h);
    double worst = 0;
    for (Eigen::Index t = 0; t < n; ++t)
      for (Eigen::Index c = 0; c < dv; ++c) {
        const double err = abs(to_mpfr(got.O(t, c)) - R(off + t, c)).template convert_to<double>();
        if (err > 0) worst = std::max(worst, err / B(off + t, c));
      }
    const bool within = worst <= 1;
    ok = ok && within;
    return fmt::format("{}{:.2g}", within ? "" : "EXCEEDS ", worst);
  }
}

bool run_distributed_check(std::uint64_t seed) {
  const int P = distributed::comm_size(distributed::sequence_comm());
  fmt::print("\nSequence-parallel forms on P = {} rank(s) against their serial forms (d=3 dv=2, seed={}).\n", P, seed);
  fmt::print(
      "rational, fp61: outputs and final state exactly equal. mpfr256, double, float: worst error / rounding bound (<= "
      "1).\n\n");
  fmt::print("{:<8} {:<20} {:<19} {:>3} {:>3} {:>5} {:>7}", "operator", "form", "options", "n", "w", "state",
             "threads");
  for (const auto& s : scalar_names()) fmt::print(" {:>14}", s);
  fmt::print("\n");
  bool all_ok = true;
  int cells = 0;
  for (const auto& e : registry<double>().entries()) {
    if (e.form.rfind("mpi-", 0) != 0) continue;
    const auto& plan = *std::find_if(distributed::distributed_plan().begin(), distributed::distributed_plan().end(),
                                     [&](const auto& x) { return x.op == e.op; });
    for (const auto& oc : option_cases()) {
      if (!supports(e.caps, oc)) continue;
      for (const DistributedCase& dc : distributed_cases(P)) {
        Options opt = oc.opt;
        opt.chunk = dc.chunk;
        opt.threads = dc.threads;
        Problem<double> main = gaussian_problem(Shape{dc.n, 3, 2}, seed + static_cast<std::uint64_t>(dc.n));
        Problem<double> pre = dc.with_state ? gaussian_problem(Shape{3, 3, 2}, seed + 1000) : Problem<double>{};
        if (oc.gates) {  // gates of their own on both, so that a carry across ranks or from the state needs them
          main.gates = draw_gates(parse_gate_spec("range:1/2,1"), main.n(), seed + static_cast<std::uint64_t>(dc.n));
          if (pre.n() > 0) pre.gates = draw_gates(parse_gate_spec("range:1/2,1"), pre.n(), seed + 1000);
        }
        fmt::print("{:<8} {:<20} {:<19} {:>3} {:>3} {:>5} {:>7}", e.op, e.form, oc.label, dc.n, dc.chunk,
                   dc.with_state ? "yes" : "no", dc.threads);
        for (const auto& s : scalar_names()) {
          const std::string text = with_scalar(s, [&]<class T>() -> std::string {
            const auto& reg = registry<T>();
            return distributed_cell<T>(reg.find(e.op, e.form, e.variant),
                                       reg.find(plan.op, plan.serial_form, plan.serial_variant), pre, main, opt,
                                       all_ok);
          });
          fmt::print(" {:>14}", text);
          ++cells;
        }
        fmt::print("\n");
      }
    }
  }
  fmt::print("\ndistributed: {} cells on {} rank(s): {}\n", cells, P, all_ok ? "all agree" : "MISMATCH");
  return all_ok;
}

const CommandRegistrar check_registrar([](CLI::App& app) {
  auto* sub = app.add_subcommand("check", "Table of every form x scalar against its reference");
  auto shape = std::make_shared<Shape>(Shape{10, 3, 2});
  auto seed = std::make_shared<std::uint64_t>(1);
  sub->add_option("--n", shape->n, "sequence length")->check(positive_count());
  sub->add_option("--d", shape->d, "query/key width")->check(positive_count());
  sub->add_option("--dv", shape->dv, "value width")->check(positive_count());
  add_seed_option(sub, *seed, "input seed");
  auto distributed_only = std::make_shared<bool>(false);
  sub->add_flag("--distributed-only", *distributed_only, "only the mpi-* forms against their serial forms");
  sub->callback([shape, seed, distributed_only] {
    // Every cell runs a form in every scalar against the MPFR reference: the largest, rational, counted, before the
    // first cell allocates (--d 1000000000 took the machine with it).
    if (!*distributed_only)
      require_shape(*shape, "hla check", bytes_per_value<rational>(), 0, kMaxWidth, bytes_per_value<mpfr256>());
    // Under mpirun every rank computes every cell (the mpi-* forms are collective); rank 0 prints.
    if (distributed::world_rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      throw std::runtime_error("no /dev/null");
    if (!*distributed_only) run_check(*shape, *seed);
    const bool ok = run_distributed_check(*seed);
    std::fflush(stdout);
    if (!ok) throw CLI::RuntimeError(1);
  });
});

}  // namespace
}  // namespace hla::cli
