// The gated forms' definitions (gated_forms.hpp), included by the units that instantiate them, one per group of
// scalars: fast/gated_forms.cpp (rational and fp61, at -O1), fast/gated_forms_mpfr.cpp (MPFR-256 at -O1: the
// expected values of hla verify's random --gates cases and the sweeps' references) and fast/gated_forms_float.cpp
// (double and float at the build's -O3).
#pragma once

#include "fast/gated_forms.hpp"

#include <algorithm>
#include <cmath>

#include "core/registry.hpp"
#include "fast/scan/drivers.hpp"
#include "fast/scan/gated.hpp"
#include "fast/serial/gated.hpp"

namespace hla::gated {
namespace {

// The roots a_t of the gates, for the proposal's recurrence written in a_t = √γ_t.
template <class T> GatedProblem<T> with_root_gates(const GatedProblem<T>& g) {
  GatedProblem<T> roots = g;
  for (Eigen::Index t = 0; t < g.n(); ++t) {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
      roots.gamma(t) = std::sqrt(g.gamma(t));  // rounded once: double and float measure error, they decide nothing
    } else {
      roots.gamma(t) = exact_square_root(g.gamma(t));
    }
  }
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
    if (root * root != x)
      throw InputError("gates: a gate is not an exact square (the proposal needs a_t = sqrt(gamma_t))");
    return root;
  } else {
    const bmp::mpz_int num = bmp::numerator(x), den = bmp::denominator(x);
    const bmp::mpz_int rn = bmp::sqrt(num), rd = bmp::sqrt(den);
    if (rn * rn != num || rd * rd != den)
      throw InputError("gates: a gate is not the square of a rational (the proposal needs a_t = sqrt(gamma_t))");
    return T(rn, rd);
  }
}

// The registered form that computes f with gates (Entry::gated): the definitions are the references, SPEC's
// serial rules are linear's and ahla's serial forms and hla2's corrected one, Algorithm 1's rule with gates is
// hla2's printed serial form, and the scans are the operators of scan::gated_scan_variant.
template <class T> const Entry<T>* registered(const FormRef& f) {
  if (f.form == "reference") return registry<T>().try_find(f.op, f.form, "spec");
  if (f.form == "serial" && f.variant == "spec") return registry<T>().try_find_exact(f.op, f.form);
  if (f.form == "serial" && f.op == "hla2" && f.variant == "algorithm1-rule")
    return registry<T>().try_find("hla2", "serial", "paper");
  if (f.form.rfind("scan-", 0) == 0 && f.variant == "spec")
    return registry<T>().try_find(f.op, f.form, scan::gated_scan_variant(f.op));
  if (f.form == "decode" && f.variant == "spec")  // fast/serial/decode.hpp, each token's γ_t handed to the decoder
    return registry<T>().try_find_exact(f.op, f.form);
  // fast/chunked/gated.hpp with its stable gate factors; hla2's one-pass form, fast/chunked/hla2_fused.hpp
  if ((f.form == "chunked" || f.form == "chunked-fused") && f.variant == "spec")
    return registry<T>().try_find_exact(f.op, f.form);
  if (f.form == "chunked-naive-cumprod" && f.variant == "spec") {
    if (const Entry<T>* e = registry<T>().try_find(f.op, "chunked-naive-cumprod", "naive")) return e;
    throw InputError(f.name() +
                     ": a floating-point formulation (quotients of cumulative gate products), kept to "
                     "measure its failure; the exact scalars have the chunked form");
  }
  return nullptr;
}

template <class T>
Run<T> run(const FormRef& f, const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  const auto same = [&](const FormRef& x) { return x.op == f.op && x.form == f.form && x.variant == f.variant; };
  const bool known = std::any_of(forms().begin(), forms().end(), same) ||
                     std::any_of(floating_only_forms().begin(), floating_only_forms().end(), same);
  if (!known) throw InputError("no gated form " + f.name());
  if (g.qkv.gates.size()) throw InputError(f.name() + ": the gates go in GatedProblem::gamma");
  if (const Entry<T>* e = registered<T>(f)) {
    if (!e->caps.gates) throw std::logic_error(e->key() + " is registered without gates");
    validate_gates(g);  // first: its messages name the gates as the gated ledger and hla verify expect
    return (*e)(join_gates(g), opt, init);
  }
  // The proposal's recurrences, kept out of the registry: they are only ever held against the gated definition.
  validate(g.qkv, opt, Caps{.normalized = true, .ridge = true, .state = true}, f.name() + " (the decay is the gates')");
  validate_gates(g);
  Run<T> r = fast::proposal_hla2_serial(with_root_gates(g), opt, init, f.variant == "proposal" ? 1 : 4);
  for (Eigen::Index i = 0; i < r.O.size(); ++i)  // as the registry does for its forms
    if (!is_finite(r.O(i)))
      throw NumericalError(f.name() + ": output is not finite at token " + std::to_string(i % r.O.rows()));
  return r;
}

template <class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string& op, const GatedProblem<T>& g) {
  validate_gates(g);
  return scan::with_gated_scan_op<T>(op, Options{}, g.gamma,
                                     [&](const auto& alg) { return scan::associativity_sides(alg, g.qkv); });
}

#define HLA_GATED_INSTANTIATE(T)                                                                      \
  template Run<T> run(const FormRef&, const GatedProblem<T>&, const Options&, const NamedState<T>*);  \
  template std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string&, const GatedProblem<T>&); \
  template T exact_square_root(const T&);

}  // namespace hla::gated
