// The operator table (core/operators.hpp) against what the harness registers and decides: each fact in the table
// is checked against the code it describes, so a row that lies fails here.
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "claims/claims.hpp"
#include "core/operators.hpp"
#include "core/registry.hpp"
#include "fast/backward/passes.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/bounds.hpp"

using namespace hla;

namespace {

template <class T> std::vector<const Entry<T>*> forms_of(const std::string& op) {
  std::vector<const Entry<T>*> out;
  for (const Entry<T>& e : registry<T>().entries())
    if (e.op == op) out.push_back(&e);
  return out;
}

bool has_claim(std::string_view id) {
  for (const auto& c : verify::all_claims())
    if (c.id == id) return true;
  return false;
}

}  // namespace

TEST_CASE("the operator table has one row per operator, in the order of operator_ids", "[operators]") {
  std::set<std::string_view> names;
  std::set<OpId> ids;
  for (const OperatorInfo& o : kOperators) {
    CHECK(names.insert(o.name).second);
    CHECK(ids.insert(o.id).second);
    CHECK(&operator_info(o.id) == &o);
    CHECK(&operator_info(o.name) == &o);
  }
  REQUIRE(operator_ids().size() == kOperators.size());
  for (std::size_t i = 0; i < kOperators.size(); ++i) CHECK(operator_ids()[i] == kOperators[i].name);
}

TEST_CASE("an unknown operator is an input error everywhere that takes a name", "[operators]") {
  CHECK_THROWS_AS(operator_info("hla4"), InputError);
  CHECK_THROWS_WITH(operator_info("hla4"),
                    Catch::Contains("unknown operator 'hla4'") && Catch::Contains("hla3-unmasked"));
  CHECK_THROWS_AS(bounds::order_of("hla4"), InputError);
  CHECK_THROWS_AS(bounds::abs_operator(""), InputError);
  CHECK_THROWS_AS(backward::has_pass("HLA2", backward::Pass::serial), InputError);
  CHECK_THROWS_AS(paper_form_claim("hla4", "serial"), InputError);
  CHECK(find_operator("hla4") == nullptr);
}

TEST_CASE("the registry refuses a form of an operator without a row, or with an option its operator lacks",
          "[operators]") {
  const FormFn<rational> fn = [](const Problem<rational>& p, const Options&, const NamedState<rational>*) {
    return Run<rational>{Mat<rational>::Zero(p.n(), p.dv()), {}};
  };
  Registry<rational> r;
  CHECK_THROWS_AS(r.add({"hla4", "serial", "paper", "", {}, fn}), std::logic_error);
  CHECK_THROWS_AS(r.add({"ahla", "serial", "paper", "", {.ridge = true}, fn}), std::logic_error);  // ahla has no λ
  CHECK_THROWS_AS(r.add({"hla3", "serial", "paper", "", {.decay = true}, fn}), std::logic_error);  // nor hla3 a γ
  r.add({"hla3", "serial", "paper", "", {.normalized = true}, fn});
  CHECK_THROWS_AS(r.add_gates("hla3", "serial", "paper", "", fn), std::logic_error);  // hla3 defines no gates
  r.add({"linear", "serial", "paper", "", {.decay = true}, fn});
  CHECK_NOTHROW(r.add_gates("linear", "serial", "paper", "", fn));
}

TEST_CASE("each operator's options are exactly what its reference takes", "[operators]") {
  for (const OperatorInfo& o : kOperators) {
    INFO(o.name);
    const Caps c = registry<double>().reference(std::string(o.name)).caps;
    CHECK(c.decay == o.options.decay);
    CHECK(c.normalized == o.options.normalized);
    CHECK(c.ridge == o.options.ridge);
    CHECK(c.gates == o.options.gates);
    // Streaming operators have exact references; the softmax baseline has none (exp has no exact value).
    CHECK((registry<rational>().try_find(std::string(o.name), "reference", "spec") != nullptr) == o.streaming);
  }
}

TEST_CASE("the table's bound and cost facts are those of the operator's forms", "[operators]") {
  for (const OperatorInfo& o : kOperators) {
    INFO(o.name);
    if (!o.streaming) {
      CHECK(o.order == 0);
      continue;
    }
    CHECK(o.order >= 1);
    CHECK(o.order <= 3);
    CHECK(o.degree == 2 * o.order + 1);  // q, k per prefix sum, then v: every term is a product of that many inputs
    CHECK(o.flops_d2 * 64 * 64 + o.flops_ddv * 64 * 64 > 0);
    // The abs operator is a fixed point, of the same order, and takes at least the operator's options.
    const OperatorInfo& a = operator_info(o.abs_operator);
    CHECK(a.abs_operator == a.id);
    CHECK(a.order == o.order);
    CHECK((a.options.ridge || !o.options.ridge));
    CHECK((a.options.gates || !o.options.gates));
    // The gates enter the terms exactly when the operator takes gates.
    CHECK((o.gate_degree > 0) == o.options.gates);
  }
}

TEST_CASE("backward, scan and gated-battery flags match what is registered and runnable", "[operators]") {
  for (const OperatorInfo& o : kOperators) {
    const std::string op(o.name);
    INFO(op);
    CHECK(backward::has_pass(op, backward::Pass::serial) == o.backward);
    CHECK(backward::has_pass(op, backward::Pass::scan) == o.scan_backward);
    CHECK((!o.scan_backward || o.backward));
    CHECK(!forms_of<rational>(op).empty() == o.streaming);
    CHECK((registry<rational>().try_find(op, "scan-fold") != nullptr) == o.scan);
    if (o.verify_gates) {
      CHECK(o.options.gates);
      const Entry<rational>* serial = registry<rational>().try_find_exact(op, "serial");
      REQUIRE(serial);
      CHECK(serial->caps.gates);
    }
    // The summaries name parts of the operator's serial state (hla verify joins them into [values denominator]).
    const Entry<rational>* serial = registry<rational>().try_find_exact(op, "serial");
    for (const SummaryPair& s : o.summaries) {
      if (s.values.empty()) continue;
      REQUIRE(serial);
      Problem<rational> p{Mat<rational>::Constant(2, 2, rational(1)), Mat<rational>::Constant(2, 2, rational(1)),
                          Mat<rational>::Constant(2, 1, rational(1))};
      const NamedState<rational> st = serial->fn(p, Options{}, nullptr).state;
      CHECK_NOTHROW(st.at(std::string(s.values)));
      CHECK_NOTHROW(st.at(std::string(s.denominator)));
    }
  }
}

TEST_CASE("the gated ledger's operators are those the table gives a gated battery", "[operators][gated]") {
  std::set<std::string> ledger, table;
  for (const gated::FormRef& f : gated::forms())
    if (f.variant == "spec") ledger.insert(f.op);
  for (const OperatorInfo& o : kOperators)
    if (o.verify_gates) table.insert(std::string(o.name));
  CHECK(ledger == table);
}

TEST_CASE("the claims the table names are claims of the ledger, and every paper form that fails names one",
          "[operators]") {
  for (const OperatorInfo& o : kOperators) {
    INFO(o.name);
    if (!o.monoid_claim.empty()) CHECK(has_claim(o.monoid_claim));
    for (const PaperFormClaim& c : o.paper_forms)
      if (!c.form_prefix.empty()) CHECK(has_claim(c.claim));
  }
  // A paper formula with a registered correction beside it is wrong somewhere: the table must say which claim
  // decides it (hla verify's diagnosis names it beside the verdict).
  for (const Entry<rational>& e : registry<rational>().entries()) {
    if (e.target != Target::paper_formula || !registry<rational>().try_find(e.op, e.form, "corrected")) continue;
    INFO(e.key());
    CHECK_FALSE(e.claim.empty());
  }
}

TEST_CASE("registry entries carry their target and the ledger claim they stand for", "[operators][registry]") {
  auto check_entries = [](const auto& reg) {
    for (const auto& e : reg.entries()) {
      INFO(e.key());
      CHECK((e.target == Target::paper_formula) == (e.variant == "paper"));
      if (e.variant == "paper") CHECK(e.claim == paper_form_claim(e.op, e.form));
      if (e.variant == "spec") CHECK(e.claim.empty());
      if (!e.claim.empty()) CHECK(has_claim(e.claim));
      // A correction of a paper formula the table names stands for a claim; the table's correction claim where its
      // registration names none of its own.
      if (e.variant == "corrected" && reg.try_find(e.op, e.form, "paper") && !paper_form_claim(e.op, e.form).empty())
        CHECK_FALSE(e.claim.empty());
    }
  };
  check_entries(registry<rational>());
  check_entries(registry<double>());
  // Every paper claim of the table has its correction in the ledger, named after it.
  for (const OperatorInfo& o : kOperators)
    for (const PaperFormClaim& c : o.paper_forms)
      if (!c.form_prefix.empty()) {
        INFO(o.name << " " << c.form_prefix);
        CHECK(corrected_form_claim(o.name, c.form_prefix) == std::string(c.claim) + ".corrected");
        CHECK(has_claim(corrected_form_claim(o.name, c.form_prefix)));
      }
  const auto& reg = registry<rational>();
  CHECK(reg.find("hla2", "serial", "paper").claim == "hla2.serial.masked-decay");
  CHECK(reg.find("hla2", "serial", "corrected").claim == "hla2.serial.masked-decay.corrected");
  CHECK(reg.find("hla2", "scan-fold", "corrected").claim == "hla2.scan.masked-decay.corrected");
  CHECK(reg.find("hla2", "chunked", "corrected").claim == "hla2.chunk-form.corrected");  // named at registration
  CHECK(reg.find("hla2", "serial-packed", "corrected").claim == "hla2.packed-symmetric");
  CHECK(reg.find("hla3", "serial", "corrected").claim == "hla3.masked.streaming.corrected");
  CHECK(reg.reference("hla2").target == Target::definition);
}

TEST_CASE("Registry::add fills target and claim from the variant and the table, and keeps a given claim",
          "[operators][registry]") {
  const FormFn<rational> fn = [](const Problem<rational>& p, const Options&, const NamedState<rational>*) {
    return Run<rational>{Mat<rational>::Zero(p.n(), p.dv()), {}};
  };
  Registry<rational> r;
  r.add({"hla2", "serial", "paper", "", {}, fn});
  r.add({"hla2", "serial", "corrected", "", {}, fn});
  r.add({"hla2", "decode", "corrected", "", {}, fn});
  r.add({"hla2", "reference", "spec", "", {}, fn});
  r.add({"linear", "serial", "naive", "", {}, fn});
  Entry<rational> given{"ahla", "chunked", "corrected", "", {}, fn};
  given.claim = "ahla.chunk-form.corrected";
  r.add(given);
  const Entry<rational>& paper = r.find("hla2", "serial", "paper");
  CHECK(paper.target == Target::paper_formula);
  CHECK(paper.claim == "hla2.serial.masked-decay");
  const Entry<rational>& corrected = r.find("hla2", "serial", "corrected");
  CHECK(corrected.target == Target::definition);
  CHECK(corrected.claim == "hla2.serial.masked-decay.corrected");
  CHECK(r.find("hla2", "decode", "corrected").claim.empty());  // no table row names a decode formula
  CHECK(r.find("hla2", "reference", "spec").target == Target::definition);
  CHECK(r.find("hla2", "reference", "spec").claim.empty());
  CHECK(r.find("linear", "serial", "naive").target == Target::definition);
  CHECK(r.find("linear", "serial", "naive").claim.empty());
  CHECK(r.find("ahla", "chunked", "corrected").claim == "ahla.chunk-form.corrected");
}

TEST_CASE("the registered backward passes are the table's backward and scan_backward flags", "[operators]") {
  auto keys = [](const auto& reg) {
    std::set<std::string> out;
    for (const auto& e : reg.entries()) {
      INFO(e.key());
      CHECK(find_operator(e.op) != nullptr);
      CHECK_FALSE(e.cite.empty());
      CHECK(e.caps.chunk == (e.pass != backward::Pass::serial));
      CHECK(out.insert(e.key()).second);
    }
    return out;
  };
  const std::set<std::string> registered = keys(backward::backward_registry<rational>());
  CHECK(keys(backward::backward_registry<double>()) == registered);  // every scalar registers the same passes
  CHECK(keys(backward::backward_registry<fp61>()) == registered);
  std::set<std::string> table;
  for (const OperatorInfo& o : kOperators) {
    const std::string op(o.name);
    if (o.backward) table.insert({op + "/serial", op + "/checkpointed"});
    if (o.scan_backward) table.insert(op + "/scan");
  }
  CHECK(registered == table);
  // The scan folds the corrected decay rule only: it says so, and the sweep and the gradient checks read it.
  CHECK(backward::backward_registry<double>().find("hla2", backward::Pass::scan).caps.corrected_decay);
  CHECK_THROWS_WITH(backward::backward_registry<double>().find("ahla", backward::Pass::scan),
                    Catch::Contains("no scan backward for operator 'ahla'") && Catch::Contains("scan: hla2") &&
                        Catch::Contains("checkpointed: hla2, ahla and linear"));
  CHECK_THROWS_AS(backward::backward_registry<double>().find("hla4", backward::Pass::serial), InputError);
  const Problem<rational> p{Mat<rational>::Constant(3, 2, rational(1)), Mat<rational>::Constant(3, 2, rational(1)),
                            Mat<rational>::Constant(3, 1, rational(1))};
  const Mat<rational> dO = Mat<rational>::Constant(3, 1, rational(1));
  CHECK_THROWS_AS(backward::run_pass<rational>("hla3", backward::Pass::serial, p, Options{}, nullptr, dO,
                                               fast::DecayRule::corrected, 1),
                  InputError);
  CHECK_THROWS_WITH(backward::run_pass<rational>("hla2", backward::Pass::checkpointed, p, Options{}, nullptr, dO,
                                                 fast::DecayRule::corrected, 0),
                    Catch::Contains("chunk width must be >= 1"));
}

#ifdef HLA_CLI
namespace {
std::pair<int, std::string> run_cli(const std::string& args, bool with_stderr) {
  FILE* pipe = ::popen((std::string(HLA_CLI) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, got);
  const int rc = ::pclose(pipe);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}
}  // namespace

TEST_CASE("hla list --operators prints the table, and the CLI names an unknown operator", "[operators][cli]") {
  const auto [rc, out] = run_cli("list --operators --json", false);
  REQUIRE(rc == 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  REQUIRE(j.size() == kOperators.size());
  for (std::size_t i = 0; i < kOperators.size(); ++i) {
    CHECK(j[i]["id"] == kOperators[i].name);
    CHECK(j[i]["order"] == kOperators[i].order);
    CHECK(j[i]["backward"] == kOperators[i].backward);
  }
  const auto [text_rc, text] = run_cli("list --operators", false);
  CHECK(text_rc == 0);
  CHECK_THAT(text, Catch::Contains("hla3-unmasked") && Catch::Contains("4d²+10d·dv"));
  const auto [bad_rc, bad] = run_cli("run --op hla4 --n 4", true);
  INFO(bad);
  CHECK(bad_rc == 2);
  CHECK_THAT(bad, Catch::Contains("unknown operator 'hla4'"));
  CHECK(run_cli("list --json", true).first == 2);
}
#endif
