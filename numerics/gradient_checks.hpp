// Gradient verification (claim `hla2.backward`, paper §4.2 "Backward for gradients"): for the loss
// L = Σ_t ⟨dO_t, o_t⟩ with a given upstream gradient dO, compare
//   reference          ∂L/∂(Q, K, V) of the literal-sum reference (reference/), by forward-mode dual numbers:
//                      one tangent direction per input entry, the unchanged reference template run in
//                      Dual<T> — exact in rational/fp61.
//   forward_mode       the same through the serial form (fast/serial/), which can start from an initial state:
//                      also ∂L/∂X_0, one tangent per state entry. For hla2 with the paper's decay rule at
//                      γ < 1 this is the derivative of the paper's own forward (≠ the reference's).
//   serial             hand-written reverse mode through the serial recurrence, all states stored
//                      (fast/backward/, recurrence_backward with one chunk).
//   chunked            the same sweep with checkpoints only at chunk boundaries, recomputing each chunk.
//   scan (hla2 only)   the reverse scan applying the adjoint ⊕* of the masked concatenation (eq. 4.1),
//                      checkpointed at chunk boundaries (fast/backward/hla2.hpp).
// Exact scalars: each pair is equal or not (ErrorStats::exact_equal, mismatches). Floating scalars: the
// references are computed in MPFR-256 and each floating gradient's error against it is reported
// (ErrorStats, in units of u); for unnormalized options also against a per-entry rounding-error bound
// γ_K · M from the same backward run on magnitudes (fast/backward/magnitude.hpp).
#pragma once

#include <functional>
#include <optional>

#include "fast/backward/ahla.hpp"
#include "fast/backward/dual.hpp"
#include "fast/backward/hla2.hpp"
#include "fast/backward/linear.hpp"
#include "fast/backward/magnitude.hpp"
#include "fast/backward/passes.hpp"
#include "numerics/compare.hpp"
#include "reference/second_order.hpp"

namespace hla {

using backward::Gradients;

// The operators with a backward (core/operators.hpp); the others are refused by name.
inline bool has_backward(const std::string& op) { return operator_info(op).backward; }
[[noreturn]] inline void no_backward(const std::string& op) {
  throw InputError("no backward for operator '" + op + "' (have " +
                   operator_names([](const OperatorInfo& o) { return o.backward; }) + ")");
}

template <class T> Mat<Dual<T>> lift(const Mat<T>& m) {
  return m.unaryExpr([](const T& x) { return Dual<T>(x); });
}

// Forward-mode gradient of L = Σ ⟨dO, O⟩ where O = run(problem, initial state) is any form run in Dual<T>.
// One run per input entry (and per initial-state entry when `init` is given).
template <class T> Gradients<T> forward_mode_gradients(
    const Problem<T>& p, const NamedState<T>* init, const Mat<T>& dO,
    const std::function<Mat<Dual<T>>(const Problem<Dual<T>>&, const NamedState<Dual<T>>*)>& run) {
  backward::check_upstream(p, dO);
  Problem<Dual<T>> dp{lift(p.Q), lift(p.K), lift(p.V)};
  std::optional<NamedState<Dual<T>>> dinit;
  if (init) {
    dinit.emplace();
    for (const auto& [name, m] : init->parts) dinit->parts.emplace_back(name, lift(m));
  }
  auto directional = [&]() {
    const Mat<Dual<T>> O = run(dp, dinit ? &*dinit : nullptr);
    T s(0);
    for (Eigen::Index i = 0; i < O.size(); ++i) s += dO(i) * O(i).d;
    return s;
  };
  auto sweep = [&](Mat<Dual<T>>& x, Mat<T>& grad) {
    grad = Mat<T>::Zero(x.rows(), x.cols());
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      x(i).d = T(1);
      grad(i) = directional();
      x(i).d = T(0);
    }
  };
  Gradients<T> g;
  sweep(dp.Q, g.dQ);
  sweep(dp.K, g.dK);
  sweep(dp.V, g.dV);
  if (dinit)
    for (auto& [name, m] : dinit->parts) {
      Mat<T> gm;
      sweep(m, gm);
      g.dstate.parts.emplace_back(name, gm);
    }
  return g;
}

// ∂L/∂(Q, K, V) of SPEC's reference for op ∈ {hla2 (masked), ahla, linear}.
template <class T>
Gradients<T> reference_gradients(const std::string& op, const Problem<T>& p, const Options& opt, const Mat<T>& dO) {
  return forward_mode_gradients<T>(p, nullptr, dO, [&](const Problem<Dual<T>>& dp, const NamedState<Dual<T>>*) {
    switch (op_id(op)) {
      case OpId::hla2:
        return reference::hla2(dp, opt, true).O;
      case OpId::ahla:
        return reference::ahla(dp, opt).O;
      case OpId::linear:
        return reference::linear(dp, opt).O;
      case OpId::hla2_unmasked:
      case OpId::hla3:
      case OpId::hla3_unmasked:
      case OpId::softmax:
        break;
    }
    no_backward(op);
  });
}

// ∂L/∂(Q, K, V, X_0) of the serial form (hla2 masked with the given decay rule, ahla, linear).
template <class T> Gradients<T> serial_forward_mode_gradients(const std::string& op, const Problem<T>& p,
                                                              const Options& opt, const NamedState<T>* init,
                                                              const Mat<T>& dO, fast::DecayRule rule) {
  return forward_mode_gradients<T>(p, init, dO, [&](const Problem<Dual<T>>& dp, const NamedState<Dual<T>>* di) {
    switch (op_id(op)) {
      case OpId::hla2:
        return fast::hla2_serial<Dual<T>, true>(dp, opt, di, rule).O;
      case OpId::ahla:
        return fast::ahla_serial(dp, opt, di).O;
      case OpId::linear:
        return fast::linear_serial(dp, opt, di).O;
      case OpId::hla2_unmasked:
      case OpId::hla3:
      case OpId::hla3_unmasked:
      case OpId::softmax:
        break;
    }
    no_backward(op);
  });
}

// Reverse mode: chunk ≤ 0 or ≥ n is the serial backward (all states stored), otherwise checkpointed.
template <class T> Gradients<T> backward_gradients(const std::string& op, const Problem<T>& p, const Options& opt,
                                                   const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                                   fast::DecayRule rule, Eigen::Index chunk) {
  return backward::run_pass(op, chunk > 0 ? backward::Pass::checkpointed : backward::Pass::serial, p, opt, init, dO,
                            rule, chunk);
}

// All gradient entries in one column (dQ, dK, dV, then the initial-state parts when `with_state`).
template <class T> Mat<T> flatten(const Gradients<T>& g, bool with_state) {
  std::vector<const Mat<T>*> parts{&g.dQ, &g.dK, &g.dV};
  if (with_state)
    for (const auto& [name, m] : g.dstate.parts) parts.push_back(&m);
  Eigen::Index size = 0;
  for (const Mat<T>* m : parts) size += m->size();
  Mat<T> out(size, 1);
  Eigen::Index at = 0;
  for (const Mat<T>* m : parts)
    for (Eigen::Index i = 0; i < m->size(); ++i) out(at++, 0) = (*m)(i);
  return out;
}

// `got` against `ref`: exactly for exact T (ref in T), against MPFR for floating T (ref in mpfr256, or in T,
// then lifted exactly to MPFR). Shape mismatch (e.g. differing state parts) gives mismatches = −1.
template <class T, class R>
ErrorStats compare_gradients(const Gradients<T>& got, const Gradients<R>& ref, bool with_state) {
  const Mat<T> a = flatten(got, with_state);
  const Mat<R> b = flatten(ref, with_state);
  if constexpr (is_exact_v<T>) {
    static_assert(std::is_same_v<T, R>);
    return compare_exact(a, b);
  } else {
    return compare_to(a, Mat<mpfr256>(b.unaryExpr([](const R& x) { return to_mpfr(x); })));
  }
}

// The zero initial state of op's serial form, as a NamedState.
template <class T> NamedState<T> zero_state(const std::string& op, Eigen::Index d, Eigen::Index dv) {
  switch (op_id(op)) {
    case OpId::hla2:
      return export_state<fast::Hla2State<T, true>, T>(fast::Hla2State<T, true>::zero(d, dv));
    case OpId::ahla:
      return export_state<fast::AhlaState<T>, T>(fast::AhlaState<T>::zero(d, dv));
    case OpId::linear:
      return export_state<fast::LinearState<T>, T>(fast::LinearState<T>::zero(d, dv));
    case OpId::hla2_unmasked:
    case OpId::hla3:
    case OpId::hla3_unmasked:
    case OpId::softmax:
      break;
  }
  no_backward(op);
}

// Floating gradients against MPFR and against their per-entry bounds |got − ref| ≤ γ_K · M.
struct BoundCheck {
  bool checked = false;  // computed (floating T, unnormalized)
  long violations = 0;   // entries over their bound
  double max_ratio = 0;  // max |got − ref| / bound over entries with a nonzero bound
  int max_depth = 0;     // largest K
};

template <class T, class R>
BoundCheck check_bounds(const Gradients<T>& got, const Gradients<R>& ref, const Gradients<Magnitude>& mag) {
  const Mat<T> a = flatten(got, true);
  const Mat<R> b = flatten(ref, true);
  const Mat<Magnitude> m = flatten(mag, true);
  BoundCheck c;
  c.checked = true;
  if (a.size() != b.size() || a.size() != m.size()) {
    c.violations = -1;
    return c;
  }
  const double u = unit_roundoff<T>();
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double err = mpfr256(abs(to_mpfr(a(i)) - to_mpfr(b(i)))).template convert_to<double>();
    const double bound = m(i).bound(u);
    c.max_depth = std::max(c.max_depth, m(i).k);
    if (err > bound) ++c.violations;
    if (bound > 0) c.max_ratio = std::max(c.max_ratio, err / bound);
  }
  return c;
}

template <class T> Mat<Magnitude> magnitudes(const Mat<T>& m) {
  return m.unaryExpr([](const T& x) { return Magnitude(to_double(x), 0); });
}

template <class T> using GradientRef = std::conditional_t<is_exact_v<T>, T, mpfr256>;

template <class T> struct GradientCheck {
  using R = GradientRef<T>;
  std::string op;
  fast::DecayRule rule = fast::DecayRule::corrected;
  Eigen::Index chunk = 0;
  bool has_reference = false;  // no initial state (the reference starts from zero)
  bool has_scan = false;       // hla2, and the rule is a fold of the masked concatenation (γ = 1 or corrected)
  Gradients<R> reference, forward_mode;
  Gradients<T> serial, chunked, scan;
  ErrorStats serial_vs_reference;     // dQ, dK, dV (only if has_reference)
  ErrorStats serial_vs_forward_mode;  // dQ, dK, dV, dX_0 — the hand-written adjoint of the serial form
  ErrorStats chunked_vs_serial;       // dQ, dK, dV, dX_0 (floating: both in T)
  ErrorStats scan_vs_serial;          // dQ, dK, dV, dX_0 (only if has_scan)
  ErrorStats chunked_vs_reference, scan_vs_reference;  // floating: errors of the other paths vs MPFR (forward mode)
  BoundCheck serial_bound, chunked_bound, scan_bound;  // floating, unnormalized: vs γ_K · M per entry

  // Every available pair agrees exactly (exact T). For floating T, use the ErrorStats.
  bool all_equal() const {
    bool ok = serial_vs_forward_mode.exact_equal && chunked_vs_serial.exact_equal;
    if (has_reference) ok = ok && serial_vs_reference.exact_equal;
    if (has_scan) ok = ok && scan_vs_serial.exact_equal;
    return ok;
  }
};

// The whole check for one operator, inputs, options, upstream gradient and chunk width. op: "hla2"
// (masked; `rule` chooses the serial decay rule), "ahla", "linear". `init`: an initial state of the
// serial form (nullptr = zero; then the reference gradients are computed too).
template <class T> GradientCheck<T> check_gradients(const std::string& op, const Problem<T>& p, const Options& opt,
                                                    const Mat<T>& dO, int chunk,
                                                    fast::DecayRule rule = fast::DecayRule::corrected,
                                                    const NamedState<T>* init = nullptr) {
  using R = GradientRef<T>;
  if (!has_backward(op)) no_backward(op);
  if (chunk < 1) throw InputError("chunk width must be >= 1");
  GradientCheck<T> c;
  c.op = op;
  c.rule = rule;
  c.chunk = chunk;
  c.has_reference = init == nullptr;
  const backward::BackwardEntry<T>* scan_pass = backward::backward_registry<T>().try_find(op, backward::Pass::scan);
  c.has_scan = scan_pass && (!scan_pass->caps.corrected_decay || rule == fast::DecayRule::corrected || opt.gamma == 1);
  // References (in T if exact, else in MPFR-256 from the same inputs).
  Problem<R> pr;
  Mat<R> dOr;
  std::optional<NamedState<R>> init_r;
  if constexpr (std::is_same_v<T, R>) {
    pr = p;
    dOr = dO;
    if (init) init_r = *init;
  } else {
    auto to_r = [](const Mat<T>& m) { return Mat<R>(m.unaryExpr([](const T& x) { return to_mpfr(x); })); };
    pr = {to_r(p.Q), to_r(p.K), to_r(p.V)};
    dOr = to_r(dO);
    if (init) {
      init_r.emplace();
      for (const auto& [name, m] : init->parts) init_r->parts.emplace_back(name, to_r(m));
    }
  }
  if (c.has_reference) c.reference = reference_gradients<R>(op, pr, opt, dOr);
  // Forward mode always from an explicit initial state (zero if none), so that ∂L/∂X_0 is checked too.
  if (!init_r) init_r = zero_state<R>(op, p.d(), p.dv());
  c.forward_mode = serial_forward_mode_gradients<R>(op, pr, opt, &*init_r, dOr, rule);
  c.serial = backward_gradients(op, p, opt, init, dO, rule, 0);
  c.chunked = backward_gradients(op, p, opt, init, dO, rule, chunk);
  if (c.has_scan) c.scan = backward::run_pass(op, backward::Pass::scan, p, opt, init, dO, rule, chunk);
  if (c.has_reference) c.serial_vs_reference = compare_gradients(c.serial, c.reference, false);
  c.serial_vs_forward_mode = compare_gradients(c.serial, c.forward_mode, true);
  c.chunked_vs_serial = compare_gradients(c.chunked, c.serial, true);
  if (c.has_scan) c.scan_vs_serial = compare_gradients(c.scan, c.serial, true);
  if constexpr (!is_exact_v<T>) {
    c.chunked_vs_reference = compare_gradients(c.chunked, c.forward_mode, true);
    if (c.has_scan) c.scan_vs_reference = compare_gradients(c.scan, c.forward_mode, true);
    if (!opt.normalized) {
      // The same backward programs on magnitudes (inputs are exact in T, so K counts arithmetic only).
      const Problem<Magnitude> pm{magnitudes(p.Q), magnitudes(p.K), magnitudes(p.V)};
      const Mat<Magnitude> dOm = magnitudes(dO);
      std::optional<NamedState<Magnitude>> init_m;
      if (init) {
        init_m.emplace();
        for (const auto& [name, m] : init->parts) init_m->parts.emplace_back(name, magnitudes(m));
      }
      const NamedState<Magnitude>* im = init_m ? &*init_m : nullptr;
      c.serial_bound = check_bounds(c.serial, c.forward_mode, backward_gradients(op, pm, opt, im, dOm, rule, 0));
      c.chunked_bound = check_bounds(c.chunked, c.forward_mode, backward_gradients(op, pm, opt, im, dOm, rule, chunk));
      if (c.has_scan)
        c.scan_bound = check_bounds(c.scan, c.forward_mode,
                                    backward::run_pass(op, backward::Pass::scan, pm, opt, im, dOm, rule, chunk));
    }
  }
  return c;
}

// ---- compiled once per scalar ------------------------------------------------------------------------------
// The gradient checks run every form in Dual<T> and every reverse pass; a unit that calls them would otherwise
// compile them again (they were the four heaviest units: the sweep, `hla verify --grad`, the ledger and the
// tests each paid for the same instantiations). generated/gradients_<scalar>.cpp (CMakeLists.txt) holds the one
// definition per scalar (after these declarations, as the standard allows); every other unit sees only the
// declarations (docs/build.md has the measurements).
// The reverse passes: their registry (fast/backward/register.hpp, which only the generated units include; run_pass
// looks an entry up and calls it), and hla2's reverse scan, which the tests also call directly.
#define HLA_GRADIENT_PASSES(EXTERN, T)                                                                               \
  EXTERN template const backward::BackwardRegistry<T>& backward::backward_registry<T>();                             \
  EXTERN template backward::Gradients<T> backward::hla2_scan_backward<T>(                                            \
      const Problem<T>&, const Options&, const std::type_identity_t<NamedState<T>>*, const Mat<T>&, fast::DecayRule, \
      Eigen::Index, BackwardStats*);
// The exact references (T exact, or MPFR-256 for a floating check).
#define HLA_GRADIENT_REFERENCES(EXTERN, T)                                                                             \
  EXTERN template Gradients<T> forward_mode_gradients<T>(                                                              \
      const Problem<T>&, const NamedState<T>*, const Mat<T>&,                                                          \
      const std::function<Mat<Dual<T>>(const Problem<Dual<T>>&, const NamedState<Dual<T>>*)>&);                        \
  EXTERN template Gradients<T> reference_gradients<T>(const std::string&, const Problem<T>&, const Options&,           \
                                                      const Mat<T>&);                                                  \
  EXTERN template Gradients<T> serial_forward_mode_gradients<T>(const std::string&, const Problem<T>&, const Options&, \
                                                                const NamedState<T>*, const Mat<T>&, fast::DecayRule);
#define HLA_GRADIENT_CHECK(EXTERN, T)                                                                        \
  EXTERN template GradientCheck<T> check_gradients<T>(const std::string&, const Problem<T>&, const Options&, \
                                                      const Mat<T>&, int, fast::DecayRule, const NamedState<T>*);

HLA_GRADIENT_PASSES(extern, rational)
HLA_GRADIENT_PASSES(extern, fp61)
HLA_GRADIENT_PASSES(extern, mpfr256)
HLA_GRADIENT_PASSES(extern, double)
HLA_GRADIENT_PASSES(extern, float)
HLA_GRADIENT_PASSES(extern, Magnitude)
HLA_GRADIENT_REFERENCES(extern, rational)
HLA_GRADIENT_REFERENCES(extern, fp61)
HLA_GRADIENT_REFERENCES(extern, mpfr256)
HLA_GRADIENT_CHECK(extern, rational)
HLA_GRADIENT_CHECK(extern, fp61)
HLA_GRADIENT_CHECK(extern, double)
HLA_GRADIENT_CHECK(extern, float)

}  // namespace hla
