// The decoding kernels with per-token gates (fast/serial/decode.hpp; docs/operators.md "Gated (data-dependent)
// decay"): exactly the gated serial forms in rationals and F_p, outputs and every state part, from a non-zero
// initial state, for token blocks of 1, 3 and the registered 64 and sequences that end inside a block; constant
// gates are the fixed-γ kernel bit for bit in float and double; float and double within a proven rounding bound of
// MPFR-256; the refusals; and multi-head (fast/heads.hpp) over gated forms, each head with its own gates.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/gates.hpp"
#include "core/registry.hpp"
#include "fast/heads.hpp"
#include "numerics/bounds.hpp"
#include "tests/decode_cases.hpp"
#include "tests/gated_cases.hpp"

using namespace hla;
using namespace hla::decode_tests;
using namespace hla::gated_tests;

namespace {

bool is_decode(const std::string& form) { return form.rfind("decode", 0) == 0; }

// The gated serial form a decode form re-lays out: op/serial/variant. For decode-packed that is hla2/serial/corrected
// (serial-packed takes no gates); the packed S is the full S when S is symmetric, which its initial state must be.
template <class T> const Entry<T>& gated_serial_of(const Entry<T>& e) {
  return registry<T>().find(e.op, "serial", e.variant);
}

// An exact problem with gates that vary per token: rational square gates (1/4, 9/16, 1/16, 1, …: the gate at
// token 64, the first of the second block, is 1/4) or uniform field gates.
template <class T> Problem<T> exact_gated_problem(const Shape& s, std::uint64_t seed) {
  if constexpr (std::is_same_v<T, fp61>)
    return join_gates(field_case(s, seed));
  else
    return join_gates(rational_case(s, seed));
}

template <class T> void symmetrize_s(NamedState<T>& st) {
  for (auto& [name, m] : st.parts)
    if (name == "S")
      for (Eigen::Index i = 0; i < m.rows(); ++i)
        for (Eigen::Index j = 0; j < i; ++j) m(i, j) = m(j, i);
}

template <class T> void check_same_run(const Run<T>& got, const Run<T>& want) {
  CHECK(got.O == want.O);
  CHECK(same_state(got.state, want.state));
}

}  // namespace

TEMPLATE_TEST_CASE("gated decode: equals the gated serial form exactly from a non-zero state, across token blocks",
                   "[gated][decode]", rational, fp61) {
  using T = TestType;
  int forms = 0;
  for (const auto& e : registry<T>().entries()) {
    if (!is_decode(e.form)) continue;
    ++forms;
    REQUIRE(e.caps.gates);
    const Entry<T>& serial = gated_serial_of(e);
    REQUIRE(serial.caps.gates);
    for (const Options& o : option_sets(e.op))
      for (Eigen::Index n : {1, 3, 64, 65, 130})
        for (std::uint64_t seed : {1u, 2u}) {
          const Problem<T> p = exact_gated_problem<T>({n, 3, 2}, seed);
          NamedState<T> init = perturbed_state(serial, exact_gated_problem<T>({3, 3, 2}, seed + 10), o, seed);
          if (e.form == "decode-packed") symmetrize_s(init);
          INFO(e.key() << " vs gated " << serial.key() << " n=" << n << " normalized=" << o.normalized
                       << " ridge=" << o.ridge << " seed=" << seed);
          Run<T> want;
          try {
            want = serial(p, o, &init);
          } catch (const NumericalError&) {  // an exactly vanishing normalizer: the decode form must refuse too
            CHECK_THROWS_AS(e(p, o, &init), NumericalError);
            continue;
          }
          check_same_run(e(p, o, &init), want);  // the registry's call: gates validated, blocks of 64
          for (Eigen::Index block : {1, 3}) {
            INFO("block " << block);
            check_same_run(decode_with_block(e.key(), p, o, &init, block), want);
          }
        }
  }
  CHECK(forms == 4);
}

// Constant gates run the fixed-γ arithmetic: each token's γ_t (and hla2's γ_t², γ_t) is the γ the fixed kernel
// computes once, so the outputs and states are identical, not merely close. 9/10 is not a float and its square
// rounds: the γ² of a gate and of Options::gamma are still the same number.
TEMPLATE_TEST_CASE("gated decode: constant gates are the fixed-gamma kernel bit for bit", "[gated][decode]", double,
                   float) {
  using T = TestType;
  const Problem<T> p = convert_problem<T>(gaussian_problem({130, 5, 3}, 7)),
                   prefix = convert_problem<T>(gaussian_problem({4, 5, 3}, 8));
  int forms = 0;
  for (const auto& e : registry<T>().entries()) {
    if (!is_decode(e.form)) continue;
    ++forms;
    for (const Options& base : option_sets(e.op))
      for (const rational& gamma : {rational(3, 4), rational(9, 10)}) {
        Options fixed = base;
        fixed.gamma = gamma;
        Problem<T> gated_p = p;
        gated_p.gates = ColVec<T>::Constant(p.n(), from_rational<T>(gamma));
        const NamedState<T> init = e(prefix, fixed).state;
        INFO(e.key() << " gamma=" << gamma << " normalized=" << base.normalized << " ridge=" << base.ridge);
        check_same_run(e(gated_p, base, &init), e(p, fixed, &init));
        for (Eigen::Index block : {1, 3}) {
          INFO("block " << block);
          check_same_run(decode_with_block(e.key(), gated_p, base, &init, block),
                         decode_with_block(e.key(), p, fixed, &init, block));
        }
      }
  }
  CHECK(forms == 4);
}

// The decode kernels compute the serial recurrences in the serial order (only the d-term inner products are laid
// out differently), so their rounding depth is the serial one with decay (bounds::accumulation_depth of a form it
// does not know: n per level, and one rounding more per step for the decay). hla2's G keeps γ_t², a rounded
// product: with the carry, at most 3 roundings per step on G's path against the 4 per step the two levels allow.
TEST_CASE("gated decode: float and double within the proven rounding bound of MPFR-256", "[gated][decode]") {
  const Eigen::Index n = 130, d = 4;
  for (const std::string& op : std::vector<std::string>{"linear", "hla2", "ahla"})
    for (double strength : {0.01, 0.5, 3.0})
      for (const Options& o : option_sets(op)) {
        GatedProblem<double> g{gaussian_problem({n, d, 3}, 17), gates_of_strength(n, strength, 3)};
        if (o.normalized) {  // non-negative q·k: no den_t near 0, so no row's bound is vacuous
          g.qkv.Q = g.qkv.Q.cwiseAbs();
          g.qkv.K = g.qkv.K.cwiseAbs();
        }
        const FloatingReference ref = floating_reference(op, g, o);
        const long h = bounds::rounding_depth(op, bounds::accumulation_depth("decode", n, 0), true, false, n, d);
        const auto check = [&]<class T>() {
          int forms = 0;
          for (const auto& e : registry<T>().entries()) {
            if (e.op != op || !is_decode(e.form)) continue;
            ++forms;
            Problem<T> p = convert_problem<T>(g.qkv);
            p.gates = g.gamma.cast<T>();
            const FloatingCheck c = check_within_bound(e(p, o).O, ref, o, h);
            INFO(scalar_name<T>() << " " << e.key() << " strength=" << strength << " normalized=" << o.normalized
                                  << " ridge=" << o.ridge << ": err " << c.normwise_rel << " (bound "
                                  << c.bound_normwise << ")");
            CHECK(c.err_over_bound <= 1);
            CHECK(c.vacuous_rows == 0);
          }
          CHECK(forms == (op == "hla2" ? 2 : 1));
        };
        check.operator()<float>();
        check.operator()<double>();
      }
}

TEST_CASE("gated decode: the kernels refuse what they do not define", "[gated][decode]") {
  Problem<double> p = gaussian_problem({6, 2, 2}, 1);
  p.gates = ColVec<double>::Constant(6, 0.5);
  const Options half_decay{.gamma = rational(1, 2)};
  for (const auto& e : registry<double>().entries()) {
    if (!is_decode(e.form)) continue;
    INFO(e.key());
    // Gates and a scalar decay together: through the registry, and in the kernel called directly.
    CHECK_THROWS_WITH(e(p, half_decay), Catch::Contains("gates and a decay gamma"));
    CHECK_THROWS_AS(decode_with_block<double>(e.key(), p, half_decay, nullptr, 3), InputError);
    // A gate per token, each in (0, 1] and finite.
    Problem<double> bad = p;
    bad.gates = ColVec<double>::Constant(5, 0.5);
    CHECK_THROWS_WITH(e(bad, Options{}), Catch::Contains("5 gates for 6 tokens"));
    CHECK_THROWS_AS(decode_with_block<double>(e.key(), bad, Options{}, nullptr, 3), InputError);
    for (double gate : {0.0, -0.5, 1.5, std::nan(""), double(INFINITY)}) {
      bad.gates = p.gates;
      bad.gates(3) = gate;
      INFO("gate " << gate);
      CHECK_THROWS_AS(e(bad, Options{}), InputError);
    }
    // Another operator's state.
    const Run<double> other =
        registry<double>().find(e.op == "linear" ? "ahla" : "linear", "decode", "paper")(p, Options{});
    CHECK_THROWS_AS(e(p, Options{}, &other.state), InputError);
  }
}

// ---- multi-head ---------------------------------------------------------------------------------------------------

TEST_CASE("gated multi-head: every head through a gated form, with its own gates, equals that head alone",
          "[gated][decode][heads]") {
  const Eigen::Index n = 11;
  std::vector<Problem<rational>> ps;
  for (int h = 0; h < 3; ++h) {
    ps.push_back(join_gates(rational_case({n, 3, 2}, 70 + h)));
    for (Eigen::Index t = 0; t < n; ++t) ps.back().gates(t) = square_gate_root(t + h) * square_gate_root(t + h);
  }
  std::vector<const Problem<rational>*> heads;
  for (const auto& p : ps) heads.push_back(&p);
  int forms = 0;
  for (const auto& form : registry<rational>().entries()) {
    if (!form.caps.gates || !form.caps.state) continue;
    ++forms;
    Options o;
    o.chunk = 3;
    std::vector<NamedState<rational>> starts;  // a nonzero initial state per head: its own first 4 tokens
    for (const auto& p : ps) starts.push_back(form(slice_rows(p, 0, 4), o).state);
    const std::vector<const NamedState<rational>*> init{&starts[0], &starts[1], &starts[2]};
    for (int threads : {1, 2, 4}) {  // parallel over heads (2) or over each head's chunks (4 > 3 heads)
      o.threads = threads;
      INFO(form.key() << " threads " << threads);
      const auto runs = fast::multi_head(form, heads, o);
      const auto cont = fast::multi_head(form, heads, o, init);
      REQUIRE(runs.size() == heads.size());
      for (std::size_t h = 0; h < heads.size(); ++h) {
        INFO("head " << h);
        check_same_run(runs[h], form(ps[h], o));
        check_same_run(cont[h], form(ps[h], o, init[h]));
      }
      // Each head's gates are its own: head 1 with head 0's gates computes something else.
      Problem<rational> borrowed = ps[1];
      borrowed.gates = ps[0].gates;
      CHECK(runs[1].O != form(borrowed, o).O);
    }
    // A head whose gates do not fit its tokens is an InputError naming the head, also from the parallel region.
    Problem<rational> bad = ps[1];
    bad.gates = ps[1].gates.head(n - 1);
    const std::vector<const Problem<rational>*> with_bad{heads[0], &bad, heads[2]};
    for (int threads : {1, 2}) {
      o.threads = threads;
      CHECK_THROWS_WITH(fast::multi_head(form, with_bad, o),
                        Catch::Contains("head 1") && Catch::Contains("10 gates for 11 tokens"));
    }
  }
  CHECK(forms >= 4 + 4);  // the decode forms and at least the serial and chunked ones
}
