// The definition of gated::run (fast/gated_forms.hpp), included by the units that instantiate it: one per group of
// scalars (fast/gated_forms.cpp: rational and fp61 at -O1; gated_forms_mpfr.cpp: mpfr256 at -O1;
// gated_forms_float.cpp: double and float at the build's -O3), so the floating forms are optimized like the
// other form units and the exact ones cost no more compile time than before.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/registry.hpp"
#include "fast/chunked/gated.hpp"
#include "fast/gated_forms.hpp"
#include "fast/scan/ahla.hpp"
#include "fast/scan/drivers.hpp"
#include "fast/scan/gated.hpp"
#include "fast/scan/hla2.hpp"
#include "fast/scan/linear.hpp"
#include "fast/serial/gated.hpp"
#include "reference/gated.hpp"

namespace hla::gated {
namespace detail {

// Calls f(op) with the gated scan operator of `op`: the decay-aware combine that is exact for every ρ (the
// harness's corrected hla2 and ahla operators; linear has one), its tokens carrying their own gates; `o` holds
// the read-out options (ε, λ, normalized).
template <class T, class F>
decltype(auto) with_gated_scan_op(const std::string& op, const Options& o, const ColVec<T>& gates, F&& f) {
  if (op == "hla2") return f(scan::GatedOp<scan::Hla2Op<T, true>>({o, scan::Variant::corrected}, gates));
  if (op == "ahla") return f(scan::GatedOp<scan::AhlaOp<T>>({o, scan::Variant::corrected}, gates));
  if (op == "linear") return f(scan::GatedOp<scan::LinearOp<T>>(scan::LinearOp<T>(o), gates));
  throw InputError("no gated scan operator for '" + op + "'");
}

template <class T>
Run<T> run_scan(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  return with_gated_scan_op<T>(f.op, opt, g.gamma, [&](const auto& op) {
    if (f.form == "scan-fold") return scan::scan_fold(op, g.qkv, init);
    if (f.form == "scan-blelloch") return scan::scan_blelloch(op, g.qkv, init, opt.threads);
    return scan::scan_twolevel(op, g.qkv, init, opt.chunk, opt.threads);
  });
}

// The roots a_t of the gates, for the proposal's recurrence written in a_t = √γ_t: exact in rationals and F_p
// (refused when a gate is not a square), rounded once in floating point.
template <class T> GatedProblem<T> with_root_gates(const GatedProblem<T>& g) {
  GatedProblem<T> roots = g;
  for (Eigen::Index t = 0; t < g.n(); ++t) {
    if constexpr (is_exact_v<T>) {
      roots.gamma(t) = exact_square_root(g.gamma(t));
    } else {
      using std::sqrt;
      roots.gamma(t) = T(sqrt(g.gamma(t)));
    }
  }
  return roots;
}

template <class T>
Run<T> run_chunked(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  namespace c = fast::chunked;
  c::GateFactors how = c::stable_gate_factors<T>();
  if (f.form == "chunked-naive-cumprod") {
    if constexpr (is_exact_v<T>)
      throw InputError(f.name() +
                       ": a floating-point formulation (quotients of cumulative gate products), kept to "
                       "measure its failure; the exact scalars have the chunked form");
    else
      how = c::GateFactors::naive_cumprod;
  }
  if (f.op == "hla2") return c::gated_hla2_chunked(g, opt, init, how);
  if (f.op == "ahla") return c::gated_ahla_chunked(g, opt, init, how);
  return c::gated_linear_chunked(g, opt, init, how);
}

}  // namespace detail

template <class T>
Run<T> run(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  const auto same = [&](const FormRef& x) { return x.op == f.op && x.form == f.form && x.variant == f.variant; };
  const bool known = std::any_of(forms().begin(), forms().end(), same) ||
                     std::any_of(floating_only_forms().begin(), floating_only_forms().end(), same);
  if (!known) throw InputError("no gated form " + f.name());
  const bool is_scan = f.form.rfind("scan-", 0) == 0;
  const bool is_chunked = f.form.rfind("chunked", 0) == 0;
  const Caps caps{.normalized = true,
                  .ridge = f.op == "hla2",
                  .state = f.form != "reference",
                  .chunk = is_scan || is_chunked,
                  .threads = is_scan || is_chunked};
  validate(g.qkv, opt, caps, f.name() + " (the decay is the gates')");
  validate_gates(g);
  if (init && !caps.state) throw InputError(f.name() + ": a reference takes no initial state");
  const auto compute = [&]() -> Run<T> {
    if (f.form == "reference")
      return f.op == "hla2"   ? reference::gated_hla2(g, opt)
             : f.op == "ahla" ? reference::gated_ahla(g, opt)
                              : reference::gated_linear(g, opt);
    if (is_scan) return detail::run_scan(f, g, opt, init);
    if (is_chunked) return detail::run_chunked(f, g, opt, init);
    if (f.op == "linear") return fast::gated_linear_serial(g, opt, init);
    if (f.op == "ahla") return fast::gated_ahla_serial(g, opt, init);
    if (f.variant == "spec") return fast::gated_hla2_serial(g, opt, init, fast::DecayRule::corrected);
    if (f.variant == "algorithm1-rule") return fast::gated_hla2_serial(g, opt, init, fast::DecayRule::paper);
    return fast::proposal_hla2_serial(detail::with_root_gates(g), opt, init, f.variant == "proposal" ? 1 : 4);
  };
  Run<T> r = compute();
  // As the registry does for its forms: a non-finite output is refused, never returned.
  for (Eigen::Index i = 0; i < r.O.size(); ++i)
    if (!is_finite(r.O(i)))
      throw NumericalError(f.name() + ": output is not finite at token " + std::to_string(i % r.O.rows()) +
                           " (a normalizer den_t + eps near zero, or overflow)");
  return r;
}

}  // namespace hla::gated

#define HLA_GATED_INSTANTIATE_RUN(T)                                                                                 \
  template hla::Run<T> hla::gated::run(const hla::gated::FormRef&, const hla::GatedProblem<T>&, const hla::Options&, \
                                       const hla::NamedState<T>*);
