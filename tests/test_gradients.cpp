// Gradient verification (claim hla2.backward, §4.2 "Backward for gradients"), in exact rationals:
// hand-written reverse mode through the serial recurrences = forward-mode dual-number derivatives of the
// references; checkpointed (chunked) backward and the ⊕* reverse scan = serial backward, for several
// chunk widths including ones that do not divide n; and a wrong adjoint is caught.
#include <catch2/catch.hpp>
#include <random>

#include "core/inputs.hpp"
#include "numerics/gradient_checks.hpp"

using namespace hla;
using fast::DecayRule;

namespace {

struct GradientCase {
  Problem<rational> p;
  Mat<rational> dO;
};

GradientCase integer_case(Eigen::Index n, Eigen::Index d, Eigen::Index dv, std::uint64_t seed) {
  const Shape s{n, d, dv};
  GradientCase c{convert_problem<rational>(integer_problem(s, seed, 3)), {}};
  c.dO = convert_matrix<rational>(integer_problem(s, seed + 1000, 3).V);
  return c;
}

// A random initial state with the serial form's part names and shapes (S not symmetric on purpose).
template <class State> NamedState<rational> random_state(Eigen::Index d, Eigen::Index dv, std::uint64_t seed) {
  NamedState<rational> s = export_state<State, rational>(State::zero(d, dv));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-2, 2);
  for (auto& [name, m] : s.parts)
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = rational(u(rng), 2);
  return s;
}

Options options(rational gamma, bool normalized) {
  Options o;
  o.gamma = gamma;
  o.normalized = normalized;
  o.eps = rational(1, 3);  // den has a power-of-two denominator here, so den + 1/3 never vanishes
  return o;
}

std::string describe(const std::string& op, Eigen::Index n, Eigen::Index d, Eigen::Index dv, const Options& o, int w) {
  return op + " n=" + std::to_string(n) + " d=" + std::to_string(d) + " dv=" + std::to_string(dv) +
         " gamma=" + o.gamma.str() + (o.normalized ? " normalized" : "") + " w=" + std::to_string(w);
}

}  // namespace

TEST_CASE("from_rational for dual numbers is exact (dual.hpp in any include order)", "[gradients]") {
  const Dual<rational> x = from_rational<Dual<rational>>(rational(1, 3));
  CHECK(x.v == rational(1, 3));
  CHECK(x.d == 0);
}

TEST_CASE("hla2 masked: serial backward = reference gradients; chunked and reverse scan = serial", "[gradients]") {
  for (const rational& gamma : {rational(1), rational(3, 4)})
    for (const bool normalized : {false, true})
      for (const auto& [n, d, dv] : {std::tuple{5, 2, 1}, std::tuple{6, 3, 2}, std::tuple{4, 1, 3}}) {
        const GradientCase c = integer_case(n, d, dv, 11 + n * 7 + d);
        const Options o = options(gamma, normalized);
        for (const int w : {1, 2, 4, n}) {
          INFO(describe("hla2", n, d, dv, o, w));
          const auto g = check_gradients("hla2", c.p, o, c.dO, w, DecayRule::corrected);
          REQUIRE(g.has_reference);
          REQUIRE(g.has_scan);
          CHECK(g.serial_vs_reference.exact_equal);
          CHECK(g.serial_vs_forward_mode.exact_equal);
          CHECK(g.chunked_vs_serial.exact_equal);
          CHECK(g.scan_vs_serial.exact_equal);
          CHECK(g.all_equal());
          // The gradients are not trivially zero.
          CHECK(flatten(g.serial, false).cwiseAbs().maxCoeff() > 0);
        }
      }
}

TEST_CASE("hla2 masked with ridge: serial backward = reference gradients", "[gradients]") {
  const GradientCase c = integer_case(5, 2, 2, 5);
  Options o = options(rational(3, 4), true);
  o.ridge = rational(1, 2);
  const auto g = check_gradients("hla2", c.p, o, c.dO, 2, DecayRule::corrected);
  CHECK(g.serial_vs_reference.exact_equal);
  CHECK(g.chunked_vs_serial.exact_equal);
  CHECK(g.scan_vs_serial.exact_equal);
}

TEST_CASE("hla2 paper decay rule: the backward differentiates the paper's forward, which is not the reference",
          "[gradients]") {
  const GradientCase c = integer_case(5, 2, 2, 21);
  const Options o = options(rational(3, 4), false);
  const auto g = check_gradients("hla2", c.p, o, c.dO, 3, DecayRule::paper);
  CHECK(g.serial_vs_forward_mode.exact_equal);  // the adjoint is right for the paper's own recurrence
  CHECK(g.chunked_vs_serial.exact_equal);
  CHECK_FALSE(g.has_scan);                         // the paper rule is not a fold of the (S,C,m,G,h) concatenation
  CHECK_FALSE(g.serial_vs_reference.exact_equal);  // finding: its forward differs from SPEC's hla2 at γ < 1
  CHECK_THROWS_AS(backward::hla2_scan_backward(c.p, o, nullptr, c.dO, DecayRule::paper, 2), InputError);
  // At γ = 1 the rules coincide.
  const auto g1 = check_gradients("hla2", c.p, options(rational(1), false), c.dO, 3, DecayRule::paper);
  CHECK(g1.serial_vs_reference.exact_equal);
  CHECK(g1.scan_vs_serial.exact_equal);
}

TEST_CASE("ahla and linear: serial backward = reference gradients; chunked = serial", "[gradients]") {
  for (const std::string op : {"ahla", "linear"})
    for (const rational& gamma : {rational(1), rational(3, 4)})
      for (const bool normalized : {false, true})
        for (const auto& [n, d, dv] : {std::tuple{6, 2, 2}, std::tuple{5, 3, 1}, std::tuple{4, 1, 3}}) {
          const GradientCase c = integer_case(n, d, dv, 31 + n + 3 * d);
          const Options o = options(gamma, normalized);
          for (const int w : {1, 3, n}) {
            INFO(describe(op, n, d, dv, o, w));
            const auto g = check_gradients(op, c.p, o, c.dO, w);
            CHECK_FALSE(g.has_scan);
            CHECK(g.serial_vs_reference.exact_equal);
            CHECK(g.serial_vs_forward_mode.exact_equal);
            CHECK(g.chunked_vs_serial.exact_equal);
            CHECK(g.all_equal());
          }
        }
}

TEST_CASE("gradient of the initial state: reverse mode = forward mode through the serial form", "[gradients]") {
  const Eigen::Index n = 5, d = 2, dv = 2;
  const GradientCase c = integer_case(n, d, dv, 41);
  for (const bool normalized : {false, true}) {
    const Options o = options(rational(3, 4), normalized);
    SECTION(std::string("hla2") + (normalized ? " normalized" : "")) {
      const auto init = random_state<fast::Hla2State<rational, true>>(d, dv, 1);
      const auto g = check_gradients("hla2", c.p, o, c.dO, 2, DecayRule::corrected, &init);
      CHECK_FALSE(g.has_reference);
      REQUIRE(g.serial.dstate.parts.size() == 5);
      CHECK(g.serial_vs_forward_mode.exact_equal);
      CHECK(g.chunked_vs_serial.exact_equal);
      CHECK(g.scan_vs_serial.exact_equal);
      const auto gp = check_gradients("hla2", c.p, o, c.dO, 3, DecayRule::paper, &init);
      CHECK(gp.serial_vs_forward_mode.exact_equal);
      CHECK(gp.chunked_vs_serial.exact_equal);
    }
    SECTION(std::string("ahla") + (normalized ? " normalized" : "")) {
      const auto init = random_state<fast::AhlaState<rational>>(d, dv, 2);
      const auto g = check_gradients("ahla", c.p, o, c.dO, 2, DecayRule::corrected, &init);
      CHECK(g.serial_vs_forward_mode.exact_equal);
      CHECK(g.chunked_vs_serial.exact_equal);
    }
    SECTION(std::string("linear") + (normalized ? " normalized" : "")) {
      const auto init = random_state<fast::LinearState<rational>>(d, dv, 3);
      const auto g = check_gradients("linear", c.p, o, c.dO, 4, DecayRule::corrected, &init);
      CHECK(g.serial_vs_forward_mode.exact_equal);
      CHECK(g.chunked_vs_serial.exact_equal);
    }
  }
}

TEST_CASE("exact in the prime field at larger n: serial = reference, chunked and scan = serial", "[gradients]") {
  // Uniform elements of Z/(2^61−1): each gradient entry is a rational function of degree ≤ ~8 in the inputs,
  // so one point wrongly passing an identity that is false has probability ≤ ~8/2^61 (Schwartz–Zippel).
  const Eigen::Index n = 23, d = 3, dv = 2;
  const Problem<fp61> p = field_problem({n, d, dv}, 71);
  const Mat<fp61> dO = field_problem({n, d, dv}, 72).V;
  for (const std::string op : {"hla2", "ahla", "linear"})
    for (const int w : {5, 8}) {
      const Options o = options(rational(3, 4), true);
      INFO(op << " w=" << w);
      const auto g = check_gradients(op, p, o, dO, w);
      CHECK(g.serial_vs_reference.exact_equal);
      CHECK(g.serial_vs_forward_mode.exact_equal);
      CHECK(g.chunked_vs_serial.exact_equal);
      if (op == "hla2") CHECK(g.scan_vs_serial.exact_equal);
    }
}

TEST_CASE("floating backward within its rounding-error bound against MPFR", "[gradients]") {
  // Per entry |got − exact| ≤ γ_K · M, M and K from the same backward run on magnitudes
  // (fast/backward/magnitude.hpp); the exact gradients are forward-mode duals in MPFR-256.
  const Shape s{12, 3, 2};
  const Problem<double> pd = gaussian_problem(s, 81);
  const Mat<double> dOd = gaussian_problem(s, 82).V;
  Options o;
  o.gamma = rational(15, 16);  // exact in float and double
  for (const std::string op : {"hla2", "ahla", "linear"}) {
    INFO(op);
    const auto gd = check_gradients(op, pd, o, dOd, 5);
    for (const BoundCheck* b : {&gd.serial_bound, &gd.chunked_bound}) {
      CHECK(b->checked);
      CHECK(b->violations == 0);
    }
    if (op == "hla2") CHECK(gd.scan_bound.violations == 0);
    CHECK(gd.serial_vs_forward_mode.in_units_of_u > 0);  // rounding happened: the check is not vacuous
  }
  const Problem<float> pf = convert_problem<float>(pd);
  const Mat<float> dOf = dOd.cast<float>();
  const auto gf = check_gradients("hla2", pf, o, dOf, 4);
  CHECK(gf.serial_bound.violations == 0);
  CHECK(gf.chunked_bound.violations == 0);
  CHECK(gf.scan_bound.violations == 0);
  // A gradient entry moved by twice its bound is caught.
  const Problem<Magnitude> pm{magnitudes(pf.Q), magnitudes(pf.K), magnitudes(pf.V)};
  const auto mag = backward_gradients("hla2", pm, o, nullptr, magnitudes(dOf), DecayRule::corrected, 0);
  backward::Gradients<float> off = gf.serial;
  off.dK(2, 1) += static_cast<float>(2 * mag.dK(2, 1).bound(unit_roundoff<float>()) + 1e-30);
  CHECK(check_bounds(off, gf.forward_mode, mag).violations >= 1);
}

namespace {
// Deliberately wrong adjoints, to show that the checker fails when it should.
// (a) treats S̄ as symmetric (dk += 2 S̄ k instead of (S̄ + S̄ᵀ) k);
struct SymmetricSbarOps : backward::Hla2Ops<rational> {
  using Hla2Ops::Hla2Ops;
  void step_vjp(const State& prev, const State& cur, const backward::Token<rational>& tok, State& bar,
                backward::TokenGrad<rational>& g) const {
    const Mat<rational> sbar = bar.S;
    Hla2Ops::step_vjp(prev, cur, tok, bar, g);
    g.dk += (sbar - sbar.transpose()) * tok.k;  // (S̄ + S̄ᵀ)k + (S̄ − S̄ᵀ)k = 2 S̄ k
  }
};
// (b) differentiates the corrected forward with the paper rule's adjoint (Ḡ decays by γ, not γ²).
struct MixedRuleOps : backward::Hla2Ops<rational> {
  backward::Hla2Ops<rational> paper;
  MixedRuleOps(const Options& o) : Hla2Ops(o, DecayRule::corrected), paper(o, DecayRule::paper) {}
  void step_vjp(const State& prev, const State& cur, const backward::Token<rational>& tok, State& bar,
                backward::TokenGrad<rational>& g) const {
    paper.step_vjp(prev, cur, tok, bar, g);
  }
};
}  // namespace

TEST_CASE("a wrong adjoint is detected", "[gradients]") {
  const GradientCase c = integer_case(5, 2, 2, 51);
  const Options o = options(rational(3, 4), true);
  const auto ref = reference_gradients("hla2", c.p, o, c.dO);
  const auto right =
      backward::recurrence_backward(backward::Hla2Ops<rational>(o, DecayRule::corrected), c.p, nullptr, c.dO, 0);
  CHECK(compare_gradients(right, ref, false).exact_equal);
  const auto wrong_a = backward::recurrence_backward(SymmetricSbarOps(o, DecayRule::corrected), c.p, nullptr, c.dO, 0);
  const ErrorStats ea = compare_gradients(wrong_a, ref, false);
  CHECK_FALSE(ea.exact_equal);
  CHECK(ea.mismatches > 0);
  const auto wrong_b = backward::recurrence_backward(MixedRuleOps(o), c.p, nullptr, c.dO, 2);
  CHECK_FALSE(compare_gradients(wrong_b, ref, false).exact_equal);
  // A perturbed upstream gradient changes the result (the comparison is not vacuous).
  Mat<rational> dO2 = c.dO;
  dO2(0, 0) += 1;
  CHECK_FALSE(
      compare_gradients(backward::hla2_backward(c.p, o, nullptr, dO2, DecayRule::corrected), ref, false).exact_equal);
}

TEST_CASE("gradient checker rejects bad input", "[gradients]") {
  const GradientCase c = integer_case(4, 2, 2, 61);
  const Options o = options(rational(1), false);
  CHECK_THROWS_AS(check_gradients("hla3", c.p, o, c.dO, 2), InputError);
  CHECK_THROWS_AS(check_gradients("hla2", c.p, o, c.dO, 0), InputError);
  CHECK_THROWS_AS(check_gradients("hla2", c.p, o, Mat<rational>(c.dO.leftCols(1)), 2), InputError);
}
