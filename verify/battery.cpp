// The battery behind `hla verify` and hla_harness.verify (battery.hpp).
#include "verify/battery.hpp"

#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/inputs.hpp"
#include "core/operators.hpp"
#include "core/parse.hpp"
#include "verify/diagnosis.hpp"
#include "verify/driver.hpp"
#include "verify/precision.hpp"

namespace hla::verify::ext {
namespace {

using json = nlohmann::json;

// A random case whose error exceeds the bound by a normwise relative error above this is not a precision
// problem: no float32-or-better arithmetic loses 5% of every output.
constexpr double kNotRounding = 0.05;
// ... and beyond this, not in any format either (the leading digit of the largest entries wrong), even where the
// format bound is vacuous: a long case's gradient bound at bf16's u has γ_h = ∞, which once let a dq twice the
// right one read as "lower-precision (consistent with TF32 products)" (audit, 2026-12-04).
constexpr double kNoDigit = 0.5;

// Exact cases up to this n take part in the diagnosis of every candidate; longer ones only in that of
// chunk-dependent candidates (the short ones decide the rest, and rationals at n = 300 are slow).
constexpr Eigen::Index kDiagnosisMaxN = 16;
// File mode has one case, the user's own: it is worth seconds of exact arithmetic at a larger n.
constexpr Eigen::Index kGivenDiagnosisMaxN = 64;

// One returned matrix (o, or with --grad dq, dk, dv) against what it must be.
struct MatrixCheck {
  double worst_ratio = 0;  // max over entries of |got − expected| / bound
  Eigen::Index row = -1, col = -1;
  double expected = 0, got = 0;
  double max_err = 0, max_ref = 0, max_bound = 0;
  double worst_format_ratio = 0;  // max |got − expected| / format_bound (where a precision problem ends)
  // Entries whose bound is +∞ (a normalizer within its own rounding error of 0, or a depth beyond the arithmetic's
  // precision, γ_h = ∞): no rounding argument decides them, so they count as within bound and are reported apart.
  long entries = 0, unbounded = 0;
  bool mismatch() const { return worst_ratio > 1; }
  double normwise() const { return max_ref > 0 ? max_err / max_ref : max_err; }
  // Beyond the bound by more than any rounding explains: kNotRounding normwise and beyond the format bound.
  bool far() const {
    return mismatch() && normwise() > kNotRounding && (worst_format_ratio > 1 || normwise() >= kNoDigit);
  }
};

MatrixCheck check_matrix(const Mat<mpfr256>& want, const Mat<double>& bound, const Mat<double>& format_bound,
                         const Mat<double>& got) {
  MatrixCheck k;
  for (Eigen::Index t = 0; t < want.rows(); ++t)
    for (Eigen::Index j = 0; j < want.cols(); ++j) {
      // NaN or Inf where the operator is finite is a wrong value (0/0 from a missing ε, say): the
      // implementation answered, and differs there.
      const bool finite = std::isfinite(got(t, j));
      const double err = finite ? abs(mpfr256(got(t, j)) - want(t, j)).convert_to<double>() : INFINITY;
      const double ref = abs(want(t, j)).convert_to<double>();
      const double b = bound(t, j);
      ++k.entries;
      if (std::isinf(b)) ++k.unbounded;
      k.max_err = std::max(k.max_err, err);
      k.max_ref = std::max(k.max_ref, ref);
      if (std::isfinite(b)) k.max_bound = std::max(k.max_bound, b);
      const double ratio = !finite ? INFINITY : err == 0 ? 0 : std::isinf(b) ? 0 : b > 0 ? err / b : INFINITY;
      if (format_bound.size()) {
        const double fb = format_bound(t, j);
        const double fr = !finite ? INFINITY : err == 0 ? 0 : std::isinf(fb) ? 0 : fb > 0 ? err / fb : INFINITY;
        k.worst_format_ratio = std::max(k.worst_format_ratio, fr);
      }
      if (ratio > k.worst_ratio) {
        k.worst_ratio = ratio;
        k.row = t;
        k.col = j;
        k.expected = want(t, j).convert_to<double>();
        k.got = got(t, j);
      }
    }
  return k;
}

// A case's whole check. Its MatrixCheck part is the worst of the returned matrices (`which`); `parts` has each.
struct CaseCheck : MatrixCheck {
  bool answered = false;
  std::string error;
  std::string which = "o";
  std::vector<std::pair<std::string, MatrixCheck>> parts;
  // The returned state (when the case asked for it): the first entry beyond its bound, and normwise sizes.
  std::string state_problem;
  std::string state_part;
  Eigen::Index state_row = -1, state_col = -1;
  double state_expected = 0, state_got = 0;
  double state_max_err = 0, state_max_ref = 0;
  bool output_mismatch() const { return mismatch(); }
  bool any_mismatch() const { return output_mismatch() || !state_problem.empty(); }
  double state_normwise() const { return state_max_ref > 0 ? state_max_err / state_max_ref : state_max_err; }
  bool far() const {
    for (const auto& [name, m] : parts)
      if (m.far()) return true;
    return !state_problem.empty() && (state_part.empty() || state_normwise() > kNotRounding);
  }
  const MatrixCheck* part(const std::string& name) const {
    for (const auto& [n, m] : parts)
      if (n == name) return &m;
    return nullptr;
  }
};

CaseCheck check_case(const Case& c, const Outcome& o, const Request& req) {
  CaseCheck k;
  if (!o.error.empty()) {
    k.error = o.error;
    return k;
  }
  k.answered = true;
  k.parts.emplace_back("o", check_matrix(c.expected, c.bound, c.format_bound, o.O));
  if (req.grad && c.dO.size()) {
    const GradientValues& e = c.expected_grad;
    const GradientBounds &b = c.grad_bound, &f = c.grad_format_bound;
    k.parts.emplace_back("dq", check_matrix(e.dQ, b.dQ, f.dQ, o.dQ));
    k.parts.emplace_back("dk", check_matrix(e.dK, b.dK, f.dK, o.dK));
    k.parts.emplace_back("dv", check_matrix(e.dV, b.dV, f.dV, o.dV));
    // ∂L/∂γ with --gates, when the implementation gave it (dgamma.npy is optional)
    if (o.dgamma.size() && e.dgamma.size())
      k.parts.emplace_back("dgamma", check_matrix(e.dgamma, b.dgamma, f.dgamma, o.dgamma));
    // ∂L/∂state_in, when the implementation gave it and a bound exists (unnormalized options)
    for (const auto& [name, got] : o.dstate_in.parts)
      for (const auto& [bn, bm] : b.dstate.parts)
        if (bn == name) k.parts.emplace_back("dstate_in." + name, check_matrix(e.dstate.at(name), bm, bm, got));
  }
  for (const auto& [name, m] : k.parts)
    if (m.worst_ratio > k.worst_ratio || (name == "o" && k.which == "o")) {
      static_cast<MatrixCheck&>(k) = m;
      k.which = name;
    }
  if (c.want_state && req.state) {
    for (const auto& [name, want] : c.expected_state.parts) {
      const Mat<double>* got = nullptr;
      for (const auto& [n2, m] : o.state_out.parts)
        if (n2 == name) got = &m;
      if (!got) {
        if (k.state_problem.empty()) k.state_problem = "state_out has no part '" + name + "'";
        continue;
      }
      const Mat<double>& bound = c.state_bound.at(name);
      for (Eigen::Index i = 0; i < want.size(); ++i) {
        const double g = (*got)(i);
        const double err = std::isfinite(g) ? abs(mpfr256(g) - want(i)).convert_to<double>() : INFINITY;
        k.state_max_err = std::max(k.state_max_err, err);
        k.state_max_ref = std::max(k.state_max_ref, abs(want(i)).convert_to<double>());
        if (err > bound(i) && k.state_problem.empty()) {
          k.state_part = name;
          k.state_row = i % want.rows();
          k.state_col = i / want.rows();
          k.state_expected = want(i).convert_to<double>();
          k.state_got = g;
          k.state_problem = fmt::format("state_out part '{}' entry ({}, {}): expected {:.17g}, got {:.17g}", name,
                                        k.state_row, k.state_col, k.state_expected, g);
        }
      }
    }
  }
  return k;
}

// Does this check prove that the implementation computes another function? On a sharp case (exact for the
// declared arithmetic) any excess over the bound does; elsewhere only an error beyond rounding (far()).
bool proves_difference(const Case& c, const CaseCheck& k) {
  return k.answered && (c.sharp ? k.output_mismatch() : k.far());
}
bool part_proves_difference(const Case& c, const MatrixCheck& m) { return c.sharp ? m.mismatch() : m.far(); }

// JSON has no NaN or Inf: a non-finite number is written as the string "NaN", "Infinity" or "-Infinity"
// (as Python's json module reads them back with parse_constant, and as a reader sees at a glance).
json number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}
double number_of(const json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string t = j.is_string() ? j.get<std::string>() : "NaN";
  return t == "Infinity" ? INFINITY : t == "-Infinity" ? -INFINITY : NAN;
}

json first_difference_json(const CaseCheck& k) {
  return {
      {"output", k.which}, {"row", k.row}, {"col", k.col}, {"expected", number(k.expected)}, {"got", number(k.got)}};
}
json random_entry_json(const Case& c, const CaseCheck& k, const Request& req) {
  const double u = precision_model(req.declared(), req.dtype).u_format;
  auto entry = [&](const MatrixCheck& m) {
    return json{{"worst_ratio", number(m.worst_ratio)},
                {"normwise_error", number(m.normwise())},
                {"bound_normwise", number(m.max_ref > 0 ? m.max_bound / m.max_ref : m.max_bound)},
                {"error_in_u", number(m.normwise() / u)}};
  };
  json j = entry(k);  // the worst of the returned matrices
  j["n"] = c.n();
  j["bound"] = c.bound_kind;
  if (k.parts.size() > 1) {
    j["worst_output"] = k.which;
    for (const auto& [name, m] : k.parts) j["by_output"][name] = entry(m);
  }
  return j;
}

json matrix_json(const Mat<double>& m) {
  json rows = json::array();
  for (Eigen::Index t = 0; t < m.rows(); ++t) {
    json r = json::array();
    for (Eigen::Index j = 0; j < m.cols(); ++j) r.push_back(number(m(t, j)));
    rows.push_back(r);
  }
  return rows;
}
// A state as {part: rows}, or "none" (a counterexample's state_in, so it can be re-run by hand).
json state_json(const NamedState<double>& st) {
  if (st.parts.empty()) return "none";
  json j = json::object();
  for (const auto& [name, m] : st.parts) j[name] = matrix_json(m);
  return j;
}
Mat<double> rounded(const Mat<mpfr256>& m) {
  return m.unaryExpr([](const mpfr256& x) { return x.convert_to<double>(); });
}

json options_json(const Options& o) {
  return {{"gamma", format_rational(o.gamma)},
          {"normalized", o.normalized},
          {"eps", format_rational(o.eps)},
          {"ridge", format_rational(o.ridge)}};
}

void compute_all(std::vector<Case>& cases, const Request& req) {
  std::string failure;
#pragma omp parallel for schedule(dynamic)
  for (std::size_t i = 0; i < cases.size(); ++i) {
    try {
      compute_expected(cases[i], req);
    } catch (const std::exception& e) {
#pragma omp critical
      failure = e.what();
    }
  }
  if (!failure.empty()) throw std::runtime_error("computing the expected outputs failed: " + failure);
}

// ---- counterexample search ---------------------------------------------------------------------------------
// Simplifications of a failing exact case: its prefix up to the first wrong row, one column of Q and K (or of
// V) fewer, one non-zero entry set to 0. Long cases only get the first two, so every round stays small.
// Under shape constraints lengths move by whole multiples and the widths stay.
std::vector<Case> simplifications(const Case& c, Eigen::Index first_bad_row, const Request& req) {
  std::vector<Case> out;
  // With --grad the upstream gradient dO follows the rows and the value columns of V.
  const bool grad = c.dO.size() > 0;
  auto variant = [&](Problem<double> p, const std::string& how, Mat<double> dO = {}) {
    Case s;
    s.kind = CaseKind::shrink;
    s.group = c.group;
    s.opt = c.opt;
    s.in = std::move(p);
    if (grad) s.dO = dO.size() ? std::move(dO) : c.dO;
    // The gates follow the rows: a shorter variant is a prefix, but for "drop-first", of the case's tokens.
    if (c.gamma.size()) s.gamma = how == "drop-first" ? c.gamma.tail(s.n()) : c.gamma.head(s.n());
    s.name = how;
    out.push_back(std::move(s));
  };
  const Eigen::Index n = c.n(), d = c.in.Q.cols(), dv = c.in.V.cols();
  const Eigen::Index step = req.n_multiple, prefix = req.fit_n(first_bad_row + 1);
  if (prefix < n)
    variant(slice_rows(c.in, 0, prefix), "prefix", grad ? Mat<double>(c.dO.topRows(prefix)) : Mat<double>());
  // Half the length too: a gradient's first wrong row need not be where a shorter sequence still fails.
  std::vector<Eigen::Index> parts{req.fit_n(n / 2)};
  if (req.fit_n(3 * n / 4) != parts.front()) parts.push_back(req.fit_n(3 * n / 4));
  for (const Eigen::Index len : parts)
    if (len >= 1 && len < n && len != prefix)
      variant(slice_rows(c.in, 0, len), "prefix-part", grad ? Mat<double>(c.dO.topRows(len)) : Mat<double>());
  if (prefix == n && n > 2 * step)
    variant(slice_rows(c.in, step, n), "drop-first", grad ? Mat<double>(c.dO.bottomRows(n - step)) : Mat<double>());
  // Wide cases first lose half their columns at once (a fault of the wide case, e.g. a feature tiling, shows
  // in a few rounds), then one column at a time.
  if (!req.fixed_widths && d > 4) {
    Problem<double> p = c.in;
    p.Q = c.in.Q.leftCols(d / 2);
    p.K = c.in.K.leftCols(d / 2);
    variant(p, "halve-qk-cols");
  }
  if (!req.fixed_widths && dv > 4) {
    Problem<double> p = c.in;
    p.V = c.in.V.leftCols(dv / 2);
    variant(p, "halve-v-cols", grad ? Mat<double>(c.dO.leftCols(dv / 2)) : Mat<double>());
  }
  for (Eigen::Index j = 0; !req.fixed_widths && d > 1 && j < d; ++j) {
    Problem<double> p = c.in;
    Mat<double> Q(n, d - 1), K(n, d - 1);
    Q << c.in.Q.leftCols(j), c.in.Q.rightCols(d - 1 - j);
    K << c.in.K.leftCols(j), c.in.K.rightCols(d - 1 - j);
    p.Q = Q;
    p.K = K;
    variant(p, "drop-qk-col");
  }
  for (Eigen::Index j = 0; !req.fixed_widths && dv > 1 && j < dv; ++j) {
    Problem<double> p = c.in;
    Mat<double> V(n, dv - 1);
    V << c.in.V.leftCols(j), c.in.V.rightCols(dv - 1 - j);
    p.V = V;
    Mat<double> dO;
    if (grad) {
      dO.resize(n, dv - 1);
      dO << c.dO.leftCols(j), c.dO.rightCols(dv - 1 - j);
    }
    variant(p, "drop-v-col", dO);
  }
  if (n <= 16 && c.in.Q.size() + c.in.K.size() + c.in.V.size() <= 256) {
    for (int which = 0; which < 3; ++which) {
      const Mat<double>& m = which == 0 ? c.in.Q : which == 1 ? c.in.K : c.in.V;
      for (Eigen::Index i = 0; i < m.size(); ++i) {
        if (m(i) == 0) continue;
        Problem<double> p = c.in;
        (which == 0 ? p.Q : which == 1 ? p.K : p.V)(i) = 0;
        variant(p, "zero-entry");
      }
    }
    for (Eigen::Index i = 0; grad && i < c.dO.size(); ++i) {
      if (c.dO(i) == 0) continue;
      Mat<double> dO = c.dO;
      dO(i) = 0;
      variant(c.in, "zero-upstream-entry", dO);
    }
  }
  return out;
}

// Smaller first: fewer tokens, then fewer columns in all (so halving dv beats dropping one of d's), then
// fewer non-zero entries.
std::tuple<Eigen::Index, Eigen::Index, Eigen::Index, long> size_key(const Case& c) {
  const long nnz = static_cast<long>((c.in.Q.array() != 0).count() + (c.in.K.array() != 0).count() +
                                     (c.in.V.array() != 0).count() + (c.dO.array() != 0).count());
  return {c.n(), 2 * c.in.Q.cols() + c.in.V.cols(), c.in.Q.cols(), nnz};
}

// An exact case whose outputs are wrong by more than any rounding could look like (kNotRounding normwise): its
// counterexample shows an O(1) difference. A wrong carry under strong gates errs by ~1e-5 relative on the same
// implementation (issue 47): a counterexample that looks like rounding.
bool clearly_wrong(const CaseCheck& k) {
  const MatrixCheck* o = k.part("o");
  return o && o->mismatch() && o->normwise() > kNotRounding;
}

// Where the counterexample search starts: the simplest failing option group (unnormalized before normalized,
// γ = 1 before decay, no ridge before ridge), then a clearly wrong case before one wrong by little, then the
// smallest case.
std::tuple<int, bool, std::tuple<Eigen::Index, Eigen::Index, Eigen::Index, long>> start_key(const Case& c,
                                                                                            const CaseCheck& k) {
  return {int(c.opt.gamma != 1) + int(c.opt.normalized) + int(c.opt.ridge != 0), !clearly_wrong(k), size_key(c)};
}

// The first row beyond its bound in any returned matrix (o; dq, dk, dv with --grad).
Eigen::Index first_bad_row(const Case& c, const Outcome& o) {
  std::vector<std::tuple<const Mat<mpfr256>*, const Mat<double>*, const Mat<double>*>> parts{
      {&c.expected, &c.bound, &o.O}};
  if (c.dO.size() && o.dQ.size())
    parts.insert(parts.end(), {{&c.expected_grad.dQ, &c.grad_bound.dQ, &o.dQ},
                               {&c.expected_grad.dK, &c.grad_bound.dK, &o.dK},
                               {&c.expected_grad.dV, &c.grad_bound.dV, &o.dV}});
  for (Eigen::Index t = 0; t < c.n(); ++t)
    for (const auto& [want, bound, got] : parts)
      for (Eigen::Index j = 0; j < want->cols(); ++j) {
        const double err = abs(mpfr256((*got)(t, j)) - (*want)(t, j)).convert_to<double>();
        if (!(err <= (*bound)(t, j))) return t;
      }
  return c.n() - 1;
}

json counterexample_json(const Case& c, const Outcome& o, const CaseCheck& k, int rounds) {
  json j = {{"case", c.name},
            {"n", c.n()},
            {"d", c.in.Q.cols()},
            {"dv", c.in.V.cols()},
            {"options", options_json(c.opt)},
            {"q", matrix_json(c.in.Q)},
            {"k", matrix_json(c.in.K)},
            {"v", matrix_json(c.in.V)},
            {"gamma", c.gamma.size() ? matrix_json(Mat<double>(c.gamma.transpose())) : json(nullptr)},
            {"expected", matrix_json(rounded(c.expected))},
            {"got", matrix_json(o.O)},
            {"first_difference", first_difference_json(k)},
            {"shrink_rounds", rounds}};
  if (o.slot.packed())  // where it sat in a batched call (an adapter's packing)
    j["slot"] = {{"b", o.slot.b}, {"h", o.slot.h}, {"batch", o.slot.batch}, {"heads", o.slot.heads}};
  if (k.output_mismatch()) {
    j["first_wrong_row"] = first_bad_row(c, o);
    j["relative_difference"] = number(k.part("o")->normwise());  // max |got − expected| / max |expected|
  }
  if (c.dO.size() && o.dQ.size()) {
    // the upstream gradient, and the returned gradient that differs most, expected and got
    j["do"] = matrix_json(c.dO);
    const std::string part = k.which.rfind("dstate_in.", 0) == 0 ? k.which.substr(10) : "";
    const auto pick = [&]() -> std::pair<const Mat<mpfr256>*, const Mat<double>*> {
      if (k.which == "dk") return {&c.expected_grad.dK, &o.dK};
      if (k.which == "dv") return {&c.expected_grad.dV, &o.dV};
      if (k.which == "dgamma") return {&c.expected_grad.dgamma, &o.dgamma};
      if (!part.empty()) return {&c.expected_grad.dstate.at(part), &o.dstate_in.at(part)};
      return {&c.expected_grad.dQ, &o.dQ};
    }();
    j["gradient"] = {{"output", k.which == "o" ? "dq" : k.which},
                     {"expected", matrix_json(rounded(*pick.first))},
                     {"got", matrix_json(*pick.second)}};
  }
  return j;
}

// ---- diagnosis ----------------------------------------------------------------------------------------------
// Candidates are evaluated on cases up to max_n tokens (the chunk-width ones, whose difference only shows past
// a chunk, on every case): in exact rationals where that is cheap, in float64 on long or wide cases
// (diagnosis.hpp says why the decision is the same).
constexpr Eigen::Index kRationalDiagnosisWork = 4096;  // n · d · (d + dv) up to which a case is diagnosed in rationals

bool diagnose_in_rationals(const Case& c) {
  return c.n() * c.in.Q.cols() * (c.in.Q.cols() + c.in.V.cols()) <= kRationalDiagnosisWork;
}

// One entry per chunk-dependent candidate, with every width it matched at ("…@w=8,16", "widths": [8, 16]),
// in place of one entry per width.
json merge_chunk_widths(std::vector<json>& found) {
  json matches = json::array();
  std::map<std::string, std::size_t> at_base;
  for (auto& f : found) {
    if (f.is_null()) continue;
    const std::string key = f["key"];
    const auto at = key.find("@w=");
    if (at == std::string::npos) {
      matches.push_back(std::move(f));
      continue;
    }
    const std::string base = key.substr(0, at), width = key.substr(at + 3);
    auto it = at_base.find(base);
    if (it == at_base.end()) {
      std::string what = f["description"];
      for (const std::string& pattern : {fmt::format("width {})", width), fmt::format("every {} tokens", width)}) {
        const auto p = what.find(pattern);
        if (p != std::string::npos)
          what.replace(p, pattern.size(), std::string(pattern).replace(pattern.find(width), width.size(), "w"));
      }
      f["description"] = what;
      f["widths"] = json::array({std::stoi(width)});
      at_base[base] = matches.size();
      matches.push_back(std::move(f));
    } else {
      json& m = matches[it->second];
      m["widths"].push_back(std::stoi(width));
      m["cases"] = std::max(m["cases"].get<int>(), f["cases"].get<int>());
    }
  }
  for (auto& m : matches)
    if (m.contains("widths")) {
      std::string list;
      for (const auto& w : m["widths"]) list += fmt::format("{}{}", list.empty() ? "" : ",", w.get<int>());
      const std::string key = m["key"];
      m["key"] = key.substr(0, key.find("@w=")) + "@w=" + list;
    }
  return matches;
}

// A candidate's output r on case c against what the implementation returned (rows [0, rows)): equal stays true while
// every entry is within the case's bound (plus a float32-level margin), distinguishable becomes true where the
// candidate is beyond it from the operator itself.
void compare_candidate(const Case& c, const Outcome& out, const Mat<double>& r, bool in_rationals, Eigen::Index rows,
                       bool& equal, bool& distinguishable) {
  const Mat<double>& got = out.O;
  const double u = 1e3 * std::numeric_limits<float>::epsilon();
  // float64 candidates carry their own rounding, at most 2^-29 of the float32-level bound (diagnosis.hpp).
  const double own = in_rationals ? 1 : 1 + std::ldexp(1.0, -20);
  for (Eigen::Index t = 0; t < std::min(rows, got.rows()) && equal; ++t)
    for (Eigen::Index j = 0; j < got.cols() && equal; ++j) {
      const double want = r(t, j);
      const double tol =
          (std::isfinite(c.bound(t, j)) ? c.bound(t, j) + u * std::fabs(want) : u * std::fabs(want)) * own;
      if (!(std::fabs(got(t, j) - want) <= tol)) equal = false;  // NaN is never equal
      if (std::fabs(c.expected(t, j).convert_to<double>() - want) > tol) distinguishable = true;
    }
}

json diagnose(const std::string& op, const std::vector<const Case*>& cases, const std::vector<const Outcome*>& outs,
              const std::vector<bool>& spec_fails, Eigen::Index max_n = kDiagnosisMaxN) {
  const std::vector<Candidate<rational>> exact_cands = diagnosis_candidates<rational>(op);
  const std::vector<Candidate<double>> float_cands = diagnosis_candidates<double>(op);
  // The float64 candidate of index ci must be the rational one's (long cases are judged through it).
  bool aligned = exact_cands.size() == float_cands.size();
  for (std::size_t ci = 0; aligned && ci < exact_cands.size(); ++ci)
    aligned = exact_cands[ci].key == float_cands[ci].key;
  if (!aligned) throw std::logic_error("diagnosis: the rational and float64 candidate lists of " + op + " differ");
  std::vector<Problem<rational>> exact(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (diagnose_in_rationals(*cases[i])) exact[i] = exact_inputs(cases[i]->in);
  std::vector<json> found(exact_cands.size());
  const bool any_failure = std::find(spec_fails.begin(), spec_fails.end(), true) != spec_fails.end();
#pragma omp parallel for schedule(dynamic)
  for (std::size_t ci = 0; ci < exact_cands.size(); ++ci) {
    const Candidate<rational>& cand = exact_cands[ci];
    const bool by_width = cand.key.find("@w=") != std::string::npos;
    int applied = 0;
    // A candidate is judged on the cases it is evaluated on (exact arithmetic is costly beyond n = 16 for
    // the quadratic ones); when the implementation failed somewhere, the candidate must reproduce at least
    // one of those failures, or it explains nothing.
    bool equal = true, explains_a_failure = false, distinguishable = false;
    for (std::size_t i = 0; i < cases.size() && equal; ++i) {
      const Case& c = *cases[i];
      if (!by_width && c.n() > max_n) continue;
      const bool in_rationals = diagnose_in_rationals(c);
      std::optional<Mat<double>> r;
      try {
        if (in_rationals) {
          if (auto x = cand.eval(exact[i], c.opt))
            r = Mat<double>(x->unaryExpr([](const rational& v) { return to_double(v); }));
        } else {
          r = float_cands[ci].eval(c.in, c.opt);
        }
      } catch (const std::exception&) { r.reset(); }
      if (!r) continue;
      ++applied;
      if (spec_fails[i]) explains_a_failure = true;
      compare_candidate(c, *outs[i], *r, in_rationals, c.n(), equal, distinguishable);
    }
    // A mistake or another operator that coincides with the operator on every case it was tried on says
    // nothing (a correct implementation would "match" it); registered forms equal to it are listed.
    const bool registered = cand.key.find(':') == std::string::npos;  // not a mistake:, operator: or convention:
    if (equal && applied > 0 && (explains_a_failure || !any_failure) && (registered || distinguishable))
      found[ci] = {{"key", cand.key}, {"description", cand.description}, {"claim", cand.claim}, {"cases", applied}};
  }
  return merge_chunk_widths(found);
}

// The gated catalogue (diagnosis.hpp, gated_diagnosis_candidates) on the exact cases, in exact rationals on every case
// small enough for them and in float64 on the longer or wider ones where the candidate has a float64 form (the
// chunk-width candidates on every case, the others up to max_n tokens): listed as diagnose() lists the mistakes —
// equal on every case evaluated, reproducing a failure, distinguishable from SPEC.
json diagnose_gated(const std::string& op, const std::vector<const Case*>& cases,
                    const std::vector<const Outcome*>& outs, const std::vector<bool>& spec_fails,
                    Eigen::Index max_n = kDiagnosisMaxN) {
  const std::vector<GatedCandidate> cands = gated_diagnosis_candidates(op);
  std::vector<std::optional<GatedProblem<rational>>> exact(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (diagnose_in_rationals(*cases[i]))
      exact[i] = GatedProblem<rational>{exact_inputs(cases[i]->in),
                                        cases[i]->gamma.unaryExpr([](double x) { return rational(x); })};
  std::vector<json> found(cands.size());
  const bool any_failure = std::find(spec_fails.begin(), spec_fails.end(), true) != spec_fails.end();
#pragma omp parallel for schedule(dynamic)
  for (std::size_t ci = 0; ci < cands.size(); ++ci) {
    const GatedCandidate& cand = cands[ci];
    const bool by_width = cand.key.find("@w=") != std::string::npos;
    int applied = 0;
    bool equal = true, explains_a_failure = false, distinguishable = false;
    for (std::size_t i = 0; i < cases.size() && equal; ++i) {
      const Case& c = *cases[i];
      if ((!exact[i] && !cand.eval_double) || (!by_width && c.n() > max_n)) continue;
      std::optional<Mat<double>> r;
      try {
        if (exact[i]) {
          if (auto x = cand.eval(*exact[i], c.opt))
            r = Mat<double>(x->unaryExpr([](const rational& v) { return to_double(v); }));
        } else {  // too long or wide for rationals: the candidate in float64 (as diagnose's long cases)
          Problem<double> p = c.in;
          p.gates = c.gamma;
          r = cand.eval_double(p, c.opt);
        }
      } catch (const std::exception&) { r.reset(); }
      if (!r) continue;
      ++applied;
      if (spec_fails[i]) explains_a_failure = true;
      compare_candidate(c, *outs[i], *r, exact[i].has_value(), cand.last_row_undefined ? c.n() - 1 : c.n(), equal,
                        distinguishable);
    }
    if (equal && applied > 0 && (explains_a_failure || !any_failure) && distinguishable)
      found[ci] = {{"key", cand.key}, {"description", cand.description}, {"claim", cand.claim}, {"cases", applied}};
  }
  return merge_chunk_widths(found);
}

// A constant factor between the outputs and SPEC's, the most common convention difference between implementations:
// on every exact case got = c · SPEC's, with c one constant, or d^-1/2 or d^-1 of the case's head size d (a scale on
// the queries: an output is of degree (degree − 1)/2 in q, 2 for hla2, so fla's default q · d^-1/2 gives d^-1).
// Normalized, a scale s on q enters the numerator and the denominator alike and leaves ε / s^deg in place of ε
// (c = s^deg): judged by SPEC's value at that ε, in float64 (an exact case's A ≤ 2^10 keeps its error far below the
// case's bound). Listed when it explains a failure and differs from SPEC somewhere (c ≠ 1), as a mistake is.
std::optional<json> constant_factor(const std::string& op, const std::vector<const Case*>& cases,
                                    const std::vector<const Outcome*>& outs, const std::vector<bool>& spec_fails) {
  // the least-squares constant over the unnormalized cases
  double num = 0, den = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (cases[i]->opt.normalized) continue;
    const Mat<double> want = rounded(cases[i]->expected);
    if (outs[i]->O.rows() != want.rows() || outs[i]->O.cols() != want.cols()) return std::nullopt;
    num += outs[i]->O.cwiseProduct(want).sum();
    den += want.squaredNorm();
  }
  if (!(den > 0) || !std::isfinite(num)) return std::nullopt;
  const int q_degree = (operator_info(op).degree - 1) / 2;
  struct Hypothesis {
    std::string factor;
    std::function<double(double d)> c;
  };
  const double fitted = num / den;
  for (const Hypothesis& h : {Hypothesis{"d^-1/2", [](double d) { return 1 / std::sqrt(d); }},
                              Hypothesis{"d^-1", [](double d) { return 1 / d; }},
                              Hypothesis{fmt::format("{:.6g}", fitted), [fitted](double) { return fitted; }}}) {
    bool equal = true, explains = false, distinct = false;
    for (std::size_t i = 0; i < cases.size() && equal; ++i) {
      const Case& c = *cases[i];
      const double f = h.c(static_cast<double>(c.in.Q.cols()));
      if (!(f > 0) || !std::isfinite(f)) return std::nullopt;
      Mat<double> r = f * rounded(c.expected);
      if (c.opt.normalized) {
        if (c.opt.eps == 0) continue;  // a scale on q changes nothing there
        Options o = c.opt;
        o.eps = rational(from_rational<double>(c.opt.eps) / f);
        try {
          Problem<double> p = c.in;
          p.gates = c.gamma;
          r = c.gamma.size() ? registry<double>().find_exact(op, "serial")(p, o).O
                             : operator_value<double>(op, c.in, o);
        } catch (const std::exception&) { return std::nullopt; }
      }
      if (spec_fails[i]) explains = true;
      compare_candidate(c, *outs[i], r, false, c.n(), equal, distinct);
    }
    if (!equal || !explains || !distinct) continue;
    const bool by_d = h.factor.rfind("d^", 0) == 0;
    std::string what =
        fmt::format("outputs = {} x SPEC's on every exact case{}", h.factor, by_d ? ", d the head size" : "");
    if (by_d) {
      // the scale on q that gives it: c = s^deg
      const bool half = h.factor == "d^-1/2";
      const std::string s = q_degree == 1 ? h.factor : q_degree == 2 ? (half ? "d^-1/4" : "d^-1/2") : "";
      if (!s.empty())
        what += fmt::format(": queries scaled by {}{}", s,
                            s == "d^-1/2" ? " (the softmax-style scale, fla's default scale = K^-1/2)" : "");
    } else {
      what += ": a constant factor (a scale on q, k or v, or a normalization constant)";
    }
    return json{{"key", "convention:output-factor"},
                {"description", what},
                {"claim", ""},
                {"factor", h.factor},
                {"cases", static_cast<int>(cases.size())}};
  }
  return std::nullopt;
}

// What the returned gradients compute instead (gradients.hpp's candidates), per returned matrix, on the small
// exact cases (from the zero state): a candidate is listed for dq, dk or dv when it equals that matrix on every
// case it is evaluated on, reproduces at least one of its failures and differs from the true gradient somewhere.
json diagnose_gradients(const std::string& op, const std::vector<const Case*>& cases,
                        const std::vector<const Outcome*>& outs, const std::vector<const CaseCheck*>& checks) {
  const std::vector<GradientCandidate> cands = gradient_candidates(op);
  // Chunk-width candidates on every small-width case (their difference shows only past a chunk), the rest up
  // to kDiagnosisMaxN tokens.
  std::vector<std::size_t> use;
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (diagnose_in_rationals(*cases[i]) && cases[i]->state_in.parts.empty() && cases[i]->dO.size() &&
        outs[i]->dQ.size())
      use.push_back(i);
  std::vector<Problem<rational>> in(cases.size());
  std::vector<Mat<rational>> up(cases.size());
  for (std::size_t i : use) {
    in[i] = exact_inputs(cases[i]->in);
    up[i] = cases[i]->dO.unaryExpr([](double x) { return rational(x); });
  }
  const std::vector<std::string> names{"dq", "dk", "dv"};
  std::vector<std::array<json, 3>> found(cands.size());
#pragma omp parallel for schedule(dynamic)
  for (std::size_t ci = 0; ci < cands.size(); ++ci) {
    std::array<bool, 3> equal{true, true, true}, explains{false, false, false}, distinct{false, false, false};
    int applied = 0;
    const bool by_width = cands[ci].key.find("@w=") != std::string::npos;
    for (std::size_t i : use) {
      const Case& c = *cases[i];
      if (!by_width && c.n() > kDiagnosisMaxN) continue;
      std::optional<ExactGradients> g;
      try {
        g = cands[ci].eval(in[i], c.opt, up[i]);
      } catch (const std::exception&) { g.reset(); }
      if (!g) continue;
      ++applied;
      const std::array<const Mat<rational>*, 3> want{&g->dQ, &g->dK, &g->dV};
      const std::array<const Mat<double>*, 3> got{&outs[i]->dQ, &outs[i]->dK, &outs[i]->dV};
      const std::array<const Mat<mpfr256>*, 3> truth{&c.expected_grad.dQ, &c.expected_grad.dK, &c.expected_grad.dV};
      const std::array<const Mat<double>*, 3> bound{&c.grad_bound.dQ, &c.grad_bound.dK, &c.grad_bound.dV};
      const double u = 1e3 * std::numeric_limits<float>::epsilon();
      for (int o = 0; o < 3; ++o) {
        if (const MatrixCheck* m = checks[i]->part(names[o]); m && part_proves_difference(c, *m)) explains[o] = true;
        for (Eigen::Index e = 0; e < want[o]->size() && equal[o]; ++e) {
          const double w = to_double((*want[o])(e));
          const double tol = (std::isfinite((*bound[o])(e)) ? (*bound[o])(e) : 0.0) + u * std::fabs(w);
          if (!(std::fabs((*got[o])(e)-w) <= tol)) equal[o] = false;
          if (std::fabs((*truth[o])(e).convert_to<double>() - w) > tol) distinct[o] = true;
        }
      }
    }
    for (int o = 0; o < 3; ++o)
      if (applied > 0 && equal[o] && explains[o] && distinct[o])
        found[ci][o] = {{"key", cands[ci].key},
                        {"description", cands[ci].description},
                        {"claim", cands[ci].claim},
                        {"cases", applied}};
  }
  json out = json::object();
  for (int o = 0; o < 3; ++o) {
    std::vector<json> list;
    for (auto& f : found) list.push_back(f[o]);
    json merged = merge_chunk_widths(list);
    if (!merged.empty()) out[names[o]] = merged;
  }
  return out;
}

// The catalogue's state mistake (diagnosis.hpp) on every returned state beyond its bound: the padding width
// that explains them all, if one does.
std::optional<int> padding_width(const std::string& op, const std::vector<Case>& cases,
                                 const std::vector<Outcome>& outs, const std::vector<CaseCheck>& checks) {
  std::vector<ReturnedState> states;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    // a split's second half starts from the implementation's own state, its expected state from the true one
    if (!checks[i].answered || checks[i].state_problem.empty() || checks[i].state_part.empty() ||
        cases[i].kind == CaseKind::split_b)
      continue;
    ReturnedState s;
    s.opt = cases[i].opt;
    s.n = cases[i].n();
    s.d = cases[i].in.Q.cols();
    s.dv = cases[i].in.V.cols();
    for (const auto& [name, m] : cases[i].expected_state.parts) s.truth.parts.emplace_back(name, rounded(m));
    s.got = outs[i].state_out;
    s.bound = cases[i].state_bound;
    states.push_back(std::move(s));
  }
  return padding_decay_width(op, states);
}

// The finest format coarser than the declared arithmetic (precision.hpp, coarser_formats) that explains every case
// over its bound: each is judged again by that format's bounds, as if the implementation had declared it, and
// must fall within them (smallest cases first, so a wrong implementation is refused at its first case). A
// difference no format explains is another function.
std::optional<EmulatedFormat> explaining_format(const std::vector<Case>& cases, const std::vector<Outcome>& outs,
                                                const std::vector<CaseCheck>& checks, const Request& req) {
  // Only the forward and the state are explained: the gradients' bounds for a narrow format are proven, not
  // calibrated, and so loose that they would explain a wrong backward pass.
  std::vector<std::size_t> over;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (!checks[i].answered || !checks[i].any_mismatch()) continue;
    for (const auto& [name, m] : checks[i].parts)
      if (name != "o" && part_proves_difference(cases[i], m)) return std::nullopt;
    over.push_back(i);
  }
  std::sort(over.begin(), over.end(),
            [&](std::size_t a, std::size_t b) { return size_key(cases[a]) < size_key(cases[b]); });
  for (const EmulatedFormat& f : coarser_formats(req.declared())) {
    bool explained = true;
    for (std::size_t i : over) {
      Case c = cases[i];
      bound_as(c, req, f);
      // a narrow format explains only through its emulation (sharp or calibrated), never its loose proven bound
      const bool narrow = precision_model(f.precision, req.dtype).significand_bits < 24;
      if ((narrow && c.bound_kind == "proven") || check_case(c, outs[i], req).any_mismatch()) {
        explained = false;
        break;
      }
    }
    if (explained) return f;
  }
  return std::nullopt;
}

json precision_diagnosis_json(const std::optional<EmulatedFormat>& f) {
  if (!f)
    return {{"format", nullptr},
            {"description", "no emulated format explains it (fp32, TF32, fp16, bf16 products, a bf16 state)"}};
  return {{"format", f->key()}, {"description", "consistent with " + f->description()}};
}

// ---- the driver: rounds → tally → verdict → shrink → diagnose → report -------------------------------------

// The cases that differ in a packed call (Slot) called again alone, at most: one round of them.
constexpr std::size_t kAloneCases = 16;

// What the answers come to (the tally phase), kind of case by kind of case; the verdict phase reads it, and
// revises it when a coarser format explains every case over its bound.
struct Tally {
  std::vector<CaseCheck> checks;  // one per case
  json findings = json::array();  // protocol findings: failed rounds first, then one per distinct error
  // Exact cases, by option group: a group computes only when every case of it was answered and right. With --grad
  // the forward (o) and the backward (dq, dk, dv, dstate_in) are localized apart.
  std::vector<std::size_t> exact_idx;
  int exact_passed = 0, exact_failed = 0;
  std::optional<int> exact_explained;  // the failed ones, once a coarser format explains them
  double exact_worst = 0;
  bool exact_over = false;          // a decayed case beyond a narrow format's bound
  long entries = 0, unbounded = 0;  // returned entries checked, and those of them without a finite bound
  std::map<std::string, std::optional<Verdict>> groups, gradient_groups;
  // Random cases, per n.
  json random = json::array();
  bool random_far = false, random_over = false;
  // Carry checks (state handed in, and split-and-carry on the implementation).
  json carry = json::array();
  std::optional<std::size_t> first_carry_failure;
  bool carry_over = false;
  // Per returned matrix with --grad (o, dq, dk, dv, dstate_in.*).
  std::map<std::string, Verdict> outputs;
};

class ForwardBattery {
 public:
  ForwardBattery(Implementation& impl, const Request& req, const BatteryOptions& opts)
      : impl_(impl), req_(req), opts_(opts), rounds_("verify", opts.progress) {}

  json run() {
    run_rounds();
    tally();
    decide();
    shrink();
    diagnose_answers();
    diagnose_packing();
    add_chunk_hint();
    return report();
  }

 private:
  // One round; the implementation must answer every case.
  std::vector<Outcome> round(const std::vector<Case>& cases, const std::string& what) {
    std::vector<Outcome> out = rounds_.run(impl_, cases, req_, what);
    if (out.size() != cases.size()) {
      out.resize(cases.size());
      for (auto& o : out)
        if (o.error.empty() && o.O.size() == 0) o.error = "no answer for this case";
    }
    return out;
  }

  // Rounds: the battery; then, with --state, the split second halves, which start from the implementation's own
  // state.
  void run_rounds() {
    validate_request(req_);
    cases_ = make_cases(req_);
    compute_all(cases_, req_);
    outs_ = round(cases_, "battery");
    if (!req_.state) return;
    std::vector<Case> seconds;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      if (cases_[i].kind != CaseKind::split_a || !outs_[i].error.empty()) continue;
      auto whole = std::find_if(cases_.begin(), cases_.end(), [&](const Case& c) { return c.name == cases_[i].pair; });
      if (whole == cases_.end()) continue;
      seconds.push_back(make_split_b(*whole, cases_[i], outs_[i].state_out, req_));
    }
    if (seconds.empty()) return;
    compute_all(seconds, req_);
    std::vector<Outcome> more = round(seconds, "split second halves");
    cases_.insert(cases_.end(), seconds.begin(), seconds.end());
    outs_.insert(outs_.end(), more.begin(), more.end());
  }

  // Tally: every answer checked, then counted by kind of case.
  void tally() {
    Tally& t = tally_;
    t.checks.resize(cases_.size());
    for (std::size_t i = 0; i < cases_.size(); ++i) t.checks[i] = check_case(cases_[i], outs_[i], req_);
    for (const auto& r : rounds_.log())
      if (!r["failure"].get<std::string>().empty())
        t.findings.push_back(
            {{"case", "round: " + r["what"].get<std::string>()}, {"cases", r["cases"]}, {"error", r["failure"]}});
    for (auto& f : findings_of(cases_, outs_)) t.findings.push_back(std::move(f));
    tally_exact();
    tally_random();
    tally_carry();
    if (req_.grad) tally_outputs();
  }

  void tally_exact() {
    Tally& t = tally_;
    auto localize = [](std::optional<Verdict>& g, bool answered, bool bad) {
      if (!answered) {
        if (g != Verdict::differs) g = Verdict::incomplete;
      } else if (bad) {
        g = Verdict::differs;
      } else if (!g) {
        g = Verdict::computes;
      }
    };
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      if (cases_[i].kind != CaseKind::exact) continue;
      t.exact_idx.push_back(i);
      const CaseCheck& k = t.checks[i];
      const MatrixCheck* o = k.part("o");
      bool backward_bad = false;
      for (const auto& [name, m] : k.parts)
        backward_bad = backward_bad || (name != "o" && part_proves_difference(cases_[i], m));
      localize(t.groups[cases_[i].group], k.answered, o && part_proves_difference(cases_[i], *o));
      if (req_.grad) localize(t.gradient_groups[cases_[i].group], k.answered, backward_bad);
      if (!k.answered) continue;
      count_entries(k);
      const bool bad = proves_difference(cases_[i], k);
      if (!bad && k.output_mismatch()) t.exact_over = true;
      ++(bad ? t.exact_failed : t.exact_passed);
      t.exact_worst = std::max(t.exact_worst, k.worst_ratio);
    }
  }

  void count_entries(const CaseCheck& k) {
    for (const auto& [name, m] : k.parts) {
      tally_.entries += m.entries;
      tally_.unbounded += m.unbounded;
    }
  }

  void tally_random() {
    Tally& t = tally_;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      if (cases_[i].kind != CaseKind::random || !t.checks[i].answered) continue;
      const CaseCheck& k = t.checks[i];
      count_entries(k);
      t.random.push_back(random_entry_json(cases_[i], k, req_));
      if (k.output_mismatch()) t.random_over = true;
      if (k.far()) t.random_far = true;
    }
  }

  // Sharp carry cases (exact inputs, exact for the declared arithmetic) are judged like exact cases: any excess
  // differs; the others like random cases: an excess within rounding of a lower precision is a precision problem,
  // not another function.
  void tally_carry() {
    Tally& t = tally_;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      const CaseKind kind = cases_[i].kind;
      if (kind != CaseKind::carry && kind != CaseKind::split_a && kind != CaseKind::split_b && kind != CaseKind::whole)
        continue;
      if (!t.checks[i].answered) continue;
      const CaseCheck& k = t.checks[i];
      const bool differs = k.any_mismatch() && (cases_[i].sharp || k.far());
      const std::string result = differs ? "differs" : k.any_mismatch() ? "over-bound" : "ok";
      std::string detail;
      if (k.output_mismatch())
        detail = fmt::format("{} row {} col {}: expected {:.17g}, got {:.17g} ({:.3g} x the bound)",
                             k.which == "o" ? "output" : k.which, k.row, k.col, k.expected, k.got, k.worst_ratio);
      else if (!k.state_problem.empty())
        detail = k.state_problem;
      if (differs && !t.first_carry_failure) t.first_carry_failure = i;
      if (result == "over-bound") t.carry_over = true;
      t.carry.push_back({{"case", cases_[i].name}, {"kind", to_string(kind)}, {"result", result}, {"detail", detail}});
    }
  }

  // Per returned matrix: differs where a case proves a difference in it, lower-precision where it is only over its
  // bound, computes else.
  void tally_outputs() {
    for (std::size_t i = 0; i < cases_.size(); ++i)
      for (const auto& [name, m] : tally_.checks[i].parts) {
        Verdict& x = tally_.outputs.try_emplace(name, Verdict::computes).first->second;
        if (part_proves_difference(cases_[i], m))
          x = Verdict::differs;
        else if (m.mismatch() && x == Verdict::computes)
          x = Verdict::lower_precision;
      }
  }

  // Verdict. A difference on exact or carry cases that a coarser format explains (every case over its bound within
  // that format's bounds) is a lower precision, with the format named; one that no format explains, or a random
  // case beyond rounding, is another function.
  void decide() {
    Tally& t = tally_;
    verdict_ = decide_verdict(!t.findings.empty(), t.exact_failed > 0 || t.first_carry_failure || t.random_far,
                              t.random_over || t.carry_over || t.exact_over);
    if (verdict_ != Verdict::lower_precision && !(verdict_ == Verdict::differs && !t.random_far)) return;
    const std::optional<EmulatedFormat> f = explaining_format(cases_, outs_, t.checks, req_);
    if (f || verdict_ == Verdict::lower_precision) precision_diagnosis_ = precision_diagnosis_json(f);
    if (!f || verdict_ != Verdict::differs) return;
    explained_ = true;
    verdict_ = Verdict::lower_precision;
    t.exact_explained = t.exact_failed;
    t.exact_failed = 0;
    t.first_carry_failure.reset();
    for (auto* gs : {&t.groups, &t.gradient_groups})
      for (auto& [g, v] : *gs)
        if (v == Verdict::differs) v = Verdict::lower_precision;
    for (auto& x : t.carry)
      if (x["result"] == "differs") x["result"] = "over-bound";
    for (auto& [name, v] : t.outputs)
      if (v == Verdict::differs) v = Verdict::lower_precision;
  }

  // Shrink: the smallest counterexample, by re-running the implementation on simplified cases: from the smallest
  // failing exact case, or, when only random cases showed the difference, from the smallest of those (a case then
  // keeps failing while it stays far beyond rounding); else the first carry case that differs, as it is.
  void shrink() {
    if (verdict_ != Verdict::differs) return;
    const Tally& t = tally_;
    const bool from_random = t.exact_failed == 0 && t.random_far;
    std::optional<std::size_t> start;
    if (t.exact_failed > 0 || from_random)
      for (std::size_t i = 0; i < cases_.size(); ++i) {
        if (!t.checks[i].answered || cases_[i].kind != (from_random ? CaseKind::random : CaseKind::exact)) continue;
        if (!proves_difference(cases_[i], t.checks[i])) continue;
        if (!start || start_key(cases_[i], t.checks[i]) < start_key(cases_[*start], t.checks[*start])) start = i;
      }
    if (start) {
      counterexample_ = shrunk(*start);
      if (from_random)
        counterexample_["note"] = "from a random case: the error is far beyond rounding, but no exact case showed it";
    } else if (t.first_carry_failure) {
      counterexample_ = carry_counterexample(*t.first_carry_failure);
    }
  }

  // Up to opts.shrink_rounds rounds of simplifications of case `start`, each keeping the smallest that still
  // proves the difference.
  json shrunk(std::size_t start) {
    Case best = cases_[start];
    Outcome best_out = outs_[start];
    CaseCheck best_check = tally_.checks[start];
    // a clearly wrong start stays clearly wrong: a smaller case wrong by little would look like rounding
    const bool clear = clearly_wrong(best_check);
    int used = 0;
    for (int r = 1; r <= opts_.shrink_rounds; ++r) {
      std::vector<Case> trial = simplifications(best, first_bad_row(best, best_out), req_);
      if (trial.empty()) break;
      for (std::size_t j = 0; j < trial.size(); ++j)
        trial[j].name = fmt::format("shrink{}-{:03d}-{}", r, j, trial[j].name);
      compute_all(trial, req_);
      std::vector<Outcome> got = round(trial, fmt::format("shrink {}", r));
      used = r;
      std::size_t pick = trial.size();
      for (std::size_t j = 0; j < trial.size(); ++j) {
        CaseCheck k = check_case(trial[j], got[j], req_);
        if (!proves_difference(trial[j], k) || (clear && !clearly_wrong(k))) continue;
        if (pick == trial.size() || size_key(trial[j]) < size_key(trial[pick])) {
          pick = j;
          best_check = k;
        }
      }
      if (pick == trial.size()) break;
      best = trial[pick];
      best_out = got[pick];
    }
    return counterexample_json(best, best_out, best_check, used);
  }

  // The chunk hint (issue 47: it named the largest power of two, 32 for a carry bug of chunks 16 wide): the widths that
  // reproduce the evidence, smallest first — those at which a matched chunk candidate reproduces every exact case, or
  // else every power of two from 4 to 256 of which the counterexample's first wrong row is a multiple (the first row
  // of a chunk past the first). `source` says which.
  void add_chunk_hint() {
    if (!counterexample_.is_object()) return;
    std::set<long> from_matches;
    for (const auto& m : matches_)
      if (m.contains("widths"))
        for (const auto& w : m["widths"]) from_matches.insert(w.get<long>());
    json widths = json::array();
    if (!from_matches.empty()) {
      for (long w : from_matches) widths.push_back(w);
      counterexample_["chunk_hint"] = {{"widths", widths}, {"source", "diagnosis"}};
      return;
    }
    const long r = counterexample_.value("first_wrong_row", 0L);
    for (long w = 4; w <= 256 && r > 0; w *= 2)
      if (r % w == 0) widths.push_back(w);
    if (!widths.empty()) counterexample_["chunk_hint"] = {{"widths", widths}, {"source", "first wrong row"}};
  }

  json carry_counterexample(std::size_t i) const {
    const CaseCheck& k = tally_.checks[i];
    json c = counterexample_json(cases_[i], outs_[i], k, 0);
    if (!k.output_mismatch() && !k.state_part.empty())
      c["first_difference"] = {{"state_part", k.state_part},
                               {"row", k.state_row},
                               {"col", k.state_col},
                               {"expected", number(k.state_expected)},
                               {"got", number(k.state_got)}};
    c["state_in"] = state_json(cases_[i].state_in);
    if (!cases_[i].pair.empty()) c["note"] = "split-and-carry: compared with the whole sequence " + cases_[i].pair;
    for (const auto& x : tally_.carry)
      if (x["case"] == cases_[i].name) c["detail"] = x["detail"];
    return c;
  }

  // Diagnose: what the implementation computes instead, on the exact cases it answered.
  void diagnose_answers() {
    const Tally& t = tally_;
    if (!opts_.diagnose || t.exact_idx.empty()) return;
    std::vector<const Case*> dc;
    std::vector<const Outcome*> doo;
    std::vector<const CaseCheck*> dk;
    std::vector<bool> fails;  // of the forward (o): the gradients are diagnosed on their own
    bool o_failed = false;
    for (std::size_t i : t.exact_idx) {
      if (!t.checks[i].answered) continue;
      dc.push_back(&cases_[i]);
      doo.push_back(&outs_[i]);
      dk.push_back(&t.checks[i]);
      fails.push_back(!explained_ && part_proves_difference(cases_[i], *t.checks[i].part("o")));
      o_failed = o_failed || fails.back();
    }
    const bool exact_failed = t.exact_failed > 0;
    // (the gradient catalogue's candidates take a fixed γ: with gates a wrong backward is judged, not named)
    if (req_.grad && exact_failed && verdict_ != Verdict::error && !req_.gates)
      gradient_matches_ = diagnose_gradients(req_.op, dc, doo, dk);
    // A difference that no exact case shows (random or carry cases only) is not explained by what the exact cases
    // match: the report says so instead of listing the operator's own forms.
    if (verdict_ == Verdict::error) {
      diagnosis_note_ = "the protocol failed (see the findings): no diagnosis";
    } else if (verdict_ == Verdict::differs && !exact_failed) {
      diagnose_carry_or_random();
    } else if (!dc.empty()) {
      if (!o_failed)
        matches_.push_back({{"key", req_.op + "/reference/spec"},
                            {"description", "SPEC's " + req_.op},
                            {"claim", ""},
                            {"cases", static_cast<int>(dc.size())}});
      // Under a length constraint the smallest exact cases are longer: the diagnosis follows them.
      const Eigen::Index max_n = std::max<Eigen::Index>(kDiagnosisMaxN, req_.fit_n(1));
      json more =
          req_.gates ? diagnose_gated(req_.op, dc, doo, fails, max_n) : diagnose(req_.op, dc, doo, fails, max_n);
      if (o_failed)
        if (auto m = constant_factor(req_.op, dc, doo, fails)) more.push_back(std::move(*m));
      // no catalogued mistake explains the exact cases' failures: the long exact cases may show the underflow
      if (req_.gates && o_failed && more.empty())
        if (auto m = cumprod_underflow(true)) more.push_back(std::move(*m));
      for (auto& m : more) matches_.push_back(m);
    }
  }

  // Packing (issue 47): an implementation that called a batched op with several cases at once (python/: layout=, as
  // [B, T, H, K]) and got some of them wrong. The wrong ones (up to kAloneCases) are called again, each by itself; a
  // case wrong at its (b, h) of a call and right alone is a fault of the op's batch or head indexing, which no
  // counterexample shrunk from that case alone could show. Named by what the wrong outputs are: another case's of the
  // same call (heads or batches mixed up), or wrong only at some heads or batches (a stride or offset).
  void diagnose_packing() {
    if (verdict_ != Verdict::differs) return;
    std::vector<std::size_t> wrong;
    for (std::size_t i = 0; i < cases_.size() && wrong.size() < kAloneCases; ++i)
      if (outs_[i].slot.packed() && proves_difference(cases_[i], tally_.checks[i])) wrong.push_back(i);
    if (wrong.empty()) return;
    std::vector<Case> alone;
    for (std::size_t i : wrong) {
      alone.push_back(cases_[i]);
      alone.back().alone = true;
      alone.back().name += "-alone";
    }
    const std::vector<Outcome> got = round(alone, "packed cases alone");
    struct Placed {
      std::size_t i;
      std::optional<std::size_t> returned;  // the case of the same call whose output it holds
      std::optional<std::size_t> read;      // GQA: the lead case of the key/value head it read instead of its own
    };
    std::vector<Placed> placed;
    std::set<long> heads, batches;
    bool mixed_heads = false, mixed_batches = false;
    for (std::size_t a = 0; a < wrong.size(); ++a) {
      if (proves_difference(alone[a], check_case(alone[a], got[a], req_)) || !got[a].error.empty()) continue;
      const std::size_t i = wrong[a];
      const Slot& s = outs_[i].slot;
      Placed p{i, std::nullopt, std::nullopt};
      for (std::size_t j = 0; j < cases_.size() && !p.returned; ++j) {
        const Case& other = cases_[j];
        if (j == i || outs_[j].slot.call != s.call || other.expected.rows() != outs_[i].O.rows() ||
            other.expected.cols() != outs_[i].O.cols())
          continue;
        const MatrixCheck k = check_matrix(other.expected, other.bound, other.format_bound, outs_[i].O);
        if (!k.mismatch() && k.max_ref > 0) p.returned = j;
      }
      if (!p.returned && s.kv_group > 1) p.read = other_kv_head(i);
      if (p.returned) {
        const Slot& r = outs_[*p.returned].slot;
        mixed_heads = mixed_heads || (r.b == s.b && r.h != s.h);
        mixed_batches = mixed_batches || (r.h == s.h && r.b != s.b);
        if (r.b != s.b && r.h != s.h) mixed_heads = mixed_batches = true;
      }
      heads.insert(s.h);
      batches.insert(s.b);
      placed.push_back(p);
    }
    if (placed.empty()) return;
    auto listed = [](const std::string& one, const std::string& many, const std::set<long>& xs) {
      std::string t;
      for (long x : xs) t += (t.empty() ? " " : ", ") + std::to_string(x);
      return (xs.size() == 1 ? one : many) + t;
    };
    const Placed& first = placed.front();
    const Slot& s = outs_[first.i].slot;
    const Case& c = cases_[first.i];
    std::string example = fmt::format("{} is wrong at (b={}, h={}) of a call of B={}, H={} (T={}) and right alone",
                                      c.name, s.b, s.h, s.batch, s.heads, c.n());
    std::string key, what;
    const bool any_mixed = std::any_of(placed.begin(), placed.end(), [](const Placed& p) { return !!p.returned; });
    const auto misread = std::find_if(placed.begin(), placed.end(), [](const Placed& p) { return !!p.read; });
    if (!any_mixed && misread != placed.end()) {
      key = "layout:kv-heads-mixed";
      const Slot &at = outs_[misread->i].slot, &kv = outs_[*misread->read].slot;
      const long heads_kv = at.heads / at.kv_group;
      const bool tiled = std::all_of(placed.begin(), placed.end(), [&](const Placed& p) {
        const Slot& a = outs_[p.i].slot;
        return p.read && outs_[*p.read].slot.h / a.kv_group == a.h % (a.heads / a.kv_group);
      });
      what = fmt::format(
          "GQA: a query head read another key/value head's keys and values (query head {} of {} read "
          "key/value head {} of {}, not h // {} = {}){}",
          at.h, at.heads, kv.h / at.kv_group, heads_kv, at.kv_group, at.h / at.kv_group,
          tiled ? ": every such query head h read key/value head h % H_kv, the key/value heads tiled "
                  "(repeat) where they are interleaved (repeat_interleave)"
                : "");
    } else if (any_mixed) {
      key = mixed_heads && mixed_batches ? "layout:slots-mixed"
            : mixed_heads                ? "layout:heads-mixed"
                                         : "layout:batches-mixed";
      what = mixed_heads && mixed_batches ? "outputs returned at another (b, h) of the call"
             : mixed_heads                ? "heads mixed up: a head's outputs returned at another head of its batch"
                                          : "batches mixed up: a batch's outputs returned at another batch of its head";
      for (const Placed& p : placed)
        if (p.returned) {
          const Slot& r = outs_[*p.returned].slot;
          example +=
              fmt::format("; it holds {}'s output, the case at (b={}, h={})", cases_[*p.returned].name, r.b, r.h);
          break;
        }
    } else if (!heads.count(0)) {
      key = "layout:head-dependent";
      what = "wrong only at " + listed("head", "heads", heads) +
             " of a call (head 0 and cases called alone are right): a head "
             "stride or offset";
    } else if (!batches.count(0)) {
      key = "layout:batch-dependent";
      what = "wrong only at " + listed("batch", "batches", batches) +
             " of a call (batch 0 and cases called alone are right): a "
             "batch stride or offset";
    } else {
      key = "layout:slot-dependent";
      what = "wrong at some (b, h) of a call and right alone";
    }
    matches_.push_back({{"key", key},
                        {"description", fmt::format("{} ({} of {} packed cases that differ, called again alone, are "
                                                    "right; e.g. {})",
                                                    what, placed.size(), wrong.size(), example)},
                        {"claim", ""},
                        {"cases", static_cast<int>(placed.size())}});
  }

  // GQA: the lead case of another key/value head of case i's call and batch whose keys and values give i's output (SPEC
  // on i's queries with them), if one does. Cases that start from a given state are not tried.
  std::optional<std::size_t> other_kv_head(std::size_t i) const {
    const Slot& s = outs_[i].slot;
    if (!cases_[i].state_in.parts.empty()) return std::nullopt;
    for (std::size_t j = 0; j < cases_.size(); ++j) {
      const Slot& o = outs_[j].slot;
      if (o.call != s.call || o.b != s.b || o.h % s.kv_group != 0 || o.h / s.kv_group == s.h / s.kv_group) continue;
      Case t = cases_[i];
      t.in.K = cases_[j].in.K;
      t.in.V = cases_[j].in.V;
      t.gamma = cases_[j].gamma;
      try {
        compute_expected(t, req_);
      } catch (const std::exception&) { continue; }
      if (!check_matrix(t.expected, t.bound, t.format_bound, outs_[i].O).mismatch()) return j;
    }
    return std::nullopt;
  }

  // A state kept transposed: its [K, V] parts (hla2's C and G, linear's S, AHLA's P and E) returned, and read when
  // handed in, as [V, K] (fla's ops do with state_v_first=True: fla/ops/gla/fused_recurrent.py, the state_v_first
  // argument; fla/ops/common/chunk_h.py, `state_shape = (V, K) if state_v_first else (K, V)`). Seen only at d = dv
  // (else the shape is refused, with this name, exec.cpp transposed_hint). True when some case that returned a state
  // differs and every case that differs is right with those parts transposed: the state returned, and the outputs
  // and state from a state handed in taken as its transpose (a split's second half gets the implementation's own).
  bool transposed_state() const {
    std::vector<std::string> kv;
    for (const PartShape& p : state_layout(req_.op, 2, 3))
      if (p.rows == 2 && p.cols == 3) kv.push_back(p.name);
    auto is_kv = [&](const std::string& name) { return std::find(kv.begin(), kv.end(), name) != kv.end(); };
    auto transposed = [&](NamedState<double> st) {
      for (auto& [name, m] : st.parts)
        if (is_kv(name)) m = Mat<double>(m.transpose());
      return st;
    };
    int explained = 0;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      const CaseCheck& k = tally_.checks[i];
      if (!k.answered || !(k.any_mismatch() && (cases_[i].sharp || k.far()))) continue;
      Case t = cases_[i];
      if (!t.want_state || t.in.Q.cols() != t.in.V.cols() || outs_[i].state_out.parts.empty()) return false;
      if (!t.state_in.parts.empty()) {
        // SPEC's serial form from the transposed state, in float64: an exact case's A ≤ 2^10 and a random case's
        // proven bound leave float64's own error far inside the bound the case is judged with
        const NamedState<double> st = transposed(t.state_in);
        Problem<double> p = t.in;
        p.gates = t.gamma;
        try {
          const Run<double> r = registry<double>().find_exact(req_.op, "serial")(p, t.opt, &st);
          t.expected = r.O.unaryExpr([](double x) { return mpfr256(x); });
          t.expected_state.parts.clear();
          for (const auto& [name, m] : r.state.parts)
            t.expected_state.parts.emplace_back(name, m.unaryExpr([](double x) { return mpfr256(x); }));
        } catch (const std::exception&) { return false; }
      }
      Outcome o = outs_[i];
      o.state_out = transposed(o.state_out);
      const CaseCheck again = check_case(t, o, req_);
      if (again.any_mismatch()) return false;
      ++explained;
    }
    return explained > 0;
  }

  // Every exact case is right: the state mistakes of the catalogue, or a note that nothing was compared.
  void diagnose_carry_or_random() {
    const Tally& t = tally_;
    // (the padding mistake is decided on fixed-γ streaming forms: not with gates)
    const int w =
        t.first_carry_failure && !req_.gates ? padding_width(req_.op, cases_, outs_, t.checks).value_or(0) : 0;
    // with gates: the state handed in not decayed by the first token's gate
    std::vector<CarriedOutputs> carried;
    for (std::size_t i = 0; req_.gates && i < cases_.size(); ++i)
      if (!cases_[i].state_in.parts.empty() && t.checks[i].answered)
        carried.push_back({cases_[i].opt, cases_[i].in, cases_[i].gamma, cases_[i].state_in, outs_[i].O,
                           cases_[i].bound, cases_[i].expected});
    if (transposed_state())
      matches_.push_back(
          {{"key", "convention:transposed-state"},
           {"description",
            "the state's [K, V] parts returned and read as [V, K] (transposed; fla's state_v_first=True): "
            "right with them transposed"},
           {"claim", ""},
           {"cases", 0}});
    else if (!carried.empty() && state_in_undecayed(req_.op, carried))
      matches_.push_back({{"key", "mistake:state-in-undecayed"},
                          {"description",
                           "the state handed in is not decayed by the first token's gate (gamma_0 taken as 1 "
                           "for it): right from the zero state"},
                          {"claim", ""},
                          {"cases", static_cast<int>(carried.size())}});
    else if (w > 0)
      matches_.push_back(
          {{"key", fmt::format("mistake:padding-decays-state@w={}", w)},
           {"description", fmt::format("zero padding to a multiple of {} tokens that decays the returned state "
                                       "(every wrong state is the true one after the padding's zero tokens)",
                                       w)},
           {"claim", ""},
           {"cases", 0}});
    else if (auto m = !t.first_carry_failure && req_.gates ? cumprod_underflow(false) : std::nullopt)
      matches_.push_back(std::move(*m));
    else
      diagnosis_note_ = "every exact case is right; the difference shows only on " +
                        std::string(t.first_carry_failure ? "state-carry" : "random") +
                        " cases, which the candidates are not compared on";
  }

  // With gates: are the outputs of every random case (and exact case, with `exact`) right up to the token where the
  // gates' cumulative product over the call, P_t = γ_0 ⋯ γ_t computed in the dtype, leaves the dtype's normal range,
  // and wrong from there in some case?
  // That is the signature of decays formed as quotients P_t / P_j of cumulative products (the registered
  // chunked-naive-cumprod formulation; ledger gated.chunked.cumprod): exact in exact arithmetic, so no exact case can
  // name it, and lost exactly where P underflows. A signature, not a match: it is reported as consistent with it.
  std::optional<json> cumprod_underflow(bool exact) const {
    const Tally& t = tally_;
    int showing = 0;
    long first_n = 0, first_token = 0;
    double first_mass = 0;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      const Case& c = cases_[i];
      const bool kind = c.kind == CaseKind::random || (exact && c.kind == CaseKind::exact);
      if (!kind || !t.checks[i].answered || c.gamma.size() != c.n()) continue;
      // the first token whose cumulative product is below the smallest normal number of the dtype, and Σ −log γ there
      Eigen::Index ts = c.n();
      double mass = 0;
      const bool f32 = req_.dtype == DType::float32;
      double P = 1;  // rounded to float after every product in float32, as a float32 kernel forms it
      for (Eigen::Index s = 0; s < c.n() && ts == c.n(); ++s) {
        mass -= std::log(c.gamma(s));
        P = f32 ? static_cast<double>(static_cast<float>(P) * static_cast<float>(c.gamma(s))) : P * c.gamma(s);
        if (P < (f32 ? static_cast<double>(std::numeric_limits<float>::min()) : std::numeric_limits<double>::min()))
          ts = s;
      }
      const Mat<double>& got = outs_[i].O;
      bool after_bad = false;
      for (Eigen::Index r = 0; r < got.rows(); ++r)
        for (Eigen::Index j = 0; j < got.cols(); ++j) {
          const double b = c.bound(r, j), g = got(r, j);
          const bool within =
              std::isfinite(g) && (std::isinf(b) || abs(mpfr256(g) - c.expected(r, j)).convert_to<double>() <= b);
          if (within) continue;
          if (r < ts) return std::nullopt;  // wrong before P underflows: something else
          after_bad = true;
        }
      if (after_bad && showing++ == 0) {
        first_n = static_cast<long>(c.n());
        first_token = static_cast<long>(ts);
        first_mass = mass;
      }
    }
    if (showing == 0) return std::nullopt;
    return json{
        {"key", "formulation:naive-cumprod"},
        {"description",
         fmt::format("right up to the token where the gates' cumulative product over the call, P_t = gamma_0 ... "
                     "gamma_t in {}, leaves its normal range, and wrong from there ({} case{}; first at token {} "
                     "of n = {}, log mass sum(-log gamma) = {:.1f}): consistent with decays formed as quotients P_t / "
                     "P_j of cumulative products (registered as {}/chunked-naive-cumprod/naive), exact in exact "
                     "arithmetic and lost where P underflows; SPEC's stable chunk formulation takes exp of "
                     "within-chunk log-gate differences",
                     dtype_name(req_.dtype), showing, showing == 1 ? "" : "s", first_token, first_n, first_mass,
                     req_.op)},
        {"claim", "gated.chunked.cumprod"},
        {"cases", showing}};
  }

  // Report: the whole report (battery.hpp), and its summary.
  json report() const {
    const Tally& t = tally_;
    json localization = json::object(), gradient_localization = json::object(), outputs = json::object();
    for (const auto& [g, v] : t.groups) localization[g] = to_string(*v);
    for (const auto& [g, v] : t.gradient_groups) gradient_localization[g] = to_string(*v);
    for (const auto& [name, v] : t.outputs) outputs[name] = to_string(v);
    json exact = {{"cases", t.exact_idx.size()},
                  {"passed", t.exact_passed},
                  {"failed", t.exact_failed},
                  {"worst_ratio", number(t.exact_worst)}};
    if (t.exact_explained) exact["explained"] = *t.exact_explained;
    json report = report_core(verdict_, req_, matches_, counterexample_, t.findings);
    report["options"] = options_json(req_.opt);
    report["precision"] = precision_name(req_.declared());
    report["state"] = req_.state;
    report["max_n"] = req_.max_n;
    report["constraints"] = {{"fixed_d", req_.fixed_widths}, {"n_multiple", req_.n_multiple}};
    report["precision_diagnosis"] = precision_diagnosis_;
    report["diagnosis_note"] = diagnosis_note_;
    report["localization"] = localization;
    report["gradient_localization"] = gradient_localization;
    report["grad"] = req_.grad;
    report["outputs"] = outputs;
    report["gradient_matches"] = gradient_matches_;
    report["exact"] = exact;
    report["random"] = t.random;
    report["carry"] = t.carry;
    report["bounds"] = {{"entries", t.entries}, {"unbounded", t.unbounded}};
    rounds_.write(report);
    report["seed"] = req_.seed;  // the cases are a function of it: the report says how to draw them again
    report["gates"] = req_.gates ? json{{"range", {req_.gate_lo, req_.gate_hi}}} : json(nullptr);
    report["summary"] = summary_text(report);
    return report;
  }

  Implementation& impl_;
  const Request& req_;
  const BatteryOptions& opts_;
  Rounds rounds_;
  std::vector<Case> cases_;
  std::vector<Outcome> outs_;
  Tally tally_;
  Verdict verdict_ = Verdict::computes;
  json precision_diagnosis_ = nullptr;
  bool explained_ = false;  // a coarser format explains every case over its bound (decide)
  json counterexample_ = nullptr;
  json matches_ = json::array(), gradient_matches_ = json::object();
  std::string diagnosis_note_;
};

}  // namespace

json run_battery(Implementation& impl, const Request& req, const BatteryOptions& opts) {
  return ForwardBattery(impl, req, opts).run();
}

namespace {

bool mentions_shape(std::string error) {
  std::transform(error.begin(), error.end(), error.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (const char* word : {"shape", "size", "dimension", "multiple", "n=", "d=", "dv=", "n %", "block"})
    if (error.find(word) != std::string::npos) return true;
  return false;
}

// A case's options in full, as the counterexample line prints them.
// With per-token gates (--gates) the decay is theirs: "gates" in place of gamma=1.
std::string options_text(const json& o, bool gated) {
  return fmt::format(
      "{}, {}, ridge={}", gated ? "gates" : "gamma=" + o["gamma"].get<std::string>(),
      o["normalized"].get<bool>() ? "normalized eps=" + o["eps"].get<std::string>() : std::string("unnormalized"),
      o["ridge"].get<std::string>());
}

// The chunk hint (the counterexample's chunk_hint): every width that reproduces the evidence, smallest first.
std::string chunk_boundary_note(const json& hint) {
  if (!hint.is_object()) return "";
  const json& widths = hint["widths"];
  std::string list;
  for (std::size_t i = 0; i < widths.size(); ++i)
    list += fmt::format("{}{}", i == 0 ? "" : i + 1 == widths.size() ? " or " : ", ", widths[i].get<long>());
  if (hint["source"] == "diagnosis")
    return fmt::format("    chunk hint: the matches above reproduce every exact case if chunks are {} wide\n", list);
  return fmt::format("    chunk hint: the first wrong row starts a chunk if chunks are {} wide\n", list);
}

}  // namespace

std::string summary_text(const json& r) {
  std::ostringstream s;
  const json& o = r["options"];
  const bool gated = r.contains("gates") && !r["gates"].is_null();
  s << "hla verify: " << r["op"].get<std::string>() << " ("
    << (gated ? "gates" : "gamma=" + o["gamma"].get<std::string>())
    << (o["normalized"].get<bool>() ? ", normalized eps=" + o["eps"].get<std::string>() : "")
    << (o["ridge"].get<std::string>() != "0" ? ", ridge=" + o["ridge"].get<std::string>() : "") << "), "
    << r["dtype"].get<std::string>()
    << (r.contains("precision") && r["precision"] != (r["dtype"] == "float64" ? "fp64" : "fp32")
            ? " (declared " + r["precision"].get<std::string>() + " arithmetic)"
            : "")
    << (r.value("state", false) ? ", with state" : "") << (r.value("grad", false) ? ", with gradients" : "") << "\n";
  s << "verdict: " << r["verdict"].get<std::string>();
  if (r.contains("precision_diagnosis") && r["precision_diagnosis"].is_object())
    s << " (" << r["precision_diagnosis"]["description"].get<std::string>() << ")";
  s << "\n";
  if (r.contains("mode")) s << "  mode: " << r["mode"].get<std::string>() << "\n";
  if (r.contains("exact") && r["exact"]["cases"].get<int>() > 0)
    s << fmt::format("  exact cases: {} ({} within bound, {}{} beyond; worst {:.3g} x the bound)\n",
                     r["exact"]["cases"].get<int>(), r["exact"]["passed"].get<int>(),
                     r["exact"].contains("explained")
                         ? fmt::format("{} beyond it but within the format's, ", r["exact"]["explained"].get<int>())
                         : "",
                     r["exact"]["failed"].get<int>(), number_of(r["exact"]["worst_ratio"]));
  if (r.contains("localization") && !r["localization"].empty()) {
    const bool grad = r.contains("gradient_localization") && !r["gradient_localization"].empty();
    s << "  by option group (exact cases" << (grad ? "), forward o:" : "):");
    for (auto& [g, v] : r["localization"].items()) s << " " << g << "=" << v.get<std::string>();
    s << "\n";
    if (grad) {
      s << "  by option group (exact cases), backward:";
      for (auto& [g, v] : r["gradient_localization"].items()) s << " " << g << "=" << v.get<std::string>();
      s << "\n";
    }
    if (r["localization"].contains("base"))
      s << "  computes the operator at " << (gated ? "the gates" : "gamma = 1") << ", unnormalized, without ridge: "
        << (r["localization"]["base"] == "computes"          ? "yes"
            : r["localization"]["base"] == "differs"         ? "no"
            : r["localization"]["base"] == "lower-precision" ? "yes, within the rounding of a lower precision"
                                                             : "unknown (cases unanswered)")
        << "\n";
  }
  if (r.contains("outputs") && !r["outputs"].empty()) {
    s << "  by output:";
    for (const std::string name : {"o", "dq", "dk", "dv", "dgamma"})
      if (r["outputs"].contains(name)) s << " " << name << "=" << r["outputs"][name].get<std::string>();
    for (auto& [name, v] : r["outputs"].items())
      if (name.rfind("dstate_in.", 0) == 0) s << " " << name << "=" << v.get<std::string>();
    s << "\n";
  }
  if (r.contains("random") && !r["random"].empty()) {
    // u is the declared arithmetic's unit roundoff; the error is normwise: the largest error over the largest output.
    const std::string prec = r.value("precision", std::string(r["dtype"] == "float64" ? "fp64" : "fp32"));
    s << fmt::format(
        "  random cases: error = max |got - expected| / max |expected|, in u = {}'s unit roundoff 2^{}; "
        "bound: {}\n",
        prec, std::ilogb(precision_model(parse_precision(prec), DType::float64).u_format),
        r["random"][0].value("bound", std::string("proven")) == "calibrated"
            ? "what correct " + prec + " implementations err (an emulated " + prec + " kernel, with a margin)"
            : "the proven worst case");
    for (const auto& x : r["random"])
      s << fmt::format("  random n={:<5} error {:.3g} u, {:.3g} x the bound{}\n", x["n"].get<long>(),
                       number_of(x["error_in_u"]), number_of(x["worst_ratio"]),
                       x.value("bound", std::string()) == "calibrated" ? " (calibrated)" : "");
  }
  if (r.contains("carry")) {
    int ok = 0, over = 0, bad = 0;
    for (const auto& x : r["carry"]) (x["result"] == "ok" ? ok : x["result"] == "over-bound" ? over : bad)++;
    if (ok + over + bad)
      s << fmt::format("  state carry: {} ok, {}{} differ\n", ok,
                       over ? fmt::format("{} over the bound but within rounding of a lower precision, ", over) : "",
                       bad);
    for (const auto& x : r["carry"])
      if (x["result"] != "ok")
        s << "    " << x["case"].get<std::string>() << ": " << x["detail"].get<std::string>() << "\n";
  }
  if (r.contains("bounds") && r["bounds"].value("unbounded", 0L) > 0)
    s << fmt::format(
        "  unchecked: {} of the {} returned entries of the exact and random cases have no finite rounding bound (a "
        "normalizer within its own error of 0, or a depth beyond the format's precision); they count as within "
        "bound\n",
        r["bounds"]["unbounded"].get<long>(), r["bounds"]["entries"].get<long>());
  if (!r.value("diagnosis_note", std::string()).empty())
    s << "  diagnosis: " << r["diagnosis_note"].get<std::string>() << "\n";
  // A forward that computes the operator lists every registered form equal to it: the summary counts them.
  const json& ms = r["matches"];
  // With --grad the forward's matches are the output o's, beside dq's, dk's and dv's below.
  const std::string lead = r.value("grad", false) ? "  o matches " : "  matches ";
  const bool spec_first = !ms.empty() && ms[0]["key"].get<std::string>().find("/reference/spec") != std::string::npos;
  if (spec_first && ms.size() > 1)
    s << lead << ms[0]["key"].get<std::string>() << ": " << ms[0]["description"].get<std::string>() << " (and "
      << ms.size() - 1 << " registered forms equal to it on every exact case; --json lists them)\n";
  for (const auto& m : ms) {
    if (spec_first && ms.size() > 1) break;
    s << match_text(lead, m);
  }
  if (r.contains("gradient_matches"))
    for (const std::string name : {"dq", "dk", "dv"})
      if (r["gradient_matches"].contains(name))
        for (const auto& m : r["gradient_matches"][name]) s << match_text("  " + name + " matches ", m);
  if (!r["counterexample"].is_null()) {
    const json& c = r["counterexample"];
    s << fmt::format("  counterexample (n={}, d={}, dv={}, {}):\n", c["n"].get<long>(), c["d"].get<long>(),
                     c["dv"].get<long>(), options_text(c["options"], gated));
    const json& f = c["first_difference"];
    const std::string where = f.contains("state_part") ? "state part " + f["state_part"].get<std::string>() + " "
                              : f.value("output", std::string("o")) != "o" ? f["output"].get<std::string>() + " "
                                                                           : "";
    // first the entry that differs (for a state, the part), then the inputs when they are small enough to read
    s << fmt::format("    {} at {}row {}, col {}: expected {:.17g}, got {:.17g}\n",
                     f.contains("state_part") ? "first difference" : "worst difference", where, f["row"].get<long>(),
                     f["col"].get<long>(), number_of(f["expected"]), number_of(f["got"]));
    if (c.contains("first_wrong_row")) s << "    first wrong row " << c["first_wrong_row"].get<long>() << "\n";
    if (c.contains("slot"))
      s << fmt::format("    (at b={}, h={} of a call of B={}, H={})\n", c["slot"]["b"].get<long>(),
                       c["slot"]["h"].get<long>(), c["slot"]["batch"].get<long>(), c["slot"]["heads"].get<long>());
    s << chunk_boundary_note(c.value("chunk_hint", json()));
    const long entries = c["n"].get<long>() * (2 * c["d"].get<long>() + c["dv"].get<long>());
    if (c.contains("q") && entries <= 160) {
      s << "    q = " << c["q"].dump() << "\n    k = " << c["k"].dump() << "\n    v = " << c["v"].dump() << "\n";
      if (gated) s << "    gamma = " << c["gamma"].dump() << "\n";
      s << "    expected = " << c["expected"].dump() << "\n    got      = " << c["got"].dump() << "\n";
      if (c.contains("state_in") && c["state_in"].is_object()) s << "    state_in = " << c["state_in"].dump() << "\n";
      if (c.contains("gradient")) {
        const std::string g = c["gradient"]["output"];
        s << "    do = " << c["do"].dump() << "\n    expected " << g << " = " << c["gradient"]["expected"].dump()
          << "\n    got      " << g << " = " << c["gradient"]["got"].dump() << "\n";
      }
    } else if (c.contains("q")) {
      s << "    (inputs and outputs in --json)\n";
    }
    if (c.contains("detail") && !f.contains("state_part")) s << "    " << c["detail"].get<std::string>() << "\n";
    // Evidence that looks like rounding (a wrong carry under strong gates errs ~1e-5 relative): how to enlarge it.
    if (c.contains("relative_difference") && number_of(c["relative_difference"]) < kNotRounding)
      s << fmt::format(
          "    the difference is small ({:.2g} of the largest output): a carry or state fault grows with --state "
          "(the state itself is compared){}, and with longer cases (--max-n)\n",
          number_of(c["relative_difference"]),
          gated ? ", and with a narrower --gate-range near 1 (e.g. 0.97,1: weak gates keep what a chunk carries)" : "");
    if (c.contains("note")) s << "    (" << c["note"].get<std::string>() << ")\n";
  }
  s << findings_text(r["findings"]);
  // The shape hint only where a finding is about shapes (a wrong shape returned, an assertion on n or d), not
  // after any exception.
  bool shape_finding = false;
  for (const auto& f : r["findings"]) shape_finding = shape_finding || mentions_shape(f["error"].get<std::string>());
  if (shape_finding && r.contains("constraints") && !r["constraints"]["fixed_d"].get<bool>() &&
      r["constraints"]["n_multiple"].get<long>() == 1)
    s << "  hint: an implementation that takes only some shapes (one head size, whole blocks of tokens) can say so "
         "with\n"
         "        --fixed-d --d D --dv DV and --n-multiple B: every case then has that shape\n";
  if (r.contains("timings")) s << timings_text(r);
  return s.str();
}

json judge_given(const Request& req, const Problem<double>& in, const Mat<double>& out, const ColVec<double>& gates) {
  validate_request(req);
  if (req.gates) check_gates(gates, in.Q.rows());
  Case c;
  c.kind = CaseKind::given;
  c.group = "user";
  c.opt = req.opt;
  c.in = in;
  c.gamma = gates;
  c.name = "given";
  compute_expected(c, req);
  Outcome o;
  o.O = out;
  o.error = check_returned_output(c, out);
  const CaseCheck k = check_case(c, o, req);
  const Verdict verdict = !k.answered          ? Verdict::error
                          : k.worst_ratio <= 1 ? Verdict::computes
                          : k.far()            ? Verdict::differs
                                               : Verdict::lower_precision;
  json precision_diagnosis = nullptr;
  if (verdict == Verdict::lower_precision)
    precision_diagnosis = precision_diagnosis_json(explaining_format({c}, {o}, {k}, req));
  json matches = json::array();
  if (k.answered && verdict != Verdict::computes && c.n() <= kGivenDiagnosisMaxN) {
    std::vector<const Case*> dc{&c};
    std::vector<const Outcome*> doo{&o};
    matches = req.gates ? diagnose_gated(req.op, dc, doo, {true}, kGivenDiagnosisMaxN)
                        : diagnose(req.op, dc, doo, {true}, kGivenDiagnosisMaxN);
  }
  json findings = json::array();
  if (!k.answered) findings.push_back({{"case", "given"}, {"error", k.error}});
  json report = report_core(verdict, req, matches, nullptr, findings);
  report["mode"] =
      "file: measured on the given inputs against MPFR-256 and the rounding bound (no exact cases: a "
      "'differs' here means an error beyond 5% normwise, not a proof)";
  report["options"] = options_json(req.opt);
  report["precision"] = precision_name(req.declared());
  report["state"] = false;
  report["precision_diagnosis"] = precision_diagnosis;
  report["random"] = json::array({random_entry_json(c, k, req)});
  report["rounds"] = json::array();
  if (verdict == Verdict::differs)
    report["counterexample"] = {{"n", c.n()},
                                {"d", c.in.Q.cols()},
                                {"dv", c.in.V.cols()},
                                {"options", options_json(c.opt)},
                                {"first_difference", first_difference_json(k)},
                                {"note", "the given inputs (not shrunk)"}};
  report["gates"] = req.gates ? json{{"given", true}} : json(nullptr);
  report["summary"] = summary_text(report);
  return report;
}

}  // namespace hla::verify::ext
