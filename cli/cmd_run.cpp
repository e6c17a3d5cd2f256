// `hla run`: one (operator, form, variant, scalar) on generated inputs; prints its error against the
// operator's reference and its time. `hla list`: every registered form with what it supports; `hla list
// --operators`: the operator table (core/operators.hpp), as text or JSON.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <chrono>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/dispatch.hpp"
#include "numerics/evaluate.hpp"

namespace hla::cli {
namespace {

// The references are O(n²) (hla3: O(n³)) literal sums in MPFR: past this n `run` times the form alone.
constexpr Eigen::Index kLargestCheckedN = 2048;

void run_one(const RunArgs& a, bool force_reference) {
  const Options opt = a.options();
  with_scalar(a.scalar, [&]<class T>() {
    const bool with_reference = a.shape.n <= kLargestCheckedN || force_reference;
    const Entry<T>& e = checked_form<T>(a, opt, with_reference);
    Problem<double> inputs = gaussian_problem(a.shape, a.seed);
    inputs.gates = draw_gates(parse_gate_spec(a.gates), a.shape.n, a.seed);
    if (!with_reference) {
      const Problem<T> p = convert_problem<T>(inputs);
      auto start = std::chrono::steady_clock::now();
      (void)e(p, opt);
      fmt::print("{} [{}] n={} d={} dv={}: {:.6f} s (reference skipped: n > {}; pass --reference to compute it)\n",
                 e.key(), scalar_name<T>(), a.shape.n, a.shape.d, a.shape.dv,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kLargestCheckedN);
      return;
    }
    Evaluation ev = evaluate(e, inputs, opt);
    fmt::print("{} [{}] n={} d={} dv={} gamma={} gates={} normalized={} eps={} ridge={} chunk={} threads={} seed={}\n",
               e.key(), scalar_name<T>(), a.shape.n, a.shape.d, a.shape.dv, format_rational(opt.gamma), a.gates,
               opt.normalized, format_rational(opt.eps), format_rational(opt.ridge), opt.chunk, opt.threads, a.seed);
    if constexpr (is_exact_v<T>)
      fmt::print("  vs reference: {}\n",
                 ev.error.exact_equal ? "exact agreement" : fmt::format("DIFFERS in {} entries", ev.error.mismatches));
    else
      fmt::print("  vs MPFR-256 reference: max abs {:.3e}, max rel {:.3e}, normwise rel {:.3e} = {:.3g} u\n",
                 ev.error.max_abs, ev.error.max_rel, ev.error.normwise_rel, ev.error.in_units_of_u);
    fmt::print("  time: {:.6f} s\n", ev.seconds);
  });
}

void list_forms() {
  fmt::print("{:<36} {:<8} {:<6} {:<6} {:<6} {:<6} {:<6}  {}\n", "operator/form/variant", "decay", "gates", "norm",
             "ridge", "state", "chunk", "cites");
  for (const auto& e : registry<double>().entries()) {
    auto yn = [](bool b) { return b ? "yes" : "-"; };
    fmt::print("{:<36} {:<8} {:<6} {:<6} {:<6} {:<6} {:<6}  {}\n", e.key(), yn(e.caps.decay), yn(e.caps.gates),
               yn(e.caps.normalized), yn(e.caps.ridge), yn(e.caps.state), yn(e.caps.chunk),
               e.caps.gates ? e.cite + "; gates: " + e.gated_cite : e.cite);
  }
}

nlohmann::json operator_json(const OperatorInfo& o) {
  nlohmann::json summaries = nlohmann::json::array(), paper_forms = nlohmann::json::array();
  for (const SummaryPair& s : o.summaries)
    if (!s.values.empty()) summaries.push_back({{"values", s.values}, {"denominator", s.denominator}});
  for (const PaperFormClaim& c : o.paper_forms)
    if (!c.form_prefix.empty()) paper_forms.push_back({{"form_prefix", c.form_prefix}, {"claim", c.claim}});
  return {{"id", o.name},
          {"definition", o.definition},
          {"streaming", o.streaming},
          {"order", o.order},
          {"abs_operator", operator_info(o.abs_operator).name},
          {"degree", o.degree},
          {"gate_degree", o.gate_degree},
          {"options",
           {{"decay", o.options.decay},
            {"gates", o.options.gates},
            {"normalized", o.options.normalized},
            {"ridge", o.options.ridge}}},
          {"verify_gates", o.verify_gates},
          {"backward", o.backward},
          {"scan_backward", o.scan_backward},
          {"scan", o.scan},
          {"flops_per_token", {{"d2", o.flops_d2}, {"d_dv", o.flops_ddv}}},
          {"summaries", summaries},
          {"monoid_claim", o.monoid_claim},
          {"paper_forms", paper_forms}};
}

void list_operators(bool json) {
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const OperatorInfo& o : kOperators) all.push_back(operator_json(o));
    fmt::print("{}\n", all.dump(2));
    return;
  }
  auto yn = [](bool b) { return b ? "yes" : "-"; };
  fmt::print("{:<14} {:<5} {:<6} {:<6} {:<6} {:<6} {:<6} {:<8} {:<5} {:<16}  {}\n", "operator", "order", "degree",
             "decay", "gates", "norm", "ridge", "backward", "scan", "flops/token", "definition (unnormalized, λ = 0)");
  for (const OperatorInfo& o : kOperators)
    fmt::print("{:<14} {:<5} {:<6} {:<6} {:<6} {:<6} {:<6} {:<8} {:<5} {:<16}  {}\n", o.name, o.order, o.degree,
               yn(o.options.decay), yn(o.options.gates), yn(o.options.normalized), yn(o.options.ridge),
               o.scan_backward ? "+scan" : yn(o.backward), yn(o.scan),
               o.streaming ? fmt::format("{}d²+{}d·dv", o.flops_d2, o.flops_ddv) : "-", o.definition);
}

const CommandRegistrar run_registrar([](CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto force = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("run", "Run one form on generated inputs and report its error against the reference");
  add_run_options(sub, *args);
  sub->add_flag("--reference", *force, "compute the MPFR reference even for n > 2048 (slow: O(n^2))");
  sub->callback([args, force] { run_one(*args, *force); });
});

const CommandRegistrar list_registrar([](CLI::App& app) {
  auto operators = std::make_shared<bool>(false), json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("list", "List every registered form and what it supports");
  sub->add_flag("--operators", *operators, "list the operators instead: the operator table (core/operators.hpp)");
  sub->add_flag("--json", *json, "with --operators: the whole table as JSON");
  sub->callback([operators, json] {
    if (*json && !*operators) throw InputError("--json lists the operator table: use it with --operators");
    if (*operators)
      list_operators(*json);
    else
      list_forms();
  });
});

}  // namespace
}  // namespace hla::cli
