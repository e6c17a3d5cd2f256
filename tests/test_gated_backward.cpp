// The gated serial backward (fast/backward/gated.hpp), in exact rationals: ∂L/∂(Q, K, V, γ) = the forward-mode
// dual-number derivatives of the gated literal-sum references (reference/gated.hpp), and ∂L/∂X_0 those of the gated
// serial form from a state.
#include <catch2/catch.hpp>

#include "core/inputs.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/gated_gradient_checks.hpp"

using namespace hla;

namespace {

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
      const backward::GatedGradients<rational> want =
          gated_forward_mode_gradients<rational>(op, {q, gates}, opt, nullptr, dO);
      CHECK(g.dQ == want.dQ);
      CHECK(g.dK == want.dK);
      CHECK(g.dV == want.dV);
      CHECK(g.dgamma == want.dgamma);
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
    const backward::GatedGradients<rational> want =
        gated_forward_mode_gradients<rational>(op, {p, gates}, Options{}, &init, dO);
    CHECK(g.dQ == want.dQ);
    CHECK(g.dK == want.dK);
    CHECK(g.dV == want.dV);
    for (const auto& [name, m] : want.dstate.parts) CHECK(g.dstate.at(name) == m);
    CHECK(g.dgamma == want.dgamma);
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

TEST_CASE("gated reverse scan (hla2): every carry width gives the serial backward's gradients exactly (rational)",
          "[gradients][gated]") {
  const Shape s{7, 2, 3};
  const Problem<rational> p = convert_problem<rational>(integer_problem(s, 25, 2));
  const Mat<rational> dO = convert_matrix<rational>(integer_problem(s, 26, 2).V);
  const ColVec<rational> gates = some_gates(s.n);
  const Problem<rational> pre = convert_problem<rational>(integer_problem({3, 2, 3}, 27, 2));
  const NamedState<rational> init = gated::run<rational>({"hla2", "serial"}, {pre, some_gates(3)}, Options{}).state;
  for (int variant = 0; variant < 3; ++variant) {
    Options opt;
    Problem<rational> q = p;
    if (variant >= 1) {  // normalized: non-negative keys and queries with a first coordinate 1, so den_t + ε > 0
      opt.normalized = true;
      opt.eps = rational(1, 2);
      q.Q = p.Q.cwiseAbs();
      q.K = p.K.cwiseAbs();
      q.Q.col(0).setOnes();
      q.K.col(0).setOnes();
    }
    if (variant == 2) opt.ridge = rational(1, 3);
    for (const NamedState<rational>* start : {static_cast<const NamedState<rational>*>(nullptr), &init}) {
      const backward::GatedGradients<rational> want =
          backward::gated_backward<rational>("hla2", {q, gates}, opt, start, dO);
      REQUIRE(want.dgamma != ColVec<rational>::Zero(s.n));
      for (Eigen::Index w : {1, 2, 3, 7, 9}) {  // one token per chunk, uneven last chunks, one chunk, w > n
        INFO("variant " << variant << (start ? " from a state" : "") << " w=" << w);
        const backward::GatedGradients<rational> g =
            backward::gated_scan_backward<rational>("hla2", {q, gates}, opt, start, dO, w);
        CHECK(g.dQ == want.dQ);
        CHECK(g.dK == want.dK);
        CHECK(g.dV == want.dV);
        CHECK(g.dgamma == want.dgamma);
        if (start)
          for (const auto& [name, m] : want.dstate.parts) CHECK(g.dstate.at(name) == m);
      }
    }
  }
}

TEST_CASE("gated reverse scan (hla2): constant gates give the fixed-γ reverse scan's dQ, dK, dV, dX_0 exactly",
          "[gradients][gated]") {
  const Shape s{6, 2, 2};
  const Problem<rational> p = convert_problem<rational>(integer_problem(s, 35, 2));
  const Mat<rational> dO = convert_matrix<rational>(integer_problem(s, 36, 2).V);
  const NamedState<rational> init =
      gated::run<rational>({"hla2", "serial"},
                           {convert_problem<rational>(integer_problem({2, 2, 2}, 37, 2)), some_gates(2)}, Options{})
          .state;
  Options fixed;
  fixed.gamma = rational(3, 4);
  for (Eigen::Index w : {1, 4, 6}) {
    INFO("w=" << w);
    const Gradients<rational> want =
        backward::hla2_scan_backward<rational>(p, fixed, &init, dO, fast::DecayRule::corrected, w);
    const backward::GatedGradients<rational> g = backward::gated_scan_backward<rational>(
        "hla2", {p, ColVec<rational>::Constant(s.n, rational(3, 4))}, Options{}, &init, dO, w);
    CHECK(g.dQ == want.dQ);
    CHECK(g.dK == want.dK);
    CHECK(g.dV == want.dV);
    for (const auto& [name, m] : want.dstate.parts) CHECK(g.dstate.at(name) == m);
  }
}

TEST_CASE("gated reverse scan: refuses what it does not differentiate", "[gradients][gated]") {
  const Problem<rational> p = convert_problem<rational>(integer_problem({3, 2, 2}, 1, 2));
  const Mat<rational> dO = Mat<rational>::Zero(3, 2);
  CHECK_THROWS_AS(backward::gated_scan_backward<rational>("ahla", {p, some_gates(3)}, Options{}, nullptr, dO, 2),
                  InputError);  // no reverse scan for ahla (the table's scan_backward)
  CHECK_THROWS_AS(backward::gated_scan_backward<rational>("hla2", {p, some_gates(2)}, Options{}, nullptr, dO, 2),
                  InputError);  // two gates for three tokens
  CHECK_THROWS_AS(backward::gated_scan_backward<rational>("hla2", {p, some_gates(3)}, Options{}, nullptr, dO, 0),
                  InputError);  // no chunk width
  Options decayed;
  decayed.gamma = rational(1, 2);
  CHECK_THROWS_AS(backward::gated_scan_backward<rational>("hla2", {p, some_gates(3)}, decayed, nullptr, dO, 2),
                  InputError);  // the decay is the gates'
}
