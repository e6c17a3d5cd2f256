// The gated forms' definitions (gated_forms.hpp), included by the units that instantiate them: fast/gated_forms.cpp
// (the exact scalars, rational and fp61) and fast/gated_forms_mpfr.cpp (MPFR-256: the expected values of hla verify's
// random --gates cases and their states).
#pragma once

#include "fast/gated_forms.hpp"

#include <algorithm>

#include "core/registry.hpp"
#include "fast/scan/ahla.hpp"
#include "fast/scan/drivers.hpp"
#include "fast/scan/gated.hpp"
#include "fast/scan/hla2.hpp"
#include "fast/scan/linear.hpp"
#include "fast/serial/gated.hpp"
#include "reference/gated.hpp"

namespace hla::gated {
namespace {

const std::vector<std::string> kOperators{"linear", "hla2", "ahla"};
const std::vector<std::string> kScanForms{"scan-fold", "scan-blelloch", "scan-twolevel"};

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

// The roots a_t of the gates, for the proposal's recurrence written in a_t = √γ_t.
template <class T> GatedProblem<T> with_root_gates(const GatedProblem<T>& g) {
  GatedProblem<T> roots = g;
  for (Eigen::Index t = 0; t < g.n(); ++t) roots.gamma(t) = exact_square_root(g.gamma(t));
  return roots;
}

}  // namespace

template <class T> T exact_square_root(const T& x) {
  if constexpr (std::is_same_v<T, fp61>) {
    const Fp root = x.pow((Fp::P + 1) / 4);  // p ≡ 3 (mod 4): a square's root is x^((p+1)/4)
    if (root * root != x)
      throw InputError("gates: a gate is not a square in F_p (the proposal needs a_t = sqrt(gamma_t))");
    return root;
  } else if constexpr (!std::is_same_v<T, rational>) {  // MPFR: a dyadic square's root is exact at 256 bits
    using std::sqrt;
    const T root = sqrt(x);
    if (root * root != x) throw InputError("gates: a gate is not an exact square (the proposal needs a_t = sqrt(gamma_t))");
    return root;
  } else {
    const bmp::mpz_int num = bmp::numerator(x), den = bmp::denominator(x);
    const bmp::mpz_int rn = bmp::sqrt(num), rd = bmp::sqrt(den);
    if (rn * rn != num || rd * rd != den)
      throw InputError("gates: a gate is not the square of a rational (the proposal needs a_t = sqrt(gamma_t))");
    return T(rn, rd);
  }
}

template <class T>
Run<T> run(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  const bool known = std::any_of(forms().begin(), forms().end(), [&](const FormRef& x) {
    return x.op == f.op && x.form == f.form && x.variant == f.variant;
  });
  if (!known) throw InputError("no gated form " + f.name());
  const bool is_scan = f.form.rfind("scan-", 0) == 0;
  const Caps caps{.normalized = true,
                  .ridge = f.op == "hla2",
                  .state = f.form != "reference",
                  .chunk = is_scan,
                  .threads = is_scan};
  validate(g.qkv, opt, caps, f.name() + " (the decay is the gates')");
  validate_gates(g);
  if (init && !caps.state) throw InputError(f.name() + ": a reference takes no initial state");
  if (f.form == "reference")
    return f.op == "hla2"   ? reference::gated_hla2(g, opt)
           : f.op == "ahla" ? reference::gated_ahla(g, opt)
                            : reference::gated_linear(g, opt);
  if (is_scan) return run_scan(f, g, opt, init);
  if (f.op == "linear") return fast::gated_linear_serial(g, opt, init);
  if (f.op == "ahla") return fast::gated_ahla_serial(g, opt, init);
  if (f.variant == "spec") return fast::gated_hla2_serial(g, opt, init, fast::DecayRule::corrected);
  if (f.variant == "algorithm1-rule") return fast::gated_hla2_serial(g, opt, init, fast::DecayRule::paper);
  return fast::proposal_hla2_serial(with_root_gates(g), opt, init, f.variant == "proposal" ? 1 : 4);
}

template <class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string& op, const GatedProblem<T>& g) {
  validate_gates(g);
  return with_gated_scan_op<T>(op, Options{}, g.gamma,
                               [&](const auto& alg) { return scan::associativity_sides(alg, g.qkv); });
}

#define HLA_GATED_INSTANTIATE(T)                                                                      \
  template Run<T> run(const FormRef&, const GatedProblem<T>&, const Options&, const NamedState<T>*);  \
  template std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string&, const GatedProblem<T>&); \
  template T exact_square_root(const T&);

}  // namespace hla::gated
