#include "claims/support.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "core/build_info.hpp"
#include "core/parse.hpp"
#include "numerics/compare.hpp"
#include "numerics/evaluate.hpp"

namespace hla::verify {

std::string ParamSpace::describe() const {
  std::string s = fmt::format("γ {}, {}, λ {}", decay ? "random" : "= 1",
                              normalized ? "normalized with random ε" : "unnormalized", ridge ? "random" : "= 0");
  if (chunks.size() > 1 || chunks.front() != 16) {
    s += ", chunk widths {";
    for (std::size_t i = 0; i < chunks.size(); ++i) s += fmt::format("{}{}", i ? "," : "", chunks[i]);
    s += "}";
  }
  if (threads.size() > 1) s += ", threads {1,2}";
  return s;
}

template <class T>
Mat<T> run_stacked(const FormRef& f, const Problem<T>& p, const Options& opt, const ParamSpace& space) {
  const Entry<T>& e = registry<T>().find(f.op, f.form, f.variant);
  std::vector<Mat<T>> parts;
  for (int w : space.chunks)
    for (int th : space.threads) {
      Options o = opt;
      o.chunk = w;
      o.threads = th;
      parts.push_back(e(p, o).O);
      if (!e.caps.chunk && !e.caps.threads) break;
    }
  // Forms without chunk/threads are run once and repeated, so both sides stack the same number of rows.
  const std::size_t want = space.chunks.size() * space.threads.size();
  while (parts.size() < want) parts.push_back(parts.front());
  Mat<T> out(p.n() * static_cast<Eigen::Index>(parts.size()), p.dv());
  for (std::size_t i = 0; i < parts.size(); ++i) out.middleRows(static_cast<Eigen::Index>(i) * p.n(), p.n()) = parts[i];
  return out;
}
template Mat<fp61> run_stacked(const FormRef&, const Problem<fp61>&, const Options&, const ParamSpace&);
template Mat<rational> run_stacked(const FormRef&, const Problem<rational>&, const Options&, const ParamSpace&);
template Mat<double> run_stacked(const FormRef&, const Problem<double>&, const Options&, const ParamSpace&);
template Mat<mpfr256> run_stacked(const FormRef&, const Problem<mpfr256>&, const Options&, const ParamSpace&);

int identity_degree(const std::string& op, Eigen::Index n, const ParamSpace& space) {
  // Inputs: the operator's degree in (Q, K, V) (core/operators.hpp), +1 for λ. Decay adds powers of γ: ≤ 3n
  // covers every form here (the paper's decayed monoids multiply up to ρ² · γ^n). Normalized identities are
  // cross-multiplied: num₁(den₂ + ε) − num₂(den₁ + ε), degree ≤ 2·(base + 1).
  int base = operator_info(op).degree;
  if (space.ridge) base += 1;
  if (space.decay) base += 3 * static_cast<int>(n);
  return space.normalized ? 2 * (base + 1) : base;
}

std::vector<Shape> identity_shapes(bool quick) {
  std::vector<Shape> all{{1, 1, 1}, {2, 2, 1}, {3, 1, 2}, {5, 3, 2}, {7, 2, 3}, {11, 4, 3}, {17, 5, 2}};
  if (quick) all.resize(4);
  return all;
}

nlohmann::json counterexample_json(const Counterexample& c, const std::string& options, const std::string& lhs_name,
                                   const std::string& rhs_name) {
  auto mat = [](const Mat<rational>& m) {
    nlohmann::json rows = nlohmann::json::array();
    for (Eigen::Index i = 0; i < m.rows(); ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (Eigen::Index j = 0; j < m.cols(); ++j) row.push_back(format_rational(m(i, j)));
      rows.push_back(row);
    }
    return rows;
  };
  nlohmann::json j;
  j["n"] = c.inputs.n();
  j["d"] = c.inputs.d();
  j["dv"] = c.inputs.dv();
  j["options"] = options;
  j["Q"] = mat(c.inputs.Q);
  j["K"] = mat(c.inputs.K);
  j["V"] = mat(c.inputs.V);
  j["lhs_name"] = lhs_name;
  j["rhs_name"] = rhs_name;
  j["lhs"] = mat(c.lhs);
  j["rhs"] = mat(c.rhs);
  for (Eigen::Index i = 0; i < c.lhs.size() && i < c.rhs.size(); ++i)
    if (c.lhs(i) != c.rhs(i)) {
      j["first_difference"] = {{"row", i % c.lhs.rows()}, {"col", i / c.lhs.rows()}};
      break;
    }
  return j;
}

namespace {

Options field_options(const ParamSpace& space, std::mt19937_64& rng) {
  Options o;
  if (space.decay) o.gamma = field_uniform_parameter(rng);
  if (space.normalized) {
    o.normalized = true;
    o.eps = field_uniform_parameter(rng);
  }
  if (space.ridge) o.ridge = field_uniform_parameter(rng);
  return o;
}

Options rational_options(const ParamSpace& space) {
  Options o;
  if (space.decay) o.gamma = rational(1, 2);
  if (space.normalized) {
    o.normalized = true;
    o.eps = rational(1, 8);
  }
  if (space.ridge) o.ridge = rational(1, 2);
  return o;
}

std::string options_text(const Options& o) {
  return fmt::format("gamma={} normalized={} eps={} ridge={}", format_rational(o.gamma), o.normalized,
                     format_rational(o.eps), format_rational(o.ridge));
}

std::string bound_text(const IdentityOutcome& r) {
  return fmt::format("≤ 2^{:.0f} (D≤{}, S=2^61−1, T≥{} per shape, {} shapes, N={} entries)", std::floor(r.log2_bound),
                     r.degree, r.points, r.shapes, r.identities);
}

ClaimResult finish(IdentityOutcome id, const std::string& method, std::optional<Counterexample> cx,
                   const std::string& cx_options, const std::string& lhs_name, const std::string& rhs_name) {
  ClaimResult r;
  r.method = method;
  r.evidence["identity_test"] = {{"holds", id.holds},
                                 {"points_per_shape", id.points},
                                 {"shapes", id.shapes},
                                 {"degree_bound", id.degree},
                                 {"entries", id.identities}};
  if (id.holds) {
    r.verdict = ClaimVerdict::holds;
    r.bound = bound_text(id);
    r.evidence["identity_test"]["log2_false_pass_probability"] = id.log2_bound;
  } else {
    r.verdict = ClaimVerdict::fails;
    r.bound = "exact mismatch (proof)";
    r.evidence["identity_test"]["mismatch"] = id.failure;
    if (cx)
      r.counterexample = counterexample_json(*cx, cx_options, lhs_name, rhs_name);
    else
      r.counterexample = {{"field_mismatch", id.failure}};
  }
  return r;
}

}  // namespace

ClaimResult check_equal(const FormRef& lhs, const FormRef& rhs, const ParamSpace& space, const LedgerContext& ctx,
                        const std::string& method_note) {
  for (const FormRef* f : {&lhs, &rhs})
    if (!registry<fp61>().try_find(f->op, f->form, f->variant)) {
      ClaimResult r;
      r.verdict = ClaimVerdict::inconclusive;
      r.method = "form " + f->name() + " is not implemented in this build";
      return r;
    }
  IdentityPlan plan;
  plan.shapes = identity_shapes(ctx.quick);
  plan.degree = [&](const Shape& s) { return identity_degree(lhs.op, s.n, space); };
  FieldEvaluation field = [&](const Shape& s, std::mt19937_64& rng) {
    Problem<fp61> p = field_problem(s, rng());
    Options o = field_options(space, rng);
    return std::make_pair(run_stacked(lhs, p, o, space), run_stacked(rhs, p, o, space));
  };
  IdentityOutcome id = test_identity(plan, field, ctx.seed);
  std::optional<Counterexample> cx;
  const Options ropt = rational_options(space);
  if (!id.holds)
    cx = find_counterexample([&](const Problem<rational>& p) {
      return std::make_pair(run_stacked(lhs, p, ropt, space), run_stacked(rhs, p, ropt, space));
    });
  std::string method = fmt::format("identity test {} = {} in F_p over {}", lhs.name(), rhs.name(), space.describe());
  if (!method_note.empty()) method += "; " + method_note;
  ClaimResult r = finish(id, method, cx, options_text(ropt), lhs.name(), rhs.name());

  // Floating-point evidence: the lhs form in double and in MPFR against the rhs in MPFR, on Gaussian
  // inputs of a moderate shape, with γ = 0.95 / ε = 1e-3 / λ = 0.1 where the space varies them.
  Options fo;
  if (space.decay) fo.gamma = rational(19, 20);
  if (space.normalized) {
    fo.normalized = true;
    fo.eps = rational(1, 1000);
  }
  if (space.ridge) fo.ridge = rational(1, 10);
  const Problem<double> g = gaussian_problem({ctx.quick ? 16 : 64, 8, 8}, ctx.seed);
  ParamSpace one = space;
  one.chunks = {5};  // several chunks at n = 64, so chunk and scan forms are exercised across chunk boundaries
  one.threads = {1};
  Mat<mpfr256> rhs_mp = run_stacked(rhs, convert_problem<mpfr256>(g), fo, one);
  ErrorStats ed = compare_to(run_stacked(lhs, convert_problem<double>(g), fo, one), rhs_mp);
  ErrorStats em = compare_to(run_stacked(lhs, convert_problem<mpfr256>(g), fo, one), rhs_mp);
  r.evidence["float_evidence"] = {{"shape", fmt::format("n={} d=8 dv=8 gaussian, chunk 5", g.n())},
                                  {"options", options_text(fo)},
                                  {"double_vs_mpfr_normwise_rel", ed.normwise_rel},
                                  {"double_in_units_of_u", ed.in_units_of_u},
                                  {"mpfr_vs_mpfr_normwise_rel", em.normwise_rel}};
  return r;
}

ClaimResult check_custom(const CustomSides& sides, const std::vector<Shape>& shapes, const LedgerContext& ctx,
                         const std::string& method) {
  IdentityPlan plan;
  plan.shapes = shapes;
  plan.degree = sides.degree;
  IdentityOutcome id = test_identity(plan, sides.field, ctx.seed);
  std::optional<Counterexample> cx;
  if (!id.holds && sides.rational_eval) cx = find_counterexample(sides.rational_eval);
  return finish(id, method, cx, "see method", sides.lhs_name, sides.rhs_name);
}

PowerFit fit_power(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t k = x.size();
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < k; ++i) {
    double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  PowerFit f;
  f.exponent = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  f.intercept = (sy - f.exponent * sx) / k;
  double ss = 0;
  for (std::size_t i = 0; i < k; ++i) {
    double e = std::log(y[i]) - (f.intercept + f.exponent * std::log(x[i]));
    ss += e * e;
  }
  f.rms_residual = std::sqrt(ss / k);
  const double spread = sxx - sx * sx / k;  // Σ (log x − mean)²
  f.exponent_std_error = k > 2 && spread > 0 ? std::sqrt(ss / (k - 2) / spread) : INFINITY;
  return f;
}

GrowthVerdict decide_growth(const std::function<PowerFit()>& measure, double expected, double tol,
                            bool upper_bound_only) {
  constexpr double kNoisy = 0.25;  // rms log residual above which a fit decides nothing
  GrowthVerdict v;
  auto load = [] { return fmt::format("{:.1f}", build_info::load_1min()); };
  // How far past the claim's tolerance the exponent lies, in standard errors (≤ 0: within it).
  auto miss = [&](const PowerFit& f) {
    const double over = upper_bound_only ? f.exponent - (expected + tol) : std::abs(f.exponent - expected) - tol;
    return over <= 0 ? 0.0 : over / f.exponent_std_error;
  };
  auto describe = [](const PowerFit& f) {
    return fmt::format("exponent {:.3f} ± {:.3f} (rms {:.3f})", f.exponent, f.exponent_std_error, f.rms_residual);
  };
  const std::string load_before = load();
  // By value: the repeat's push_back below may move the vector's storage.
  v.fits.push_back(measure());
  const PowerFit first = v.fits.front();
  if (first.rms_residual > kNoisy) {
    v.verdict = ClaimVerdict::inconclusive;
    v.reason = fmt::format("the fit is too noisy to decide ({}; rms > {}) at load {} → {}", describe(first), kNoisy,
                           load_before, load());
    return v;
  }
  if (miss(first) <= 0) {
    v.verdict = ClaimVerdict::holds;
    return v;
  }
  v.fits.push_back(measure());  // a failure: measured again before it is believed
  const PowerFit again = v.fits.back();
  const bool reproduced = again.rms_residual <= kNoisy && miss(first) > 2 && miss(again) > 2;
  v.verdict = reproduced ? ClaimVerdict::fails : ClaimVerdict::inconclusive;
  v.reason = fmt::format("{}: first {}, repeat {} at load {} → {}",
                         reproduced ? "the failure reproduced"
                                    : "a failure that did not reproduce beyond twice its "
                                      "standard error in a repeat",
                         describe(first), describe(again), load_before, load());
  return v;
}

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

// Thread CPU time, not wall time: on a shared machine other processes stretch wall time but not the
// CPU time this thread spends (cache interference remains). Each sample repeats f until it has run for
// at least 20 ms, so short runs are not dominated by timer resolution and scheduling.
double median_seconds(const std::function<void()>& f, int repeats) {
  f();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    int calls = 0;
    const double start = thread_cpu_seconds();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = thread_cpu_seconds() - start;
    } while (elapsed < 0.02);
    t.push_back(elapsed / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace hla::verify
