// Which registered forms compute SPEC's operator exactly for given options, decided in the prime field,
// and the fastest streaming form that does (a "proxy" for the O(n²)/O(n³) literal reference at large n).
// Used by the sweeps (reference values, the exact_fp61 column) and by `hla verify` (exact expectations).
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"

namespace hla::verify {

inline Options base_options(const rational& gamma, const rational& lambda) {
  Options o;
  o.gamma = gamma;
  o.ridge = lambda;
  return o;
}
inline bool caps_allow(const Caps& c, const Options& o) {
  return (o.gamma == 1 || c.decay) && (!o.normalized || c.normalized) && (o.ridge == 0 || c.ridge);
}

// Does entry (op, form, variant) compute exactly SPEC's operator with these options? Decided in
// Z/(2^61−1) on one random input (Schwartz–Zippel: a false identity of degree D passes with probability
// ≤ D/2^61). "n/a" when the form has no fp61 instance.
class ExactnessOracle {
 public:
  // `gated`: with uniform field gates γ_t (core/gates.hpp), for forms that take gates.
  std::string check(const std::string& op, const std::string& form, const std::string& variant, const Options& opt,
                    long d, long dv, bool gated = false) {
    const long nc = std::min<long>(600, std::max<long>(24, 2L * opt.chunk + 3));
    const long dc = std::min<long>(d, 16), dvc = std::min<long>(dv, 16);
    std::ostringstream k;
    k << op << "|" << form << "|" << variant << "|" << format_rational(opt.gamma) << "|" << format_rational(opt.eps)
      << "|" << format_rational(opt.ridge) << "|" << opt.normalized << "|" << opt.chunk << "|" << opt.threads << "|"
      << dc << "|" << dvc << "|" << gated;
    auto it = cache_.find(k.str());
    if (it != cache_.end()) return it->second;
    std::string verdict = "n/a";
    const auto& reg = registry<fp61>();
    if (const Entry<fp61>* e = reg.try_find(op, form, variant)) {
      try {
        Problem<fp61> p = field_problem(Shape{nc, dc, dvc}, 0x5eed5eedULL);
        if (gated) {
          std::mt19937_64 rng(0x9a7e5eedULL);
          p.gates = field_gates(nc, rng);
        }
        const Mat<fp61> got = (*e)(p, opt).O;
        const Mat<fp61> want = reg.reference(op)(p, opt).O;
        verdict = got == want ? "yes" : "no";
      } catch (const std::exception&) { verdict = "n/a"; }
    }
    cache_.emplace(k.str(), verdict);
    return verdict;
  }

  // The first streaming form of `op` (the definition's before the paper's formula) that is exact for (γ, λ)
  // unnormalized, and with per-token gates when `gated`.
  std::optional<std::pair<std::string, std::string>> proxy(const std::string& op, const rational& gamma,
                                                           const rational& lambda, bool gated = false) {
    const Options o = base_options(gamma, lambda);
    std::vector<const Entry<double>*> cands;
    for (const auto& e : registry<double>().entries())
      if (e.op == op && e.form.rfind("serial", 0) == 0 && caps_allow(e.caps, o) && (!gated || e.caps.gates))
        cands.push_back(&e);
    std::stable_sort(cands.begin(), cands.end(), [](auto* a, auto* b) {
      auto rank = [](const Entry<double>* e) {
        return (e->form == "serial" ? 0 : 2) + (e->target == Target::definition ? 0 : 1);
      };
      return rank(a) < rank(b);
    });
    for (const Entry<double>* e : cands)
      if (registry<mpfr256>().try_find(e->op, e->form, e->variant) &&
          check(op, e->form, e->variant, o, 5, 3, gated) == "yes")
        return std::make_pair(e->form, e->variant);
    return std::nullopt;
  }

 private:
  std::map<std::string, std::string> cache_;
};

}  // namespace hla::verify
