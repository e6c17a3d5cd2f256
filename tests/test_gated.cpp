// Gated (data-dependent) decay (SPEC "Gated (data-dependent) decay"): every gated form against the gated
// literal sums, exactly in rationals and in F_p; split-and-carry; a fixed γ as the special case; the recurrences
// that are wrong with gates are caught, and a transcription of the proposal's closed form pins what the
// "proposal" form computes.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>
#include <stdexcept>

#include "claims/claims.hpp"
#include "claims/gated_diagonal.hpp"
#include "core/gates.hpp"
#include "core/registry.hpp"
#include "fast/gated_forms.hpp"
#include "tests/gated_cases.hpp"

using namespace hla;
using namespace hla::gated_tests;
using gated::FormRef;

namespace {

const std::vector<std::string> kOps{"linear", "hla2", "ahla"};

Options normalized_options(const std::string& op) {
  Options o;
  o.normalized = true;
  o.eps = rational(1, 8);
  if (op == "hla2") o.ridge = rational(1, 2);
  return o;
}

// Every gated form of `op` but the reference that claims SPEC's operator (variant spec).
std::vector<FormRef> spec_forms(const std::string& op) {
  std::vector<FormRef> out;
  for (const FormRef& f : gated::forms())
    if (f.op == op && f.variant == "spec" && f.form != "reference") out.push_back(f);
  return out;
}

template <class T> void check_forms_equal_reference(const GatedProblem<T>& g) {
  for (const std::string& op : kOps)
    for (const Options& base : {Options{}, normalized_options(op)})
      for (const FormRef& f : spec_forms(op))
        for (int chunk : {1, 3, 64}) {
          Options o = base;
          o.chunk = chunk;
          o.threads = 2;
          INFO(f.name() << " n=" << g.n() << " normalized=" << o.normalized << " chunk=" << chunk);
          CHECK(gated::run(f, g, o).O == gated::run(FormRef{op, "reference"}, g, o).O);
        }
}

}  // namespace

TEST_CASE("gated: serial and every scan driver equal the gated reference exactly (rational)", "[gated]") {
  for (const Shape& s : {Shape{1, 1, 1}, Shape{5, 2, 3}, Shape{9, 3, 2}})
    check_forms_equal_reference(rational_case(s, 11));
}

TEST_CASE("gated: serial and every scan driver equal the gated reference exactly (F_p, random gates)", "[gated]") {
  for (const Shape& s : {Shape{7, 2, 3}, Shape{13, 3, 2}}) check_forms_equal_reference(field_case(s, 5));
}

TEST_CASE("gated: split-and-carry gives the outputs and final state of one call", "[gated]") {
  const GatedProblem<rational> g = rational_case({9, 2, 2}, 3);
  for (const std::string& op : kOps)
    for (const FormRef& f : spec_forms(op))
      for (Eigen::Index split : {1, 4, 8}) {
        INFO(f.name() << " split at " << split);
        Options o = normalized_options(op);
        o.chunk = 2;
        const Run<rational> whole = gated::run(f, g, o);
        const Run<rational> first = gated::run(f, slice_gated(g, 0, split), o);
        const Run<rational> second = gated::run(f, slice_gated(g, split, g.n()), o, &first.state);
        CHECK(first.O == whole.O.topRows(split));
        CHECK(second.O == whole.O.bottomRows(g.n() - split));
        REQUIRE(second.state.parts.size() == whole.state.parts.size());
        for (std::size_t i = 0; i < whole.state.parts.size(); ++i)
          CHECK(second.state.parts[i].second == whole.state.parts[i].second);
      }
}

TEST_CASE("gated: constant gates reproduce the fixed-gamma forms exactly", "[gated]") {
  const Problem<rational> p = convert_problem<rational>(integer_problem({7, 2, 3}, 9, 2));
  const rational gamma(3, 4);
  const GatedProblem<rational> g = with_constant_gates(p, gamma);
  for (const std::string& op : kOps) {
    Options fixed = normalized_options(op);
    fixed.gamma = gamma;
    const Mat<rational> expected = registry<rational>().reference(op)(p, fixed).O;
    for (const FormRef& f : gated::forms()) {
      if (f.op != op || f.variant != "spec") continue;
      INFO(f.name());
      CHECK(gated::run(f, g, normalized_options(op)).O == expected);
    }
  }
}

// The proposal's recurrence unrolled by hand (S ← a²S + k kᵀ, C ← γC + q vᵀ, G ← a G + k kᵀ(γ C_{prev}), a = √γ):
//   S_t = Σ_{i≤t} Γ(t,i) k_i k_iᵀ,  C_t = Σ_{j≤t} Γ(t,j) q_j v_jᵀ,
//   G_t = Σ_{i≤t} A(t,i) Σ_{j<i} Γ(i,j) k_i (k_i·q_j) v_jᵀ  with A(t,i) = Π_{r=i+1..t} a_r,
// o_t = q_tᵀ(S_t C_t − G_t). Written from the closed form, not from the update order.
Mat<rational> proposal_closed_form(const GatedProblem<rational>& g, const ColVec<rational>& roots) {
  const Problem<rational>& p = g.qkv;
  const auto prod = [](const ColVec<rational>& x, Eigen::Index from, Eigen::Index to) {  // Π_{r=from+1..to} x_r
    rational r = 1;
    for (Eigen::Index k = from + 1; k <= to; ++k) r *= x(k);
    return r;
  };
  Mat<rational> out(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    Mat<rational> S = Mat<rational>::Zero(p.d(), p.d()), C = Mat<rational>::Zero(p.d(), p.dv()), G = C;
    for (Eigen::Index i = 0; i <= t; ++i) {
      S += prod(g.gamma, i, t) * p.K.row(i).transpose() * p.K.row(i);
      C += prod(g.gamma, i, t) * p.Q.row(i).transpose() * p.V.row(i);
      for (Eigen::Index j = 0; j < i; ++j)
        G += prod(roots, i, t) * prod(g.gamma, j, i) * p.K.row(i).dot(p.Q.row(j)) * p.K.row(i).transpose() * p.V.row(j);
    }
    out.row(t) = p.Q.row(t) * (S * C - G);
  }
  return out;
}

TEST_CASE("gated: the proposal form is the proposal's recurrence as printed", "[gated]") {
  const GatedProblem<rational> g = rational_case({6, 2, 2}, 17);
  ColVec<rational> roots(g.n());
  for (Eigen::Index t = 0; t < g.n(); ++t) roots(t) = gated::exact_square_root(g.gamma(t));
  CHECK(roots(0) == rational(1, 2));
  CHECK(gated::run(FormRef{"hla2", "serial", "proposal"}, g, Options{}).O == proposal_closed_form(g, roots));
}

TEST_CASE("gated: the wrong recurrences are caught, and agree only where gates cannot tell them apart", "[gated]") {
  const FormRef ref{"hla2", "reference"};
  const GatedProblem<rational> g = rational_case({6, 2, 2}, 21);  // gates ≠ 1 after G builds up
  for (const char* wrong : {"algorithm1-rule", "proposal"}) {
    INFO(wrong);
    CHECK(gated::run(FormRef{"hla2", "serial", wrong}, g, Options{}).O != gated::run(ref, g, Options{}).O);
    // All gates 1: both reduce to the undecayed §3.1 updates — a test with γ ≡ 1 would not see the mistake.
    const GatedProblem<rational> ungated = with_constant_gates(g.qkv, rational(1));
    CHECK(gated::run(FormRef{"hla2", "serial", wrong}, ungated, Options{}).O == gated::run(ref, ungated, Options{}).O);
  }
  CHECK(gated::run(FormRef{"hla2", "serial", "proposal-corrected"}, g, normalized_options("hla2")).O ==
        gated::run(ref, g, normalized_options("hla2")).O);
  // F_p: squares of random roots.
  GatedProblem<fp61> f = field_case({5, 2, 2}, 8);
  f.gamma = f.gamma.cwiseProduct(f.gamma);
  CHECK(gated::run(FormRef{"hla2", "serial", "proposal"}, f, Options{}).O != gated::run(ref, f, Options{}).O);
  CHECK(gated::run(FormRef{"hla2", "serial", "proposal-corrected"}, f, Options{}).O == gated::run(ref, f, Options{}).O);
}

TEST_CASE("gated: bad gates and options are input errors", "[gated]") {
  const GatedProblem<rational> g = rational_case({4, 2, 2}, 1);
  const FormRef serial{"hla2", "serial"};
  GatedProblem<rational> short_gates = g;
  short_gates.gamma = g.gamma.head(3);
  CHECK_THROWS_AS(gated::run(serial, short_gates, Options{}), InputError);
  for (const rational& bad : {rational(0), rational(5, 4), rational(-1, 2)}) {
    GatedProblem<rational> b = g;
    b.gamma(2) = bad;
    CHECK_THROWS_AS(gated::run(serial, b, Options{}), InputError);
  }
  Options scalar_decay;
  scalar_decay.gamma = rational(1, 2);
  CHECK_THROWS_AS(gated::run(serial, g, scalar_decay), InputError);  // the decay is the gates', not Options::gamma
  GatedProblem<rational> not_square = g;
  not_square.gamma(1) = rational(1, 2);
  CHECK_THROWS_AS(gated::run(FormRef{"hla2", "serial", "proposal"}, not_square, Options{}), InputError);
  CHECK_THROWS_AS(gated::run(FormRef{"hla2", "chunked-monoid"}, g, Options{}), InputError);  // no such gated form
  // The naive cumulative-product formulation exists only to measure its floating-point failure.
  CHECK_THROWS_AS(gated::run(FormRef{"hla2", "chunked-naive-cumprod"}, g, Options{}), InputError);
  const Run<rational> r = gated::run(FormRef{"linear", "serial"}, g, Options{});
  CHECK_THROWS_AS(gated::run(serial, g, Options{}, &r.state), InputError);  // another operator's state
}

TEST_CASE("gated: the ledger's gated claims decide as computed (quick)", "[gated][claims]") {
  verify::LedgerContext ctx;
  ctx.quick = true;
  for (const verify::ClaimResult& r :
       verify::run_ledger(ctx, {"gated.hla2.serial", "gated.hla2.scan.associative", "gated.hla2.proposal",
                                "gated.hla2.proposal.corrected"})) {
    INFO(r.id << ": " << r.method << " " << r.counterexample.dump());
    const bool wrong_recurrence = r.id == "gated.hla2.proposal";
    CHECK(r.verdict == (wrong_recurrence ? verify::ClaimVerdict::fails : verify::ClaimVerdict::holds));
    if (wrong_recurrence) CHECK(r.counterexample.contains("gamma"));
  }
}

// ---- diagonal gates (the study of claims/gated_diagonal.hpp) ----------------------------------------------------

namespace {
const verify::diagonal::Placement& placement(const std::string& id) {
  for (const auto& pl : verify::diagonal::placements())
    if (pl.id == id) return pl;
  throw std::logic_error("no placement " + id);
}
// Every channel of token t gated alike, by gates(t): the scalar-gated case written as diagonal gates.
verify::diagonal::DiagonalProblem<rational> channels_alike(const GatedProblem<rational>& g) {
  return {g.qkv, g.gamma.replicate(1, g.qkv.d()), g.gamma.replicate(1, g.qkv.dv())};
}
}  // namespace

TEST_CASE("gated diagonal: with every channel alike, the placements' sums are the scalar-gated operators", "[gated]") {
  using namespace verify::diagonal;
  const GatedProblem<rational> g = rational_case({5, 2, 2}, 4);
  // Gates on both S (one side) and C: Γ(t,i) Γ(t,j), the gated hla2.
  CHECK(masked_output(placement("s-left+c-key"), channels_alike(g)) ==
        gated::run(FormRef{"hla2", "reference"}, g, Options{}).O);
  // The proposal's placement with roots a_t on S's two sides and a_t² on C, and its recurrence as printed: the
  // scalar proposal's operator and its form.
  GatedProblem<rational> roots = g;
  for (Eigen::Index t = 0; t < g.n(); ++t) roots.gamma(t) = gated::exact_square_root(g.gamma(t));
  CHECK(masked_output(placement("proposal"), channels_alike(roots)) ==
        gated::run(FormRef{"hla2", "reference"}, g, Options{}).O);
  CHECK(hla2_form_recurrence(placement("proposal"), channels_alike(roots), Aging::proposal_as_printed) ==
        gated::run(FormRef{"hla2", "serial", "proposal"}, g, Options{}).O);
  // Scalar gates commute past k_iᵀ q_j: every placement's sum has the scalar-gated rule as its recurrence.
  for (const Placement& pl : placements()) {
    INFO(pl.id);
    const DiagonalProblem<rational> alike = channels_alike(pl.sqrt_on_s ? roots : g);
    CHECK(hla2_form_recurrence(pl, alike, Aging::all_gates_outside) == masked_output(pl, alike));
  }
}

TEST_CASE("gated diagonal: the scalar rule stays exact where per-channel gates stay outside k_iᵀ q_j, not otherwise",
          "[gated]") {
  using namespace verify::diagonal;
  const Problem<rational> p = convert_problem<rational>(integer_problem({5, 3, 2}, 6, 2));
  Mat<rational> alpha(5, 3), beta(5, 2);
  for (Eigen::Index t = 0; t < 5; ++t) {  // per channel, not alike (alike gates are the scalar case)
    for (Eigen::Index c = 0; c < 3; ++c) alpha(t, c) = rational(1, 2 + (t + 2 * c) % 5);
    for (Eigen::Index c = 0; c < 2; ++c) beta(t, c) = rational(2, 3 + (t + 3 * c) % 4);
  }
  const DiagonalProblem<rational> dp{p, alpha, beta};
  for (const char* exact : {"s-left", "c-value", "s-left+c-value"})
    CHECK(hla2_form_recurrence(placement(exact), dp, Aging::all_gates_outside) == masked_output(placement(exact), dp));
  for (const char* inexact : {"s-right", "c-key", "s-two-sided"})
    CHECK(hla2_form_recurrence(placement(inexact), dp, Aging::all_gates_outside) !=
          masked_output(placement(inexact), dp));
  CHECK(exact_rank(Mat<rational>(Mat<rational>::Identity(3, 3))) == 3);
  Mat<rational> dependent(2, 3);
  dependent << 1, 2, 3, 2, 4, 6;
  CHECK(exact_rank(dependent) == 1);
}

// ---- the registry's forms take gates (Problem::gates, Entry::gated) ------------------------------------------------

namespace {

// The registered forms that take gates, as the registry reports them: a new one is added here on purpose.
std::set<std::string> gated_keys() {
  std::set<std::string> keys;
  for (const auto& e : registry<rational>().entries())
    if (e.caps.gates) keys.insert(e.key());
  return keys;
}

// Alg. 1's rule with gates is registered (hla2's printed serial form run with gates) and is wrong there
// (gated.hla2.algorithm1-rule); every other gated form computes its operator's gated definition.
bool claims_definition(const Entry<rational>& e) { return e.key() != "hla2/serial/paper"; }

}  // namespace

TEST_CASE("gated registry: exactly the forms with a gated computation take gates", "[gated]") {
  const std::set<std::string> want{"hla2/reference/spec",
                                   "hla2-unmasked/reference/spec",
                                   "ahla/reference/spec",
                                   "linear/reference/spec",
                                   "hla2/serial/paper",
                                   "hla2/serial/corrected",
                                   "hla2/serial-packed/corrected",
                                   "hla2-unmasked/serial/paper",
                                   "ahla/serial/paper",
                                   "linear/serial/paper",
                                   "hla2/scan-fold/corrected",
                                   "hla2/scan-blelloch/corrected",
                                   "hla2/scan-twolevel/corrected",
                                   "ahla/scan-fold/corrected",
                                   "ahla/scan-blelloch/corrected",
                                   "ahla/scan-twolevel/corrected",
                                   "linear/scan-fold/paper",
                                   "linear/scan-blelloch/paper",
                                   "linear/scan-twolevel/paper",
                                   "hla2/chunked/corrected",
                                   "hla2/chunked-fused/corrected",
                                   "ahla/chunked/paper",
                                   "linear/chunked/paper",
                                   "hla2/decode/corrected",
                                   "hla2/decode-packed/corrected",
                                   "ahla/decode/paper",
                                   "linear/decode/paper",
                                   "hla2/mpi-chunked/corrected",
                                   "hla2/mpi-chunked-rd/corrected",
                                   "ahla/mpi-chunked/corrected",
                                   "ahla/mpi-chunked-rd/corrected",
                                   "linear/mpi-chunked/paper",
                                   "linear/mpi-chunked-rd/paper"};
  CHECK(gated_keys() == want);
  // The floating scalars register the same gated forms, and the naive chunk formulation kept to measure it.
  std::set<std::string> floating = want;
  for (const char* op : {"hla2", "ahla", "linear"}) floating.insert(std::string(op) + "/chunked-naive-cumprod/naive");
  for (const auto& e : registry<double>().entries()) CHECK(e.caps.gates == (floating.count(e.key()) > 0));
}

TEST_CASE("gated registry: every gated form equals its operator's gated reference (rational, F_p)", "[gated]") {
  const GatedProblem<rational> gr = rational_case({9, 2, 3}, 21);
  std::mt19937_64 rng(4);
  const GatedProblem<fp61> gf = field_case({11, 3, 2}, 9);
  for (const auto& e : registry<rational>().entries()) {
    if (!e.caps.gates || e.form == "reference") continue;
    for (const Options& base : {Options{}, normalized_options(e.op)}) {
      Options o = base;
      if (!e.caps.ridge) o.ridge = 0;
      o.chunk = 2;
      o.threads = 2;
      INFO(e.key() << " normalized=" << o.normalized);
      const bool same = e(join_gates(gr), o).O == registry<rational>().reference(e.op)(join_gates(gr), o).O;
      CHECK(same == claims_definition(e));
      const Entry<fp61>& ef = registry<fp61>().find(e.op, e.form, e.variant);
      const bool same_f = ef(join_gates(gf), o).O == registry<fp61>().reference(e.op)(join_gates(gf), o).O;
      CHECK(same_f == claims_definition(e));
    }
  }
}

TEST_CASE("gated registry: split-and-carry with gates gives one call's outputs and state", "[gated]") {
  const Problem<rational> p = join_gates(rational_case({10, 2, 2}, 8));
  for (const auto& e : registry<rational>().entries()) {
    if (!e.caps.gates || !e.caps.state) continue;
    Options o;
    o.chunk = 3;
    const Run<rational> whole = e(p, o);
    for (Eigen::Index split : {1, 5, 9}) {
      INFO(e.key() << " split at " << split);
      const Run<rational> first = e(slice_rows(p, 0, split), o);
      const Run<rational> second = e(slice_rows(p, split, p.n()), o, &first.state);
      CHECK(second.O == whole.O.bottomRows(p.n() - split));
      CHECK(same_state(second.state, whole.state));
    }
  }
}

TEST_CASE("gated registry: constant gates give the fixed-gamma form's results", "[gated]") {
  // Exact scalars: equal. double: the same arithmetic (each step decays by its γ_t = γ), so bit-identical.
  const Problem<double> in = gaussian_problem({17, 3, 2}, 5);
  for (const auto& e : registry<double>().entries()) {
    if (!e.caps.gates || e.form == "reference" || !e.caps.decay) continue;
    Options fixed;
    fixed.gamma = rational(3, 4);
    fixed.chunk = 4;
    Problem<double> gated_in = in;
    gated_in.gates = ColVec<double>::Constant(in.n(), 0.75);
    INFO(e.key());
    if (e.form == "chunked-naive-cumprod") {  // floating only, and its fixed γ is the gated path itself
      CHECK(e(gated_in, Options{.chunk = 4}).O == e(in, fixed).O);
      continue;
    }
    Problem<rational> pr = convert_problem<rational>(in), gr = convert_problem<rational>(gated_in);
    const Entry<rational>& er = registry<rational>().find(e.op, e.form, e.variant);
    CHECK(er(gr, Options{.chunk = 4}).O == er(pr, fixed).O);
    CHECK(same_state(er(gr, Options{.chunk = 4}).state, er(pr, fixed).state));
    if (e.form == "serial" || e.form == "serial-packed") CHECK(e(gated_in, Options{.chunk = 4}).O == e(in, fixed).O);
  }
}

TEST_CASE("gated registry: gates are refused where they mean nothing", "[gated]") {
  Problem<double> p = gaussian_problem({6, 2, 2}, 1);
  p.gates = ColVec<double>::Constant(6, 0.5);
  // A form without a gated computation.
  CHECK_THROWS_WITH(registry<double>().find("hla3", "serial", "corrected")(p, Options{}),
                    Catch::Contains("does not take per-token gates"));
  CHECK_THROWS_WITH(registry<double>().find("hla2", "chunked-monoid", "corrected")(p, Options{}),
                    Catch::Contains("does not take per-token gates"));
  const Entry<double>& e = registry<double>().find("linear", "serial", "paper");
  // Gates and a scalar decay together.
  CHECK_THROWS_WITH(e(p, Options{.gamma = rational(1, 2)}), Catch::Contains("gates and a decay gamma"));
  // A gate per token, each in (0, 1] and finite.
  Problem<double> bad = p;
  bad.gates = ColVec<double>::Constant(5, 0.5);
  CHECK_THROWS_WITH(e(bad, Options{}), Catch::Contains("5 gates for 6 tokens"));
  for (double g : {0.0, -0.5, 1.5, std::nan(""), double(INFINITY)}) {
    bad.gates = ColVec<double>::Constant(6, 0.5);
    bad.gates(3) = g;
    INFO("gate " << g);
    CHECK_THROWS_AS(e(bad, Options{}), InputError);
  }
}

TEST_CASE("gated registry: gate specs are parsed strictly and drawn inside (0, 1]", "[gated]") {
  for (const char* bad : {"", "range", "range:0,1", "range:0.9,0.8", "range:0.5,1.5", "strength:0", "strength:-1",
                          "strength:51", "strength:nan", "sometimes:1", "range:1e400,1"})
    CHECK_THROWS_AS(parse_gate_spec(bad), InputError);
  CHECK(draw_gates(parse_gate_spec("none"), 9, 1).size() == 0);
  for (const char* spec : {"range:0.8,1", "range:1,1", "strength:0.01", "strength:50"}) {
    const GateSpec g = parse_gate_spec(spec);
    const ColVec<double> a = draw_gates(g, 300, 7), b = draw_gates(g, 300, 7);
    INFO(spec);
    CHECK(a == b);  // the seed decides them
    for (Eigen::Index t = 0; t < a.size(); ++t) {
      CHECK(a(t) > 0);
      CHECK(a(t) <= 1);
      CHECK(static_cast<double>(static_cast<float>(a(t))) == a(t));  // float-representable: every scalar sees it
    }
    if (g.kind == GateSpec::Kind::strength) CHECK(a.maxCoeff() > a.minCoeff());  // they vary per token
  }
}
