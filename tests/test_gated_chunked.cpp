// The chunked gated forms (fast/chunked/gated.hpp, and hla2's one-pass form fast/chunked/hla2_fused.hpp;
// docs/operators.md "Gated (data-dependent) decay", "Chunk forms"): exactly the gated serial forms in rationals and F_p
// (outputs and every state part), split-and-carry, the fixed-γ chunk forms with constant gates; in float and double
// within a proven rounding-error bound of MPFR-256; and the naive cumulative-product formulation failing where the
// stable one stays within its bound.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "core/gates.hpp"
#include "core/registry.hpp"
#include "fast/chunked/gated.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/bounds.hpp"
#include "numerics/compare.hpp"
#include "tests/gated_cases.hpp"

using namespace hla;
using namespace hla::gated_tests;
using gated::FormRef;

namespace {

const std::vector<std::string> kGatedOps{"linear", "hla2", "ahla"};
// Every gated chunk form: each operator's chunked form, and hla2's one-pass chunked-fused (its blocks of chunks,
// one per thread, joined by running products of gates: threads 3 gives it a middle block).
const std::vector<FormRef> kChunkForms{
    {"linear", "chunked"}, {"hla2", "chunked"}, {"hla2", "chunked-fused"}, {"ahla", "chunked"}};
const std::vector<int> kWidths{1, 2, 3, 5, 16};

template <class T> void require_same_state(const NamedState<T>& a, const NamedState<T>& b) {
  REQUIRE(a.parts.size() == b.parts.size());
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    INFO("state part " << a.parts[i].first);
    CHECK(a.parts[i].first == b.parts[i].first);
    CHECK(a.parts[i].second == b.parts[i].second);
  }
}

// Every op × option set × width × threads: chunked = serial, outputs and state. n is a multiple of none of the
// widths but 1 (the last chunk is short).
template <class T> void check_chunked_equals_serial(const GatedProblem<T>& g) {
  for (const FormRef& f : kChunkForms)
    for (const Options& base : option_sets(f.op))
      for (int w : kWidths)
        for (int threads : {1, 2, 3}) {
          Options o = base;
          o.chunk = w;
          o.threads = threads;
          INFO(f.name() << " n=" << g.n() << " w=" << w << " threads=" << threads << " normalized=" << o.normalized
                        << " ridge=" << o.ridge);
          const Run<T> chunked = gated::run(f, g, o);
          const Run<T> serial = gated::run(FormRef{f.op, "serial"}, g, o);
          CHECK(chunked.O == serial.O);
          require_same_state(chunked.state, serial.state);
        }
}

}  // namespace

TEST_CASE("gated chunked: equals the gated serial form exactly, outputs and state (rational)", "[gated][chunked]") {
  check_chunked_equals_serial(rational_case({17, 2, 3}, 4));
}

TEST_CASE("gated chunked: equals the gated serial form exactly, outputs and state (F_p, random gates)",
          "[gated][chunked]") {
  std::mt19937_64 rng(12);
  const Shape s{23, 3, 2};
  check_chunked_equals_serial(GatedProblem<fp61>{field_problem(s, rng()), field_gates(s.n, rng)});
}

TEST_CASE("gated chunked: split-and-carry gives the outputs and final state of one call", "[gated][chunked]") {
  const GatedProblem<rational> g = rational_case({13, 2, 2}, 6);
  for (const FormRef& f : kChunkForms)
    for (const Options& base : option_sets(f.op))
      for (int w : {2, 5})
        for (Eigen::Index split : {1, 6, 12}) {
          INFO(f.name() << " w=" << w << " split at " << split << " normalized=" << base.normalized);
          Options o = base;
          o.chunk = w;
          o.threads = 2;
          const std::string& op = f.op;
          const Run<rational> whole = gated::run(f, g, o);
          const Run<rational> first = gated::run(f, slice_gated(g, 0, split), o);
          const Run<rational> second = gated::run(f, slice_gated(g, split, g.n()), o, &first.state);
          CHECK(first.O == whole.O.topRows(split));
          CHECK(second.O == whole.O.bottomRows(g.n() - split));
          require_same_state(second.state, whole.state);
          // The state is the serial form's, so the serial form continues a chunked prefix.
          const Run<rational> serial_rest =
              gated::run(FormRef{op, "serial"}, slice_gated(g, split, g.n()), o, &first.state);
          CHECK(serial_rest.O == whole.O.bottomRows(g.n() - split));
        }
}

TEST_CASE("gated chunked: constant gates give the fixed-gamma chunk forms exactly", "[gated][chunked]") {
  const auto check = [](const auto& p, const auto& gamma, const rational& gamma_rational) {
    using T = typename std::decay_t<decltype(p.Q)>::Scalar;
    const GatedProblem<T> g = with_constant_gates(p, gamma);
    for (const FormRef& f : kChunkForms)
      for (const Options& base : option_sets(f.op))
        for (int w : {1, 3, 16}) {
          INFO(scalar_name<T>() << " " << f.name() << " w=" << w << " normalized=" << base.normalized);
          Options o = base;
          o.chunk = w;
          o.threads = 2;
          Options fixed = o;
          fixed.gamma = gamma_rational;
          const Run<T> gated_run = gated::run(f, g, o);
          const Run<T> fixed_run = registry<T>().find_exact(f.op, f.form)(p, fixed);
          CHECK(gated_run.O == fixed_run.O);
          require_same_state(gated_run.state, fixed_run.state);
        }
  };
  const rational gamma(3, 4);
  check(convert_problem<rational>(integer_problem({11, 2, 3}, 8, 2)), gamma, gamma);
  check(field_problem({11, 3, 2}, 9), from_rational<fp61>(gamma), gamma);
}

// ---- floating point -----------------------------------------------------------------------------------------

namespace {

template <class T> FloatingCheck check_floating(const FormRef& f, const GatedProblem<double>& g, const Options& opt,
                                                const FloatingReference& ref) {
  const GatedProblem<T> gt{convert_problem<T>(g.qkv), g.gamma.cast<T>()};
  const FloatingCheck c = check_within_bound(gated::run(f, gt, opt).O, ref, opt,
                                             gated_form_depth(f.op, f.form, g.gamma, opt.chunk, g.qkv.d()));
  CHECK(c.vacuous_rows == 0);
  return c;
}

}  // namespace

TEST_CASE("gated chunked: float and double within the proven rounding bound of MPFR-256", "[gated][chunked]") {
  for (const FormRef& f : kChunkForms)
    for (double strength : {0.01, 0.5, 3.0})
      for (const Options& base : option_sets(f.op)) {
        GatedProblem<double> g{gaussian_problem({61, 4, 3}, 17), gates_of_strength(61, strength, 3)};
        if (base.normalized) {  // non-negative q·k: no den_t near 0, so no row's bound is vacuous
          g.qkv.Q = g.qkv.Q.cwiseAbs();
          g.qkv.K = g.qkv.K.cwiseAbs();
        }
        const FloatingReference ref = floating_reference(f.op, g, base);
        for (int w : kWidths) {
          Options o = base;
          o.chunk = w;
          o.threads = 2;
          INFO(f.name() << " strength=" << strength << " w=" << w << " normalized=" << o.normalized
                        << " ridge=" << o.ridge);
          const FloatingCheck fl = check_floating<float>(f, g, o, ref);
          const FloatingCheck d = check_floating<double>(f, g, o, ref);
          INFO("float err " << fl.normwise_rel << " (bound " << fl.bound_normwise << "), double err " << d.normwise_rel
                            << " (bound " << d.bound_normwise << ")");
          CHECK(fl.err_over_bound <= 1);
          CHECK(d.err_over_bound <= 1);
        }
      }
}

TEST_CASE("gated chunked: MPFR-256 agrees with the gated serial form to MPFR's own precision", "[gated][chunked]") {
  const GatedProblem<double> g{gaussian_problem({29, 3, 2}, 31), gates_of_strength(29, 1.0, 4)};
  const GatedProblem<mpfr256> gm{convert_problem<mpfr256>(g.qkv), g.gamma.cast<mpfr256>()};
  for (const FormRef& f : kChunkForms)
    for (const Options& base : option_sets(f.op)) {
      Options o = base;
      o.chunk = 5;
      o.threads = 2;
      INFO(f.name() << " normalized=" << o.normalized << " ridge=" << o.ridge);
      // log/exp at 259 bits: the chunked factors differ from the serial products by rounding only.
      CHECK(compare_to(gated::run(f, gm, o).O, gated::run(FormRef{f.op, "serial"}, gm, o).O).normwise_rel < 1e-70);
    }
}

// The measured claim: with γ_t = e^{−1} over n = 512 tokens, P_t = Π_{r≤t} γ_r leaves float's normal range at
// t ≈ 87 and reaches 0 at t ≈ 103, so the naive quotients P_t / P_s become 0/0; the stable form's factors are
// exp of within-chunk differences (≥ e^{−w}) and its error stays within its bound.
TEST_CASE(
    "gated chunked: the naive cumulative-product form fails at a long span of strong gates, the stable one "
    "does not",
    "[gated][chunked]") {
  const Eigen::Index n = 512;
  const GatedProblem<double> g{gaussian_problem({n, 8, 4}, 23),
                               ColVec<double>::Constant(n, static_cast<double>(static_cast<float>(std::exp(-1.0))))};
  const GatedProblem<float> gf{convert_problem<float>(g.qkv), g.gamma.cast<float>()};
  for (const FormRef& f : kChunkForms) {
    INFO(f.name());
    Options o;
    o.chunk = 16;
    o.threads = 2;  // chunked-fused: two blocks, the second's carry weighted by running products that underflow
    const FloatingReference ref = floating_reference(f.op, g, o);
    const FloatingCheck stable = check_floating<float>(f, g, o, ref);
    CHECK(stable.err_over_bound <= 1);
    CHECK(stable.normwise_rel < 1e-6);  // measured ~1-2e-7 (2-3 u): the bound above is loose, not the error
  }
  for (const std::string& op : kGatedOps) {
    INFO(op);
    Options o;
    o.chunk = 16;
    // The registry-style refusal: a non-finite output is a NumericalError, never returned.
    CHECK_THROWS_AS(gated::run(FormRef{op, "chunked-naive-cumprod"}, gf, o), NumericalError);
  }
  // Where the naive outputs turn non-finite: the first token whose chunk divides by an underflowed P.
  namespace c = fast::chunked;
  Options o;
  o.chunk = 16;
  const Run<float> naive =
      c::gated_linear_chunked(gf, o, static_cast<const NamedState<float>*>(nullptr), c::GateFactors::naive_cumprod);
  Eigen::Index first_bad = -1;
  for (Eigen::Index t = 0; t < n && first_bad < 0; ++t)
    if (!naive.O.row(t).array().isFinite().all()) first_bad = t;
  CHECK(first_bad >= 80);
  CHECK(first_bad <= 112);
  // Before that the naive form is finite; within the first chunks (P still normal) it is as accurate as the
  // stable one, so the failure is the span, not the algebra.
  const FloatingReference ref = floating_reference("linear", g, o);
  const ErrorStats early = compare_to(Mat<float>(naive.O.topRows(64)), Mat<mpfr256>(ref.O.topRows(64)));
  CHECK(early.normwise_rel < 1e-6);
}

// Before any output turns non-finite, the naive form fails silently: with −log γ_t ≈ 0.1 (uniform in
// [0.05, 0.15]) over n = 1024 tokens P_t reaches float's subnormal range (e^{−102} ≈ 5e−45), its quotients keep a
// few bits, and the outputs are finite and wrong (measured normwise 3e−2, ~5e5 u), while the stable form is ~2 u.
TEST_CASE("gated chunked: the naive form loses accuracy silently in float's subnormal range, the stable one does not",
          "[gated][chunked]") {
  const Eigen::Index n = 1024;
  const GatedProblem<double> g{gaussian_problem({n, 8, 8}, 5), gates_of_strength(n, 0.1, 9)};
  const GatedProblem<float> gf{convert_problem<float>(g.qkv), g.gamma.cast<float>()};
  Options o;
  o.chunk = 16;
  const FloatingReference ref = floating_reference("linear", g, o);
  const FloatingCheck stable = check_floating<float>(FormRef{"linear", "chunked"}, g, o, ref);
  CHECK(stable.err_over_bound <= 1);
  CHECK(stable.normwise_rel < 1e-6);
  const Run<float> naive = gated::run(FormRef{"linear", "chunked-naive-cumprod"}, gf, o);  // finite: not refused
  CHECK(compare_to(naive.O, ref.O).normwise_rel > 1e-3);
}

TEST_CASE("gated chunked: the forms refuse what they do not define", "[gated][chunked]") {
  const GatedProblem<rational> g = rational_case({6, 2, 2}, 1);
  Options scalar_decay;
  scalar_decay.gamma = rational(1, 2);
  CHECK_THROWS_AS(gated::run(FormRef{"linear", "chunked"}, g, scalar_decay), InputError);
  Options ridge;
  ridge.ridge = rational(1);
  CHECK_THROWS_AS(gated::run(FormRef{"ahla", "chunked"}, g, ridge), InputError);
  Options zero_width;
  zero_width.chunk = 0;
  CHECK_THROWS_AS(gated::run(FormRef{"hla2", "chunked"}, g, zero_width), InputError);
  const Run<rational> lin = gated::run(FormRef{"linear", "chunked"}, g, Options{});
  CHECK_THROWS_AS(gated::run(FormRef{"hla2", "chunked"}, g, Options{}, &lin.state), InputError);
}

// The mask's factors (fast/chunked/gated.hpp, ChunkGates::decay_mask): in float and double each entry F(a, b) is within
// numerics/bounds.hpp's per-factor count, (2w + 5) Λ_k + 5 roundings, of the exact gate product Γ(c+a, c+b) — in
// chunks whose mass lets the mask be the product exp(L_a) · exp(−L_b) and in chunks of stronger gates, where it is
// the exp of each difference (both kinds are asserted to occur). An entry below the smallest normal number has no
// relative accuracy (that slack is added). The factors computed over threads are those of one thread, to the bit.
TEMPLATE_TEST_CASE("gated chunked: every mask entry within its per-factor rounding count, factorized or not",
                   "[gated][chunked]", float, double) {
  using T = TestType;
  const Eigen::Index w = 48;
  // Chunk strengths (mean −log γ): weak, medium (factorized in both scalars), strong (float's differences), very
  // strong (double's differences too).
  const std::vector<double> strengths{0.02, 1.5, 3.0, 20.0};
  const Eigen::Index n = w * static_cast<Eigen::Index>(strengths.size()) - 7;  // a short last chunk
  ColVec<double> gd(n);
  for (std::size_t k = 0; k < strengths.size(); ++k) {
    const Eigen::Index c = w * static_cast<Eigen::Index>(k), len = std::min(w, n - c);
    gd.segment(c, len) = gates_of_strength(len, strengths[k], 40 + k);
  }
  const ColVec<T> gates = gd.cast<T>();
  const fast::chunked::ChunkPlan plan(n, w);
  namespace c = fast::chunked;
  const c::ChunkGates<T> one(gates, plan, c::GateFactors::log_stable, 1);
  const c::ChunkGates<T> three(gates, plan, c::GateFactors::log_stable, 3);
  CHECK(one.st == three.st);
  CHECK(one.en == three.en);
  CHECK(one.g == three.g);
  const double u = unit_roundoff<T>(), tiny = static_cast<double>(std::numeric_limits<T>::min());
  int factorized = 0, differences = 0;
  for (Eigen::Index k = 0; k < plan.count; ++k) {
    const Eigen::Index c0 = plan.begin(k), len = plan.len(k);
    (one.factorized(k) ? factorized : differences) += 1;
    Mat<T> F(len, len), F3(len, len);
    one.decay_mask(k, F);
    three.decay_mask(k, F3);
    CHECK(F == F3);
    double mass = 0;
    for (Eigen::Index t = c0; t < c0 + len; ++t) mass += -std::log(static_cast<double>(gates(t)));
    const double bound = bounds::gamma_h(static_cast<long>(std::ceil(1.01 * (2 * w + 5) * mass)) + 5, u);
    double worst = 0;
    for (Eigen::Index b = 0; b < len; ++b)
      for (Eigen::Index a = 0; a < len; ++a) {
        if (a <= b) {  // the diagonal is 1 and the upper triangle 0, exactly
          CHECK(F(a, b) == T(a == b ? 1 : 0));
          continue;
        }
        mpfr256 exact(1);
        for (Eigen::Index r = b + 1; r <= a; ++r) exact *= mpfr256(static_cast<double>(gates(c0 + r)));
        const double err = abs(mpfr256(static_cast<double>(F(a, b))) - exact).template convert_to<double>();
        worst = std::max(worst, err / (bound * exact.template convert_to<double>() + tiny));
      }
    INFO("chunk " << k << " mass " << mass << " factorized " << one.factorized(k) << " worst err/allowed " << worst);
    CHECK(worst <= 1);
  }
  CHECK(factorized >= 2);
  CHECK(differences >= 1);
}
