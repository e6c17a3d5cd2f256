// `hla check`: every operator × form × variant × scalar on shared random inputs, with its error against
// the operator's reference — exact agreement in rational and fp61 shown as such, rounding error of
// mpfr256/double/float in units of their roundoff u.
#include <fmt/core.h>

#include <map>

#include "cli/commands.hpp"
#include "core/dispatch.hpp"
#include "core/parse.hpp"
#include "verify/evaluate.hpp"

namespace hla::cli {
namespace {

struct OptionCase {
  std::string label;
  Options opt;
};

std::vector<OptionCase> option_cases() {
  std::vector<OptionCase> cases(4);
  cases[0].label = "plain";
  cases[1].label = "gamma=3/4";
  cases[1].opt.gamma = rational(3, 4);
  cases[2].label = "normalized eps=1/8";
  cases[2].opt.normalized = true;
  cases[2].opt.eps = rational(1, 8);
  cases[3].label = "ridge=1/2";
  cases[3].opt.ridge = rational(1, 2);
  return cases;
}

bool supports(const Caps& c, const Options& o) {
  return (o.gamma == 1 || c.decay) && (!o.normalized || c.normalized) && (o.ridge == 0 || c.ridge);
}

template <class T> std::string cell(const Entry<T>& e, const Problem<double>& in, const Options& opt) {
  try {
    Evaluation ev = evaluate(e, in, opt);
    if constexpr (is_exact_v<T>)
      return ev.error.exact_equal ? "exact" : fmt::format("DIFFERS {}/{}", ev.error.mismatches, in.Q.rows() * in.V.cols());
    else
      return fmt::format("{:.3g}u", ev.error.in_units_of_u);
  } catch (const NumericalError& err) {
    return "non-finite";
  }
}

void run_check(const Shape& shape, std::uint64_t seed) {
  const Problem<double> inputs = gaussian_problem(shape, seed);
  fmt::print("Every form against its operator's reference (SPEC definitions), n={} d={} dv={} seed={}.\n",
             shape.n, shape.d, shape.dv, seed);
  fmt::print("rational, fp61: exact comparison. mpfr256, double, float: normwise relative error in units of u.\n\n");
  fmt::print("{:<14} {:<14} {:<10} {:<19}", "operator", "form", "variant", "options");
  for (const auto& s : scalar_names()) fmt::print(" {:>12}", s);
  fmt::print("\n{}\n", std::string(14 + 15 + 11 + 20 + 13 * scalar_names().size(), '-'));
  // Rows come from the double registry (every form has a double instance); other scalars fill cells.
  for (const auto& e : registry<double>().entries()) {
    for (const auto& oc : option_cases()) {
      if (!supports(e.caps, oc.opt)) continue;
      fmt::print("{:<14} {:<14} {:<10} {:<19}", e.op, e.form, e.variant, oc.label);
      for (const auto& s : scalar_names()) {
        std::string text = with_scalar(s, [&]<class T>() -> std::string {
          const Entry<T>* et = registry<T>().try_find(e.op, e.form, e.variant);
          if (!et) return "-";
          return cell(*et, inputs, oc.opt);
        });
        fmt::print(" {:>12}", text);
      }
      fmt::print("\n");
    }
  }
}

const CommandRegistrar registrar([](CLI::App& app) {
  auto* sub = app.add_subcommand("check", "Table of every form x scalar against its reference");
  auto shape = std::make_shared<Shape>(Shape{10, 3, 2});
  auto seed = std::make_shared<std::uint64_t>(1);
  sub->add_option("--n", shape->n, "sequence length")->check(CLI::PositiveNumber);
  sub->add_option("--d", shape->d, "query/key width")->check(CLI::PositiveNumber);
  sub->add_option("--dv", shape->dv, "value width")->check(CLI::PositiveNumber);
  sub->add_option("--seed", *seed, "input seed");
  sub->callback([shape, seed] { run_check(*shape, *seed); });
});

}  // namespace
}  // namespace hla::cli
