// The checking machinery is itself tested: the identity tester must call a known-false identity false
// and a known-true one true; counterexample shrinking must return a counterexample that still fails;
// the ledger must be deterministic in its seed and cover every SPEC claim id.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "claims/claims.hpp"
#include "claims/counterexample.hpp"
#include "claims/support.hpp"
#include "core/inputs.hpp"
#include "numerics/identity.hpp"

using namespace hla;
using namespace hla::verify;

namespace {

// A monoid built for the test: (S, C, G) with G_AB = G_A + G_B + S_B C_A (eq. 4.1's shape, associative),
// and a deliberately broken one with G_AB = G_A + G_B + S_B² C_A: (A⊕B)⊕C and A⊕(B⊕C) then differ by
// (S_B S_C + S_C S_B) C_A. (Reversing the cross-term, S_A C_B, would still be associative.)
template <class T> struct ToySeg { Mat<T> S, C, G; };
template <class T> ToySeg<T> toy_combine(const ToySeg<T>& A, const ToySeg<T>& B, bool broken) {
  return {A.S + B.S, A.C + B.C, A.G + B.G + (broken ? Mat<T>(B.S * B.S * A.C) : Mat<T>(B.S * A.C))};
}
template <class T> ToySeg<T> toy_segment(const Problem<T>& p, Eigen::Index b, Eigen::Index e, bool broken) {
  ToySeg<T> s{Mat<T>::Zero(p.d(), p.d()), Mat<T>::Zero(p.d(), p.dv()), Mat<T>::Zero(p.d(), p.dv())};
  for (Eigen::Index t = b; t < e; ++t) {
    ToySeg<T> tok{p.K.row(t).transpose() * p.K.row(t), p.Q.row(t).transpose() * p.V.row(t),
                  Mat<T>::Zero(p.d(), p.dv())};
    s = toy_combine(s, tok, broken);
  }
  return s;
}
template <class T> std::pair<Mat<T>, Mat<T>> toy_assoc(const Problem<T>& p, bool broken) {
  const Eigen::Index n = p.n(), a = n / 3, b = 2 * n / 3;
  auto A = toy_segment(p, 0, a, broken), B = toy_segment(p, a, b, broken), C = toy_segment(p, b, n, broken);
  return {toy_combine(toy_combine(A, B, broken), C, broken).G, toy_combine(A, toy_combine(B, C, broken), broken).G};
}

IdentityPlan toy_plan() {
  IdentityPlan plan;
  plan.shapes = {{6, 2, 1}, {9, 3, 2}};
  plan.degree = [](const Shape&) { return 6; };
  return plan;
}

}  // namespace

TEST_CASE("identity tester: a true identity holds, with a bound at or below the target", "[claims][identity]") {
  IdentityOutcome r = test_identity(
      toy_plan(), [](const Shape& s, std::mt19937_64& rng) { return toy_assoc(field_problem(s, rng()), false); }, 1);
  CHECK(r.holds);
  CHECK(r.log2_bound <= -59.0);  // -60 per shape, union over 2 shapes: ≤ -59
  CHECK(r.points >= 2);
}

TEST_CASE("identity tester: a broken monoid is caught", "[claims][identity]") {
  IdentityOutcome r = test_identity(
      toy_plan(), [](const Shape& s, std::mt19937_64& rng) { return toy_assoc(field_problem(s, rng()), true); }, 1);
  CHECK_FALSE(r.holds);
  CHECK_THAT(r.failure, Catch::Contains("differs"));
}

TEST_CASE("identity tester: a false identity that agrees on most points is still caught", "[claims][identity]") {
  // lhs − rhs = (q₀₀ − c) for one fixed c: zero at a single value out of 2^61, so T random points find it.
  IdentityPlan plan;
  plan.shapes = {{2, 1, 1}};
  plan.degree = [](const Shape&) { return 1; };
  IdentityOutcome r = test_identity(
      plan,
      [](const Shape& s, std::mt19937_64& rng) {
        Problem<fp61> p = field_problem(s, rng());
        Mat<fp61> a = p.Q, b = p.Q;
        b(0, 0) = Fp(12345);
        return std::make_pair(a, b);
      },
      3);
  CHECK_FALSE(r.holds);
}

TEST_CASE("counterexample search shrinks to a counterexample that still fails", "[claims][counterexample]") {
  RationalEvaluation broken = [](const Problem<rational>& p) { return toy_assoc(p, true); };
  auto cx = find_counterexample(broken);
  REQUIRE(cx);
  CHECK(sides_differ(broken, cx->inputs));
  CHECK(cx->lhs != cx->rhs);
  // Shrunk: every entry is in {−2, …, 2} (the search range) and the problem is small.
  CHECK(cx->inputs.n() <= 6);
  for (const Mat<rational>* m : {&cx->inputs.Q, &cx->inputs.K, &cx->inputs.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) CHECK(abs((*m)(i)) <= 2);
  // The correct monoid has no counterexample in the same search.
  RationalEvaluation good = [](const Problem<rational>& p) { return toy_assoc(p, false); };
  CHECK_FALSE(find_counterexample(good, 4, 2));
}

TEST_CASE("field-uniform parameters are valid rational parameters", "[claims][identity]") {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100; ++i) {
    rational g = field_uniform_parameter(rng);
    CHECK(g > 0);
    CHECK(g < 1);
    CHECK(from_rational<fp61>(g) != Fp(0));
  }
}

TEST_CASE("power fits recover known exponents", "[claims][cost]") {
  PowerFit f = fit_power({1, 2, 4, 8, 16}, {3, 12, 48, 192, 768});
  CHECK(f.exponent == Approx(2.0).margin(1e-12));
  CHECK(f.rms_residual < 1e-12);
}

// Timings y = x^e · (1 + a wobble of relative size `noise`), x = 1, 2, 4, ..., 64: a growth series as a measurement
// returns it.
static PowerFit timed_series(double e, double noise) {
  std::vector<double> x, y;
  for (int i = 0; i < 7; ++i) {
    x.push_back(std::ldexp(1.0, i));
    y.push_back(std::pow(x.back(), e) * (1 + noise * (i % 2 ? 1 : -1)));
  }
  return fit_power(x, y);
}

TEST_CASE("a claim verdict is its name in JSON, written and read back", "[claims]") {
  CHECK(values_of<ClaimVerdict>().size() == 3);
  for (const ClaimVerdict v : values_of<ClaimVerdict>()) {
    const nlohmann::json j = v;
    INFO(j.dump());
    CHECK(j == name_of(v));  // "holds", never the enumerator's number
    CHECK(j.get<ClaimVerdict>() == v);
  }
  CHECK(nlohmann::json(ClaimVerdict::inconclusive) == "inconclusive");
  CHECK_THROWS_AS(nlohmann::json("hold").get<ClaimVerdict>(), InputError);
}

TEST_CASE("a cost claim fails only on a failure that reproduces (issue 49)", "[claims][cost]") {
  auto measurements = [](std::vector<PowerFit> fits) {
    return [fits, k = std::size_t{0}]() mutable { return fits.at(k++); };
  };
  SECTION("the fit's standard error") {
    CHECK(timed_series(1.0, 0).exponent_std_error < 1e-9);
    CHECK(timed_series(1.0, 0.05).exponent_std_error > 1e-3);
  }
  SECTION("a clean fit within the tolerance holds, measured once") {
    const GrowthVerdict v = decide_growth(measurements({timed_series(1.05, 0.01)}), 1.0, 0.1);
    CHECK(v.verdict == ClaimVerdict::holds);
    CHECK(v.fits.size() == 1);
  }
  SECTION("a miss the repeat does not reproduce is inconclusive, with the reason and the load") {
    const GrowthVerdict v = decide_growth(measurements({timed_series(1.125, 0.01), timed_series(1.0, 0.01)}), 1.0, 0.1);
    CHECK(v.verdict == ClaimVerdict::inconclusive);
    CHECK(v.fits.size() == 2);
    CHECK_THAT(v.reason, Catch::Contains("did not reproduce") && Catch::Contains("load"));
  }
  SECTION("a clean miss that reproduces fails") {
    const GrowthVerdict v = decide_growth(measurements({timed_series(2.0, 0.01), timed_series(1.9, 0.01)}), 1.0, 0.1);
    CHECK(v.verdict == ClaimVerdict::fails);
    CHECK_THAT(v.reason, Catch::Contains("reproduced"));
  }
  SECTION("a miss within twice the fit's spread is not a failure") {
    const GrowthVerdict v = decide_growth(measurements({timed_series(1.2, 0.2), timed_series(1.2, 0.2)}), 1.0, 0.1);
    CHECK(v.verdict == ClaimVerdict::inconclusive);
  }
  SECTION("a noisy fit decides nothing") {
    const GrowthVerdict v = decide_growth(measurements({timed_series(3.0, 0.6)}), 1.0, 0.1);
    CHECK(v.verdict == ClaimVerdict::inconclusive);
    CHECK(v.fits.size() == 1);
    CHECK_THAT(v.reason, Catch::Contains("too noisy"));
  }
  SECTION("an O() bound is not refuted by slower growth") {
    CHECK(decide_growth(measurements({timed_series(1.0, 0.01)}), 2.0, 0.3, true).verdict == ClaimVerdict::holds);
  }
}

TEST_CASE("the ledger covers every SPEC claim id exactly once", "[claims][ledger]") {
  const std::vector<std::string> spec_ids{"hla2.masked.streaming",
                                          "hla2.masked.normalized",
                                          "hla2.unmasked.streaming",
                                          "hla2.linear-limit",
                                          "hla2.monoid.unmasked.assoc",
                                          "hla2.monoid.masked.assoc",
                                          "hla2.scan.masked",
                                          "hla2.monoid.unmasked-decay.assoc",
                                          "hla2.monoid.masked-decay.assoc",
                                          "hla2.scan.masked-decay",
                                          "hla2.serial.masked-decay",
                                          "hla2.ridge",
                                          "hla2.multiquery",
                                          "hla2.packed-symmetric",
                                          "hla2.chunk-form",
                                          "hla2.backward",
                                          "ahla.streaming",
                                          "ahla.streaming-decay",
                                          "ahla.normalized",
                                          "ahla.monoid.assoc",
                                          "ahla.scan",
                                          "ahla.monoid-decay.assoc",
                                          "ahla.scan-decay",
                                          "ahla.chunk-form",
                                          "hla3.unmasked",
                                          "hla3.masked.streaming",
                                          "hla3.masked.normalized",
                                          "hla3.recurrence",
                                          "hla3.monoid.assoc",
                                          "hla3.scan",
                                          "cost.hla2.per-token",
                                          "cost.hla2.state",
                                          "cost.ahla.per-token",
                                          "cost.hla3.scan-state",
                                          "cost.chunked"};
  std::multiset<std::string> ids;
  for (const auto& c : all_claims()) ids.insert(c.id);
  for (const auto& id : spec_ids) CHECK(ids.count(id) == 1);
  for (const auto& id : ids) CHECK(ids.count(id) == 1);
}

TEST_CASE("ledger verdicts are computed and reproducible for a seed", "[claims][ledger]") {
  LedgerContext ctx;
  ctx.quick = true;
  ctx.seed = 99;
  // One claim that must hold, one that the exact arithmetic decides as failing (whatever it decides,
  // the same seed must decide it the same way, and a failure must carry a counterexample).
  const std::vector<std::string> ids{"hla2.masked.streaming", "hla2.serial.masked-decay"};
  auto first = run_ledger(ctx, ids), second = run_ledger(ctx, ids);
  REQUIRE(first.size() == 2);
  for (std::size_t i = 0; i < first.size(); ++i) {
    CHECK(first[i].verdict == second[i].verdict);
    CHECK((first[i].verdict == ClaimVerdict::holds || first[i].verdict == ClaimVerdict::fails));
    if (first[i].verdict == ClaimVerdict::fails) {
      CHECK_FALSE(first[i].counterexample.is_null());
      CHECK(first[i].counterexample.dump() == second[i].counterexample.dump());
    }
  }
  CHECK_THROWS_AS(run_ledger(ctx, {"no.such.claim"}), InputError);
}

// The committed ledger (results/claims.json, written by `hla claims` from running code) is the source of
// the verdicts: a claim found failing must come with a correction that the harness verifies, as
// "<id>.corrected", and that correction must hold — unless the ledger's own computation proves that no
// correction of the claimed form exists (a study entry with evidence "no_hla2_form_recurrence": the diagonal
// gate placements of claims/gated_diagonal.hpp).
TEST_CASE("every failing claim has a verified .corrected entry", "[claims][ledger]") {
  std::ifstream in(std::string(HLA_SOURCE_DIR) + "/results/claims.json");
  REQUIRE(in);
  const nlohmann::json ledger = nlohmann::json::parse(in);
  std::map<std::string, std::string> verdict;
  std::set<std::string> proved_uncorrectable;
  for (const auto& c : ledger.at("claims")) {
    verdict[c.at("id").get<std::string>()] = c.at("verdict").get<std::string>();
    if (c.at("evidence").contains("no_hla2_form_recurrence"))
      proved_uncorrectable.insert(c.at("id").get<std::string>());
  }
  std::set<std::string> ids;
  for (const auto& c : all_claims()) ids.insert(c.id);
  for (const auto& id : ids) {
    INFO(id << ": regenerate the ledger with build/bin/hla claims");
    CHECK(verdict.count(id) == 1);
  }
  int failing = 0;
  for (const auto& [id, v] : verdict) {
    if (v != "fails") continue;
    ++failing;
    if (proved_uncorrectable.count(id)) continue;
    INFO(id << " fails: add " << id << ".corrected to claims/list.cpp");
    CHECK(ids.count(id + ".corrected") == 1);
    CHECK(verdict[id + ".corrected"] == "holds");
  }
  CHECK(failing > 0);  // the paper has failing claims: an empty list means the file was not read right
}

TEST_CASE("the chunk-form corrections hold", "[claims][ledger][chunked]") {
  LedgerContext ctx;
  ctx.quick = true;
  for (const ClaimResult& r : run_ledger(
           ctx, {"hla2.chunk-form.corrected", "ahla.chunk-form.corrected", "hla3.masked.normalized.corrected"})) {
    INFO(r.id << ": " << r.method << " " << r.counterexample.dump());
    CHECK(r.verdict == ClaimVerdict::holds);
  }
}
