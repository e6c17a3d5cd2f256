// Backward points of a sweep: see sweep_backward.hpp and experiments/README.md ("Backward passes").
#include "experiments/lib/sweep_backward.hpp"

#include <sstream>

#include "core/dispatch.hpp"
#include "core/inputs.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "experiments/lib/measure.hpp"
#include "fast/backward/passes.hpp"
#include "numerics/gradient_checks.hpp"

namespace hla::sweep {
namespace {

fast::DecayRule rule_of(const Point& pt) {
  return pt.variant == "corrected" ? fast::DecayRule::corrected : fast::DecayRule::paper;
}

// The upstream gradient dO of a point: the V of another Gaussian problem (float-representable, so float
// and double points see the same numbers).
Mat<double> upstream(const Point& pt) {
  return gaussian_problem(Shape{pt.n, pt.d, pt.dv}, pt.seed ^ 0xd0d0d0d0d0d0ULL).V;
}

template <class T> Mat<T> lift_to(const Mat<double>& m) {
  return m.unaryExpr([](double x) { return from_double<T>(x); });
}

template <class T> bool exact_in(const rational& r) { return rational(static_cast<double>(from_rational<T>(r))) == r; }

}  // namespace

struct BackwardEvaluator::Impl {
  ReferenceLimits lim;
  std::map<std::string, std::string> adjoint_verdicts;
  std::string ref_key;
  backward::Gradients<mpfr256> ref;

  // Does the pass compute the derivative of its serial form (this variant, options and chunk width)?
  // Decided in Z/(2^61−1) against forward-mode dual numbers through the serial form, on one random input
  // long enough for two chunks and a partial one (n = 2w + 3, at most 259: for w > 128 fewer chunks).
  std::string adjoint_verdict(const Point& pt, backward::Pass pass) {
    std::ostringstream k;
    k << pt.op << "|" << pt.variant << "|" << pt.backward << "|" << format_rational(pt.gamma) << "|"
      << format_rational(pt.eps) << "|" << format_rational(pt.ridge) << "|" << pt.normalized << "|" << pt.chunk;
    auto it = adjoint_verdicts.find(k.str());
    if (it != adjoint_verdicts.end()) return it->second;
    const Eigen::Index n = std::min<Eigen::Index>(259, std::max<Eigen::Index>(24, 2L * pt.chunk + 3));
    const Shape s{n, std::min<long>(pt.d, 3), std::min<long>(pt.dv, 2)};
    const Problem<fp61> p = field_problem(s, 0x5eed5eedULL);
    const Mat<fp61> dO = field_problem(s, 0x5eed5eefULL).V;
    std::string verdict;
    try {
      const auto got = backward::run_pass(pt.op, pass, p, pt.options(), nullptr, dO, rule_of(pt), pt.chunk);
      const auto want = serial_forward_mode_gradients<fp61>(pt.op, p, pt.options(), nullptr, dO, rule_of(pt));
      verdict = compare_gradients(got, want, false).exact_equal ? "yes" : "no";
    } catch (const std::exception&) {
      verdict = "n/a";  // e.g. a normalizer that vanishes on the field input
    }
    return adjoint_verdicts.emplace(k.str(), verdict).first->second;
  }

  // SPEC's gradient in MPFR-256: the serial backward of a serial form that is SPEC's operator for every
  // option (hla2: the corrected rule), run in MPFR. That reverse mode equals the forward-mode derivative of
  // the literal reference exactly ([gradients] tests, rationals and fp61); its own rounding is ~2^−250.
  const backward::Gradients<mpfr256>& reference(const Point& pt, const Problem<double>& inputs, const Mat<double>& dO) {
    std::ostringstream k;
    k << pt.op << "|" << pt.n << "|" << pt.d << "|" << pt.dv << "|" << pt.seed << "|" << format_rational(pt.gamma)
      << "|" << format_rational(pt.ridge) << "|" << pt.normalized << "|" << format_rational(pt.eps);
    if (k.str() != ref_key) {
      ref = backward::run_pass(pt.op, backward::Pass::serial, convert_problem<mpfr256>(inputs), pt.options(), nullptr,
                               lift_to<mpfr256>(dO), fast::DecayRule::corrected, 0);
      ref_key = k.str();
    }
    return ref;
  }

  template <class T> void run(const Point& pt, const Problem<double>& inputs, const std::string& form_exact,
                              std::map<std::string, std::string>& f) {
    const backward::Pass pass = parse<backward::Pass>(pt.backward);
    const Problem<T> p = convert_problem<T>(inputs);
    const Mat<double> dOd = upstream(pt);
    const Mat<T> dO = lift_to<T>(dOd);
    const Options opt = pt.options();
    backward::Gradients<T> g;
    backward::BackwardStats st;
    measure_calls(
        pt.repeats, pt.n, [&] { g = backward::run_pass(pt.op, pass, p, opt, nullptr, dO, rule_of(pt), pt.chunk, &st); },
        f);
    f["state_numbers"] = std::to_string(st.state_numbers);
    f["state_bytes"] = std::to_string(st.state_numbers * sizeof(T));
    f["checkpoints"] = std::to_string(st.checkpoints);
    f["stored_states"] = std::to_string(st.peak_states);
    f["stored_bytes"] = std::to_string(st.peak_numbers() * sizeof(T));

    // Exact in fp61: the form is SPEC's operator, and the pass is the derivative of the form.
    const std::string adjoint = adjoint_verdict(pt, pass);
    std::string exact = "n/a";
    if (form_exact == "no" || adjoint == "no")
      exact = "no";
    else if (form_exact == "yes" && adjoint == "yes")
      exact = "yes";
    f["exact_fp61"] = exact;
    std::string note;
    if (form_exact == "no")
      note = "the serial form with this variant is not SPEC's operator here, so neither is its gradient";
    if (adjoint == "no") note = "the backward is not the derivative of its serial form (fp61)";

    const std::string variant = registry<mpfr256>().find_exact(pt.op, "serial").variant;
    const std::string name = "mpfr-backward:serial" + (variant == "corrected" ? "/" + variant : "");
    if (pt.n > lim.gradient_max_n) {
      f["ref_method"] = "none";
      f["status"] = "no reference";
      f["note"] =
          note.empty() ? "reference too large (n > gradient_max_n = " + std::to_string(lim.gradient_max_n) + ")" : note;
      return;
    }
    const auto& r = reference(pt, inputs, dOd);
    f["ref_method"] = name;
    const ErrorStats es = compare_gradients(g, r, true);  // dQ, dK, dV and ∂L/∂X₀
    const double u = unit_roundoff<T>();
    error_columns(es, u, f);
    std::string status = "ok";
    // Per entry |g − ref| ≤ γ_K · M (fast/backward/magnitude.hpp): the same pass run on magnitudes.
    if (pt.normalized) {
      if (note.empty()) note = "no gradient bound for normalized outputs (division)";
    } else if (!exact_in<T>(pt.gamma) || !exact_in<T>(pt.ridge)) {
      if (note.empty()) note = "no gradient bound: gamma or ridge not exact in " + pt.scalar;
    } else {
      const Problem<Magnitude> pm{magnitudes(p.Q), magnitudes(p.K), magnitudes(p.V)};
      const auto mag = backward::run_pass(pt.op, pass, pm, opt, nullptr, magnitudes(dO), rule_of(pt), pt.chunk);
      const BoundCheck bc = check_bounds(g, r, mag);
      const Mat<Magnitude> mb = flatten(mag, true);
      const Mat<mpfr256> rb = flatten(r, true);
      double max_b = 0, max_r = 0;
      for (Eigen::Index i = 0; i < mb.size(); ++i) {
        max_b = std::max(max_b, mb(i).bound(u));
        max_r = std::max(max_r, mpfr256(abs(rb(i))).convert_to<double>());
      }
      const double bn = max_r > 0 ? max_b / max_r : max_b;
      f["bound_h"] = std::to_string(bc.max_depth);
      f["bound_normwise_rel"] = fmt_double(bn);
      f["bound_units_u"] = fmt_double(bn / u);
      f["err_over_bound"] = fmt_double(bc.max_ratio);
      if (bc.violations != 0) status = "exceeds bound";
    }
    if (exact == "no") status = "differs in exact arithmetic";
    f["status"] = status;
    f["note"] = note;
  }
};

BackwardEvaluator::BackwardEvaluator(const ReferenceLimits& lim) : impl_(std::make_unique<Impl>()) { impl_->lim = lim; }
BackwardEvaluator::~BackwardEvaluator() = default;

void BackwardEvaluator::evaluate(const Point& pt, const Problem<double>& inputs, const std::string& form_exact,
                                 std::map<std::string, std::string>& f) {
  if (pt.scalar == "float")
    impl_->run<float>(pt, inputs, form_exact, f);
  else if (pt.scalar == "double")
    impl_->run<double>(pt, inputs, form_exact, f);
  else
    throw InputError("backward passes are swept in float and double, not " + pt.scalar);
}

}  // namespace hla::sweep
