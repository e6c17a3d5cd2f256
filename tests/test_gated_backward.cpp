// The gated serial backward (fast/backward/gated.hpp), in exact rationals: ∂L/∂(Q, K, V, γ) = the forward-mode
// dual-number derivatives of the gated literal-sum references (reference/gated.hpp), and ∂L/∂X_0 those of the gated
// serial form from a state.
#include "numerics/gradient_checks.hpp"  // first: brings fast/backward/dual.hpp before the forms
// clang-format off
#include "fast/backward/gated.hpp"
#include "fast/gated_forms.hpp"
#include "fast/serial/gated.hpp"
#include "reference/gated.hpp"
// clang-format on

#include <catch2/catch.hpp>

#include "core/inputs.hpp"

using namespace hla;

namespace {

using D = Dual<rational>;

// Dyadic gates that vary per token (3/4, 1/2, 7/8, 1, ...; with_one false: 15/16 in place of 1). The serial forms skip
// the decay at a gate of exactly 1 (a `γ != 1` guard, which Dual numbers compare by value), so forward mode through
// them loses ∂/∂γ_t there: a gate 1 only where the dual derivatives come from the literal sums.
ColVec<rational> some_gates(Eigen::Index n, bool with_one = true) {
  static const rational g[] = {rational(3, 4), rational(1, 2), rational(7, 8), rational(1), rational(5, 8)};
  ColVec<rational> out(n);
  for (Eigen::Index t = 0; t < n; ++t)
    out(t) = g[(3 * t + 1) % 5] == 1 && !with_one ? rational(15, 16) : g[(3 * t + 1) % 5];
  return out;
}

// The gated reference (or, with an initial state, the gated serial form) of op in Dual numbers.
Mat<D> gated_dual(const std::string& op, const Problem<D>& p, const ColVec<D>& gates, const Options& opt,
                  const NamedState<D>* init) {
  const GatedProblem<D> g{p, gates};
  if (init) {
    if (op == "hla2") return fast::gated_hla2_serial(g, opt, init, fast::DecayRule::corrected).O;
    if (op == "ahla") return fast::gated_ahla_serial(g, opt, init).O;
    return fast::gated_linear_serial(g, opt, init).O;
  }
  if (op == "hla2") return reference::gated_hla2(g, opt).O;
  if (op == "ahla") return reference::gated_ahla(g, opt).O;
  return reference::gated_linear(g, opt).O;
}

// ∂L/∂γ by forward mode: one tangent per gate.
ColVec<rational> dual_dgamma(const std::string& op, const Problem<rational>& p, const ColVec<rational>& gates,
                             const Options& opt, const NamedState<rational>* init, const Mat<rational>& dO) {
  const Problem<D> dp{lift(p.Q), lift(p.K), lift(p.V)};
  std::optional<NamedState<D>> di;
  if (init) {
    di.emplace();
    for (const auto& [name, m] : init->parts) di->parts.emplace_back(name, lift(m));
  }
  ColVec<rational> out(p.n());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<D> g = gates.unaryExpr([](const rational& x) { return D(x); });
    g(t).d = rational(1);
    const Mat<D> O = gated_dual(op, dp, g, opt, di ? &*di : nullptr);
    rational s(0);
    for (Eigen::Index i = 0; i < O.size(); ++i) s += dO(i) * O(i).d;
    out(t) = s;
  }
  return out;
}

}  // namespace

TEST_CASE("gated backward: dq, dk, dv, dgamma equal the gated reference's forward-mode derivatives (rational)",
          "[gradients][gated]") {
  for (const std::string op : {"hla2", "ahla", "linear"})
    for (int variant = 0; variant < 3; ++variant) {
      Options opt;
      if (variant >= 1) {
        opt.normalized = true;
        opt.eps = rational(1, 2);
      }
      if (variant == 2 && op == "hla2") opt.ridge = rational(1, 3);
      const Shape s{6, 2, 2};
      const Problem<rational> p = convert_problem<rational>(integer_problem(s, 11 + variant, 2));
      const Mat<rational> dO = convert_matrix<rational>(integer_problem(s, 91 + variant, 2).V);
      // normalized: keys and queries non-negative with a first coordinate 1, so every den_t + ε > 0
      Problem<rational> q = p;
      if (opt.normalized) {
        q.Q = p.Q.cwiseAbs();
        q.K = p.K.cwiseAbs();
        q.Q.col(0).setOnes();
        q.K.col(0).setOnes();
      }
      const ColVec<rational> gates = some_gates(s.n);
      INFO(op << " variant " << variant);
      const backward::GatedGradients<rational> g = backward::gated_backward<rational>(op, {q, gates}, opt, nullptr, dO);
      const Gradients<rational> want =
          forward_mode_gradients<rational>(q, nullptr, dO, [&](const Problem<D>& dp, const NamedState<D>*) {
            return gated_dual(op, dp, gates.unaryExpr([](const rational& x) { return D(x); }), opt, nullptr);
          });
      CHECK(g.dQ == want.dQ);
      CHECK(g.dK == want.dK);
      CHECK(g.dV == want.dV);
      CHECK(g.dgamma == dual_dgamma(op, q, gates, opt, nullptr, dO));
      CHECK(g.dgamma != ColVec<rational>::Zero(s.n));
    }
}

TEST_CASE("gated backward: from an initial state, dstate_in and dgamma equal the serial form's derivatives (rational)",
          "[gradients][gated]") {
  for (const std::string op : {"hla2", "ahla", "linear"}) {
    const Shape s{5, 2, 3};
    const Problem<rational> p = convert_problem<rational>(integer_problem(s, 5, 2));
    const Mat<rational> dO = convert_matrix<rational>(integer_problem(s, 6, 2).V);
    const ColVec<rational> gates = some_gates(s.n, false);
    // a state: the gated serial form's after a prefix of three other tokens
    const Problem<rational> pre = convert_problem<rational>(integer_problem({3, 2, 3}, 7, 2));
    const NamedState<rational> init = gated::run<rational>({op, "serial"}, {pre, some_gates(3)}, Options{}).state;
    INFO(op);
    const backward::GatedGradients<rational> g =
        backward::gated_backward<rational>(op, {p, gates}, Options{}, &init, dO);
    const Gradients<rational> want =
        forward_mode_gradients<rational>(p, &init, dO, [&](const Problem<D>& dp, const NamedState<D>* di) {
          return gated_dual(op, dp, gates.unaryExpr([](const rational& x) { return D(x); }), Options{}, di);
        });
    CHECK(g.dQ == want.dQ);
    CHECK(g.dK == want.dK);
    CHECK(g.dV == want.dV);
    for (const auto& [name, m] : want.dstate.parts) CHECK(g.dstate.at(name) == m);
    CHECK(g.dgamma == dual_dgamma(op, p, gates, Options{}, &init, dO));
  }
}

TEST_CASE("gated backward: checkpointed every w tokens equals the all-states sweep exactly (rational)",
          "[gradients][gated]") {
  for (const std::string op : {"hla2", "ahla", "linear"}) {
    const Shape s{7, 2, 3};
    const Problem<rational> p = convert_problem<rational>(integer_problem(s, 15, 2));
    const Mat<rational> dO = convert_matrix<rational>(integer_problem(s, 16, 2).V);
    const ColVec<rational> gates = some_gates(s.n, false);
    const Problem<rational> pre = convert_problem<rational>(integer_problem({3, 2, 3}, 17, 2));
    const NamedState<rational> init = gated::run<rational>({op, "serial"}, {pre, some_gates(3)}, Options{}).state;
    const backward::GatedGradients<rational> all =
        backward::gated_backward<rational>(op, {p, gates}, Options{}, &init, dO);
    REQUIRE(all.dgamma != ColVec<rational>::Zero(s.n));
    for (Eigen::Index w : {1, 2, 3, 4, 7, 9}) {  // chunks of one token, uneven last chunks, one chunk, w > n
      INFO(op << " w=" << w);
      const backward::GatedGradients<rational> g =
          backward::gated_backward<rational>(op, {p, gates}, Options{}, &init, dO, w);
      CHECK(g.dQ == all.dQ);
      CHECK(g.dK == all.dK);
      CHECK(g.dV == all.dV);
      CHECK(g.dgamma == all.dgamma);
      for (const auto& [name, m] : all.dstate.parts) CHECK(g.dstate.at(name) == m);
    }
  }
  CHECK_THROWS_AS(backward::gated_backward<rational>(
                      "linear", {convert_problem<rational>(integer_problem({3, 2, 2}, 1, 2)), some_gates(3)}, Options{},
                      nullptr, Mat<rational>::Zero(3, 2), -1),
                  InputError);
}
