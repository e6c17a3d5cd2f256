// Case generation and expected values for `hla verify` (see cases.hpp for the argument).
#include "verify/cases.hpp"
#include "core/operators.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/bounds.hpp"
#include "numerics/exactness.hpp"
#include "verify/precision.hpp"

namespace hla::verify::ext {

// Each dtype's name first, then the aliases parse_dtype also takes (NumPy's codes, C's names, the precisions').
constexpr NameTable<DType, 8> name_table(DType) {
  return {"dtype",
          {{{DType::float64, "float64"},
            {DType::float32, "float32"},
            {DType::float64, "f8"},
            {DType::float64, "double"},
            {DType::float64, "fp64"},
            {DType::float32, "f4"},
            {DType::float32, "float"},
            {DType::float32, "fp32"}}}};
}
std::string dtype_name(DType t) { return name_of(t); }
DType parse_dtype(const std::string& s) { return parse<DType>(s); }
constexpr NameTable<CaseKind, 8> name_table(CaseKind) {
  return {"case kind",
          {{{CaseKind::exact, "exact"},
            {CaseKind::random, "random"},
            {CaseKind::carry, "carry"},
            {CaseKind::split_a, "split-a"},
            {CaseKind::split_b, "split-b"},
            {CaseKind::whole, "whole"},
            {CaseKind::shrink, "shrink"},
            {CaseKind::given, "given"}}}};
}
std::string to_string(CaseKind k) { return name_of(k); }
CaseKind parse_case_kind(const std::string& text) { return parse<CaseKind>(text); }

double unit_roundoff(DType t) {
  return t == DType::float64 ? hla::unit_roundoff<double>() : hla::unit_roundoff<float>();
}
double round_to(DType t, double x) { return t == DType::float64 ? x : static_cast<double>(static_cast<float>(x)); }

constexpr NameTable<Precision, 5> name_table(Precision) {
  return {"precision",
          {{{Precision::fp64, "fp64"},
            {Precision::fp32, "fp32"},
            {Precision::tf32, "tf32"},
            {Precision::bf16, "bf16"},
            {Precision::fp16, "fp16"}}}};
}
std::string precision_name(Precision p) { return name_of(p); }
Precision parse_precision(const std::string& s) { return parse<Precision>(s); }
PrecisionModel precision_model(Precision p, DType dtype) {
  const double u64 = std::ldexp(1.0, -53), u32 = std::ldexp(1.0, -24);
  PrecisionModel m;
  switch (p) {
    case Precision::fp64:
      m = {u64, 0, u64, 53};
      break;
    case Precision::fp32:
      m = {u32, dtype == DType::float64 ? u32 : 0, u32, 24};
      break;
    case Precision::tf32:
      m = {std::ldexp(1.0, -11), std::ldexp(1.0, -11), u32, 11};
      break;
    case Precision::bf16:
      m = {std::ldexp(1.0, -8), std::ldexp(1.0, -8), u32, 8};
      break;
    case Precision::fp16:
      m = {std::ldexp(1.0, -11), std::ldexp(1.0, -11), u32, 11};
      break;
  }
  return m;
}

namespace {

// The largest value of the abs operator an exact case may reach (see cases.hpp): 2^10, and 2^7 for a
// declared bf16, whose 8-bit significand holds the integers and halves (λ = 1/2) only that far.
double exact_magnitude(Precision p) { return precision_model(p, DType::float64).significand_bits < 11 ? 128 : 1024; }
double exact_magnitude(const Request& r) { return exact_magnitude(r.declared()); }
// Literal references cost O(n²)–O(n⁴) in rationals: past this n the exact values come from the streaming
// form the prime field proves equal to the reference for these options.
constexpr Eigen::Index kLiteralMaxN = 24;

std::mutex& oracle_mutex() {
  static std::mutex m;
  return m;
}
ExactnessOracle& oracle() {
  static ExactnessOracle o;
  return o;
}
// The streaming form of `op` proven exact (fp61) for (γ, λ): it also defines the state's parts.
std::pair<std::string, std::string> proxy_form(const std::string& op, const rational& gamma, const rational& lambda) {
  std::lock_guard<std::mutex> lock(oracle_mutex());
  auto px = oracle().proxy(op, gamma, lambda);
  if (!px) throw InputError("no streaming form of " + op + " is exact for these options; cannot verify against it");
  return *px;
}

template <class T> Problem<T> concat(const Problem<T>& a, const Problem<T>& b) {
  if (a.Q.rows() == 0) return b;
  Problem<T> c;
  c.Q.resize(a.Q.rows() + b.Q.rows(), b.Q.cols());
  c.Q << a.Q, b.Q;
  c.K.resize(c.Q.rows(), b.K.cols());
  c.K << a.K, b.K;
  c.V.resize(c.Q.rows(), b.V.cols());
  c.V << a.V, b.V;
  return c;
}

// num in the first dv columns, den in the last, of the unnormalized operator on [V 1] — exactly (T =
// rational) or in MPFR — over prefix ++ inputs; and the final state of the proxy form when asked. With gates
// (one per token of `all`) SPEC's gated serial form gives both (fast/gated_forms: exact in rationals, proven equal to
// the gated reference in the ledger, claims/gated.cpp; its state parts are those of fast/serial/gated.hpp).
template <class T> Mat<T> numerator_and_denominator(const std::string& op, const Problem<double>& all,
                                                    const ColVec<double>& gates, const Options& opt,
                                                    NamedState<T>* state) {
  Options o = base_options(opt.gamma, opt.ridge);
  const Problem<T> aug = convert_problem<T>(bounds::augmented(all, false));
  if (gates.size()) {
    const ColVec<T> g = gates.unaryExpr([](double x) { return from_double<T>(x); });
    const gated::FormRef serial{op, "serial"};
    if (state) *state = gated::run<T>(serial, {convert_problem<T>(all), g}, o).state;
    return gated::run<T>(serial, {aug, g}, o).O;
  }
  const auto [form, variant] = proxy_form(op, opt.gamma, opt.ridge);
  const Entry<T>& streaming = registry<T>().find(op, form, variant);
  if (state) *state = streaming(convert_problem<T>(all), o).state;
  if (all.Q.rows() <= kLiteralMaxN) return registry<T>().reference(op)(aug, o).O;
  return streaming(aug, o).O;
}

// The options whose abs operator bounds a case's terms: with gates, the fixed decay γ̄ ≥ every gate (the largest
// rounded up to a multiple of 1/64, so the exactness oracle sees few γ̄), since then Γ(t, s) ≤ γ̄^{t−s} term by term.
Options abs_options(const Options& opt, const ColVec<double>& gates) {
  Options o = opt;
  if (gates.size()) o.gamma = rational(static_cast<long>(std::ceil(gates.maxCoeff() * 64)), 64);
  return o;
}

// With gates (the bound's A below): the abs operator's gated serial form at the gates themselves, which dominates
// every gated term as tightly as a fixed γ's A does its terms. The fixed γ̄ ≥ every gate (abs_options) also
// dominates them, but for gates spread over [0.8, 1] it is the undecayed operator: a normalized row's bound on
// den_t was then thousands of times den_t at n = 512 (measured: A_D = 52357 for den_t = 12.4), so den_t lay
// "within its bound of 0" and every gradient's bound was infinite (a dq off by 2x passed).
Mat<double> gated_abs_values(const std::string& op, const Problem<double>& all, const ColVec<double>& gates,
                             const Options& opt, NamedState<double>* abs_state) {
  Options o = base_options(rational(1), opt.ridge);
  Problem<double> a = bounds::augmented(all, true);
  a.gates = gates;
  Mat<double> A = registry<double>().find_exact(bounds::abs_operator(op), "serial")(a, o).O * (1 + 1e-9);
  if (abs_state) {
    Problem<double> m{all.Q.cwiseAbs(), all.K.cwiseAbs(), all.V.cwiseAbs()};
    m.gates = gates;
    *abs_state = registry<double>().find_exact(op, "serial")(m, o).state;
  }
  return A;
}

Mat<double> abs_values(const std::string& op, const Problem<double>& all, const Options& opt,
                       NamedState<double>* abs_state) {
  const std::string aop = bounds::abs_operator(op);
  Options o = base_options(opt.gamma, opt.ridge);
  const auto [form, variant] = proxy_form(aop, opt.gamma, opt.ridge);
  const Entry<double>& e = registry<double>().find(aop, form, variant);
  Mat<double> A = e(bounds::augmented(all, true), o).O * (1 + 1e-9);
  if (abs_state) {
    // The state's own magnitudes: the same streaming form of `op` on |inputs|.
    const auto [sform, svariant] = proxy_form(op, opt.gamma, opt.ridge);
    Problem<double> a{all.Q.cwiseAbs(), all.K.cwiseAbs(), all.V.cwiseAbs()};
    *abs_state = registry<double>().find(op, sform, svariant)(a, o).state;
  }
  return A;
}

// Entries in {−1, 0, 1}, each non-zero with probability `density`.
Problem<double> ternary_problem(const Shape& s, std::uint64_t seed, double density) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto fill = [&](Eigen::Index r, Eigen::Index c) {
    Mat<double> m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      const double x = u(rng);
      m(i) = x < density / 2 ? -1.0 : x < density ? 1.0 : 0.0;
    }
    return m;
  };
  Problem<double> p;
  p.Q = fill(s.n, s.d);
  p.K = fill(s.n, s.d);
  p.V = fill(s.n, s.dv);
  return p;
}

// Normalized with ε = 0, every den_t of an exact case must be clear of 0, which sparse signed inputs almost
// never give over hundreds of tokens. So queries and keys are non-negative (no term of den_t cancels another)
// and every query's first coordinate is 1, as is a key's: at γ = 1 the first key's only (den_t ≥ 1, growing
// like t rather than t²), at γ < 1 every key's (den_t ≥ 1, bounded by geometric sums). The keys' other
// coordinates are sparser the longer the case, so that den_t stays within the magnitude limit.
Problem<double> positive_denominator_problem(const Shape& s, std::uint64_t seed, double density, bool decays) {
  Problem<double> p = ternary_problem(s, seed, density);
  p.Q = p.Q.cwiseAbs();
  const Problem<double> sparse =
      ternary_problem(s, seed ^ 0x5bd1e995ULL, density * std::min(1.0, 8.0 / static_cast<double>(s.n)));
  p.K = sparse.K.cwiseAbs();
  p.Q.col(0).setOnes();
  p.K.col(0).setZero();
  if (decays)
    p.K.col(0).setOnes();
  else
    p.K(0, 0) = 1;
  return p;
}

struct Group {
  std::string name;
  Options opt;
};

// The option groups of the exact cases: always the plain operator (γ = 1, unnormalized, no ridge), then
// each option the user asked for alone, then all of them, each with a dyadic value.
std::vector<Group> exact_groups(const Request& r) {
  std::vector<Group> g;
  g.push_back({"base", {}});
  const bool decay = r.opt.gamma != 1, norm = r.opt.normalized, ridge = r.opt.ridge != 0;
  const rational eps = r.opt.eps == 0 ? rational(0) : rational(1, 4);
  if (decay) {
    Group a{"decay", {}};
    a.opt.gamma = rational(3, 4);
    g.push_back(a);
    Group b{"decay-half", {}};
    b.opt.gamma = rational(1, 2);
    g.push_back(b);
  }
  if (norm) {
    Group a{"normalized", {}};
    a.opt.normalized = true;
    a.opt.eps = eps;
    g.push_back(a);
  }
  if (ridge) {
    Group a{"ridge", {}};
    a.opt.ridge = rational(1, 2);
    g.push_back(a);
  }
  if (int(decay) + int(norm) + int(ridge) >= 2) {
    Group a{"all", {}};
    if (decay) a.opt.gamma = rational(3, 4);
    a.opt.normalized = norm;
    a.opt.eps = eps;
    if (ridge) a.opt.ridge = rational(1, 2);
    g.push_back(a);
  }
  return g;
}

// True when the exact case's numbers stay small (A ≤ 2^10) and, normalized, no den_t + ε is near 0.
bool acceptable_exact(const std::string& op, const Problem<double>& p, const ColVec<double>& gates, const Options& opt,
                      double magnitude) {
  const Mat<double> A = abs_values(op, p, abs_options(opt, gates), nullptr);
  if (A.maxCoeff() > magnitude || A.maxCoeff() < 1) return false;  // small, but not all zero
  if (!opt.normalized) return true;
  const Mat<rational> nd = numerator_and_denominator<rational>(op, p, gates, opt, nullptr);
  const rational eps = opt.eps;
  for (Eigen::Index t = 0; t < nd.rows(); ++t) {
    const rational den = nd(t, nd.cols() - 1) + eps;
    if (den < rational(1, 8) && den > rational(-1, 8)) return false;
  }
  return true;
}

// No inputs of that shape keep the exact case's numbers within the magnitude limit (a bug of the harness, except
// where make_cases expects it).
struct NoExactCase : std::logic_error {
  using std::logic_error::logic_error;
};

// An exact case's inputs (and with --grad its upstream gradient dO, ternary too, with the gradient's terms
// within the same magnitude limit). With --gates, for the gates `gates` (default: exact_gates(s.n)). `nonnegative`:
// entries in {0, 1} (no term cancels another, so |o| is A and every den_t ≥ 0). `kv`: keys and values given, queries
// drawn.
Problem<double> exact_problem(const Request& r, const Shape& s, const Options& opt, std::uint64_t seed,
                              Mat<double>* dO = nullptr, const ColVec<double>* gates = nullptr,
                              bool nonnegative = false, const Problem<double>* kv = nullptr) {
  const std::string& op = r.op;
  double density = s.n <= 12 ? 0.7 : 0.35;
  for (int attempt = 0; attempt < 400; ++attempt) {
    const std::uint64_t draw = seed * 7919 + static_cast<std::uint64_t>(attempt);
    const bool decays = opt.gamma != 1 || r.gates;
    Problem<double> p = opt.normalized && opt.eps == 0 ? positive_denominator_problem(s, draw, density, decays)
                                                       : ternary_problem(s, draw, density);
    if (nonnegative) p = {p.Q.cwiseAbs(), p.K.cwiseAbs(), p.V.cwiseAbs()};
    if (kv) p = {p.Q, kv->K, kv->V};  // new queries for given keys and values
    bool ok = acceptable_exact(op, p, r.gates ? (gates ? *gates : exact_gates(s.n)) : ColVec<double>(), opt,
                               exact_magnitude(r));
    Mat<double> up;
    if (ok && r.grad) {
      up = ternary_problem({s.n, 1, s.dv}, draw ^ 0x9e3779b97f4a7c15ULL, std::max(density, 0.5)).V;
      const ColVec<double> g = r.gates ? (gates ? *gates : exact_gates(s.n)) : ColVec<double>();
      ok = gradient_magnitude(op, p, opt, up, r.gates ? &g : nullptr) <= exact_magnitude(r);
    }
    if (ok) {
      if (dO) *dO = up;
      return p;
    }
    if (attempt % 8 == 7) density *= 0.8;
  }
  throw NoExactCase(fmt::format("no exact case of shape n={} d={} dv={} within the magnitude limit", s.n, s.d, s.dv));
}

Problem<double> rounded_gaussian(const Shape& s, std::uint64_t seed) { return gaussian_problem(s, seed); }

// The random cases' inputs for the request: Gaussian; with gradients of a normalized operator, queries and keys
// non-negative (a positive feature map's, as normalized linear attention is used). Gradients pass through 1/D_t:
// with signed inputs some row of a long case has D_t within the forward's rounding bound of 0, where a division can
// return anything, and its unbounded upstream error reaches the bound of every earlier token's dK and dγ (measured:
// fp32 random normalized cases from n = 100 had no finite gradient bound, so a dq twice the right one passed). With
// no term of D_t cancelling another, D_t stays far above its bound and every gradient entry has a finite one.
Problem<double> random_inputs(const Shape& s, std::uint64_t seed, const Request& r) {
  Problem<double> p = rounded_gaussian(s, seed);
  if (r.grad && r.opt.normalized) {
    p.Q = p.Q.cwiseAbs();
    p.K = p.K.cwiseAbs();
  }
  return p;
}

// The gates of a random --gates case: uniform in [lo, hi], rounded to the dtype (validate_request keeps the
// rounded lo > 0, and rounding never takes a value ≤ 1 above 1).
ColVec<double> random_gates(Eigen::Index n, const Request& r, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(r.gate_lo, r.gate_hi);
  ColVec<double> g(n);
  for (Eigen::Index t = 0; t < n; ++t) g(t) = std::clamp(round_to(r.dtype, u(rng)), round_to(r.dtype, r.gate_lo), 1.0);
  return g;
}
Mat<double> gaussian_upstream(long n, long dv, std::uint64_t seed) { return gaussian_problem({n, 1, dv}, seed).V; }

}  // namespace

std::vector<Shape> constrained(const Request& r, std::vector<Shape> shapes) {
  std::vector<Shape> out;
  for (Shape s : shapes) {
    s.n = r.fit_n(s.n);
    if (r.fixed_widths) {
      s.d = r.d;
      s.dv = r.dv;
    }
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const Shape& o) { return o.n == s.n && o.d == s.d && o.dv == s.dv; });
    if (!seen) out.push_back(s);
  }
  return out;
}

namespace {

std::string shape_tag(const Problem<double>& p) {
  return fmt::format("n{}-d{}-dv{}", p.Q.rows(), p.Q.cols(), p.V.cols());
}

// The state in the dtype: exact states must survive the rounding unchanged, or the case is not exact.
bool representable(const NamedState<double>& s, DType t) {
  for (const auto& [name, m] : s.parts)
    for (Eigen::Index i = 0; i < m.size(); ++i)
      if (round_to(t, m(i)) != m(i)) return false;
  return true;
}

NamedState<double> rounded_state(const NamedState<rational>& s) {
  NamedState<double> out;
  for (const auto& [name, m] : s.parts) {
    Mat<double> d(m.rows(), m.cols());
    for (Eigen::Index i = 0; i < m.size(); ++i) d(i) = m(i).convert_to<double>();
    out.parts.emplace_back(name, d);
  }
  return out;
}
NamedState<double> rounded_state(const NamedState<mpfr256>& s, DType t) {
  NamedState<double> out;
  for (const auto& [name, m] : s.parts) {
    Mat<double> d(m.rows(), m.cols());
    for (Eigen::Index i = 0; i < m.size(); ++i) d(i) = round_to(t, m(i).convert_to<double>());
    out.parts.emplace_back(name, d);
  }
  return out;
}

}  // namespace

void validate_request(const Request& r) {
  if (!operator_info(r.op).streaming)
    throw InputError("operator '" + r.op + "' has no verification battery (" +
                     operator_names([](const OperatorInfo& o) { return o.streaming; }) + ")");
  const Entry<double>& ref = registry<double>().reference(r.op);
  if (r.opt.gamma <= 0 || r.opt.gamma > 1) throw InputError("--gamma must lie in (0, 1]");
  if (r.opt.eps < 0) throw InputError("--eps must be >= 0");
  if (r.opt.ridge < 0) throw InputError("--ridge must be >= 0");
  // The options travel to the implementation as the dtype's values, and its sums multiply them: a value the
  // dtype cannot hold (1e400) or whose products overflow it (λ = 1e38 in float32) is refused, not judged.
  const double largest = std::sqrt(r.dtype == DType::float32 ? double(std::numeric_limits<float>::max())
                                                             : std::numeric_limits<double>::max());
  for (const auto& [value, name] : {std::pair{&r.opt.eps, "--eps"}, std::pair{&r.opt.ridge, "--ridge"}})
    if (*value > rational(largest)) {
      const std::string text = format_rational(*value);
      throw InputError(
          fmt::format("{} {} is too large for {} arrays (at most {:.3g}, the square root of the largest {})", name,
                      text.size() <= 24 ? text : fmt::format("(a {}-digit number)", text.size()), dtype_name(r.dtype),
                      largest, dtype_name(r.dtype)));
    }
  if (!caps_allow(ref.caps, r.opt)) {
    std::string which;
    if (r.opt.gamma != 1 && !ref.caps.decay) which += ", decay (--gamma must be 1)";
    if (r.opt.normalized && !ref.caps.normalized) which += ", normalization (no --normalized)";
    if (r.opt.ridge != 0 && !ref.caps.ridge) which += ", ridge (--ridge must be 0)";
    throw InputError("operator '" + r.op + "' does not define " + which.substr(2));
  }
  if (r.max_n < 1 || r.max_n > 8192) throw InputError("--max-n must lie in [1, 8192]");
  if (r.d < 1 || r.d > 256 || r.dv < 1 || r.dv > 256) throw InputError("--d and --dv must lie in [1, 256]");
  if (r.n_multiple < 1 || r.n_multiple > 1024) throw InputError("--n-multiple must lie in [1, 1024]");
  if (precision_model(r.declared(), r.dtype).u_format < unit_roundoff(r.dtype))
    throw InputError("--precision " + precision_name(r.declared()) + " is finer than the " + dtype_name(r.dtype) +
                     " arrays that carry it");
  if (r.n_multiple > r.max_n) throw InputError("--n-multiple must not exceed --max-n");
  if (r.gates) {
    if (!operator_info(r.op).verify_gates)
      throw InputError("--gates: operator '" + r.op + "' has no gated definition that hla verify checks (" +
                       operator_names([](const OperatorInfo& o) { return o.verify_gates; }) + " have one)");
    if (r.opt.gamma != 1)
      throw InputError("--gates takes the decay from the per-token gates (gamma.npy); --gamma means nothing with it");
    if (!(r.gate_lo > 0 && r.gate_lo <= r.gate_hi && r.gate_hi <= 1) || round_to(r.dtype, r.gate_lo) <= 0)
      throw InputError(fmt::format("--gate-range LO,HI needs 0 < LO <= HI <= 1 (LO > 0 in {}); got {},{}",
                                   dtype_name(r.dtype), r.gate_lo, r.gate_hi));
  }
  if (r.grad && !has_gradient_battery(r.op))
    throw InputError("--grad: no gradient reference for operator '" + r.op + "' (" +
                     operator_names([](const OperatorInfo& o) { return o.backward; }) + " have one)");
}

std::vector<PartShape> state_layout(const std::string& op, Eigen::Index d, Eigen::Index dv) {
  const auto [form, variant] = proxy_form(op, 1, 0);
  const Entry<double>& e = registry<double>().find(op, form, variant);
  auto parts = [&](Eigen::Index dd, Eigen::Index ddv) {
    const Problem<double> p{Mat<double>::Zero(1, dd), Mat<double>::Zero(1, dd), Mat<double>::Zero(1, ddv)};
    return e(p, Options{}).state.parts;
  };
  // Which parts are vectors (m, h, z, ...) is a property of the part, not of this d, dv: a C of d × 1 (dv = 1)
  // is still a matrix. Decided at widths where no matrix part has one column.
  const auto probe = parts(2, 3), here = parts(d, dv);
  std::vector<PartShape> out;
  for (std::size_t i = 0; i < here.size(); ++i)
    out.push_back({here[i].first, here[i].second.rows(), here[i].second.cols(), probe[i].second.cols() == 1});
  return out;
}

// The exact cases' gates: dyadic squares, exact in float32 — 1/4, 9/16, 49/64 (a_t = 1/2, 3/4, 7/8), so that the
// gated-HLA proposal's recurrence, written in a_t = √γ_t, is evaluated exactly on them (the diagnosis names it) —
// in an irregular order that varies per token, and 1 at two tokens of the short cases (n ≤ 16): t = 7 and t = 13,
// odd (no chunk of any even width starts there) and prime (among the chunk widths 2–8 and the powers of two, only
// width 7's first boundary and width 13's fall there). So:
//   - every token t that starts a chunk of width 2, 4, 8, 16, 32, 64 (t a multiple of 2), and the first three
//     tokens, has a gate ≠ 1: a rule right only for gates all 1 fails on the shortest cases, and a cross-chunk carry
//     decayed by the wrong product (which needs a gate ≠ 1 at the first token of a later chunk) shows at every
//     plausible width;
//   - a gate 1 amid gates < 1 tests what kernels written in log-gates (log 1 = 0) do with it;
//   - the gates are not constant: a rule right only for constant gates fails.
// Long cases (n > 16) keep every gate ≤ 49/64: the bound's abs operator takes the fixed γ̄ ≥ every gate (abs_options),
// and γ̄ < 1 keeps long exact cases within the magnitude limit with normalizers clear of 0; at n ≤ 16 the γ̄ = 1 of
// a gate 1 costs nothing (the base group's γ = 1 cases are as long).
ColVec<double> exact_gates(Eigen::Index n, int variant) {
  static const double values[] = {0.25, 0.5625, 0.765625};
  ColVec<double> g(n);
  for (Eigen::Index t = 0; t < n; ++t)
    g(t) = n <= 16 && (t == 7 || t == 13) ? 1.0 : values[(t * 5 + t / 7 + variant) % 3];
  return g;
}

// The weak gates of an exact --gates case: dyadics 1 − 2^-e, e ∈ {k, k+1, k+2} in an irregular order (exact in
// float32 for k ≤ 22). The strong gates of exact_gates scale whatever a chunk carries across 16 tokens by ~1e-5, so
// a wrong carry there errs like rounding (a tail chunk read from the wrong carry was taken for TF32 products, a carry
// decayed twice gave an 8e-5 counterexample: issue 47). At −log γ ≈ 2^-(k+1) a chunk of w ≈ 2^k tokens keeps
// ~60% of its carry: every carried term is O(1) of the output, so a wrong carry errs beyond any format's rounding.
ColVec<double> weak_gates(Eigen::Index n, int k) {
  ColVec<double> g(n);
  for (Eigen::Index t = 0; t < n; ++t) g(t) = 1 - std::ldexp(1.0, -(k + static_cast<int>((t * 3 + t / 5) % 3)));
  return g;
}

// The gates of the prefix a carry case's state_in summarizes (not sent): 1/2 each, as the fixed-γ carry cases'
// γ = 1/2, so the state stays exact in the dtype.
ColVec<double> prefix_gates(Eigen::Index n) { return ColVec<double>::Constant(n, 0.5); }

void check_gates(const ColVec<double>& gamma, Eigen::Index n) {
  if (gamma.size() != n)
    throw InputError(fmt::format("gamma: {} gates for {} tokens (one per token, shape (n,))", gamma.size(), n));
  for (Eigen::Index t = 0; t < n; ++t)
    if (!(gamma(t) > 0 && gamma(t) <= 1))
      throw InputError(fmt::format("gamma[{}] = {} is outside (0, 1]", t, gamma(t)));
}

std::pair<std::string, std::string> streaming_form(const std::string& op, const Options& opt) {
  return proxy_form(op, opt.gamma, opt.ridge);
}

Problem<rational> exact_inputs(const Problem<double>& p) { return convert_problem<rational>(p); }

template <class T> Mat<T> operator_value(const std::string& op, const Problem<T>& p, const Options& opt) {
  if (p.Q.rows() <= kLiteralMaxN) return registry<T>().reference(op)(p, opt).O;
  const auto [form, variant] = proxy_form(op, opt.gamma, opt.ridge);
  return registry<T>().find(op, form, variant)(p, opt).O;
}
template Mat<rational> operator_value<rational>(const std::string&, const Problem<rational>&, const Options&);
template Mat<double> operator_value<double>(const std::string&, const Problem<double>&, const Options&);

std::vector<Case> make_cases(const Request& r) {
  validate_request(r);
  std::vector<Case> cases;
  int index = 0;
  auto add = [&](Case c) {
    c.name = fmt::format("{}-{:03d}-{}-{}", to_string(c.kind), index++, c.group, shape_tag(c.in));
    cases.push_back(std::move(c));
  };
  // Exact: awkward small shapes (n = 1, d ≠ dv, odd n), then sparse long ones that cross the chunk widths
  // implementations use (64, 128, 256) at a width that does not divide them.
  // Then the random cases' own widths (--d, --dv), short and across a chunk, so that a fault that needs wide
  // heads (a feature tiling, a head-size special case) is caught exactly too.
  std::vector<Shape> shapes{{1, 1, 1}, {2, 1, 1},  {3, 1, 2},  {4, 2, 1},   {5, 2, 3},  {6, 3, 2},
                            {8, 2, 2}, {11, 3, 3}, {67, 3, 2}, {150, 4, 3}, {300, 3, 2}};
  if (r.d > 3 || r.dv > 3) shapes.insert(shapes.end(), {{9, r.d, r.dv}, {70, r.d, r.dv}});
  shapes = constrained(r, shapes);
  std::uint64_t seed = r.seed * 1000003ULL;
  // (per_shape: several cases of a short shape for an implementation that packs them into one call)
  auto copies = [&](Eigen::Index n) {
    return r.per_shape > 1 && n >= 4 && n <= 11 ? static_cast<int>(r.per_shape) : 1;
  };
  for (const Group& g : exact_groups(r)) {
    for (const Shape& s : shapes) {
      Problem<double> first;  // (shared_kv: the keys and values of the copies' group)
      for (int copy = 0; copy < copies(s.n); ++copy) {
        const long group = copy / r.shared_kv;
        const ColVec<double> gates = exact_gates(s.n, static_cast<int>(group));
        Case c;
        c.kind = CaseKind::exact;
        c.group = g.name;
        c.opt = g.opt;
        // Normalized without ε, den_t ≥ 1 needs a dense first column of the inputs (positive_denominator_problem),
        // and with --grad the denominator's gradients then grow like n²: past a few dozen tokens no case fits the
        // magnitude limit. Those lengths are left to the random cases; the shorter exact ones stay. A copy that
        // shares another's keys and values may find no queries within the limit either: the shape's copies end there.
        try {
          c.in = exact_problem(r, s, g.opt, ++seed, &c.dO, r.gates ? &gates : nullptr, false,
                               copy % r.shared_kv ? &first : nullptr);
        } catch (const NoExactCase&) {
          if ((r.grad && g.opt.normalized && g.opt.eps == 0) || copy > 0) break;
          throw;
        }
        if (copy % r.shared_kv == 0) first = c.in;
        if (r.gates) c.gamma = gates;
        add(std::move(c));
      }
    }
  }
  // With gates, weak ones too (weak_gates): per chunk width w the hint considers (4 … 256), a case spanning at least
  // two chunks of w with a tail (n a multiple of none of them), its gates keeping 0.2–0.8 across a chunk of w, so that
  // every carry is visible. Their inputs are non-negative: no term cancels another, so a wrong carry errs by O(1) of
  // |o| = A, beyond any format's rounding bound (γ_h·2A), and every den_t ≥ 0 (normalized with ε > 0 the first draw
  // fits). Groups where no inputs of that length fit the magnitude limit (normalized without ε: every key's first
  // coordinate 1, at gates near 1) go without; the base group always has them.
  if (r.gates) {
    struct Weak {
      Shape s;
      int k;  // gates 1 − 2^-k … 1 − 2^-(k+2)
    };
    for (const Group& g : exact_groups(r))
      for (const Weak& w : {Weak{{11, 2, 2}, 2}, Weak{{45, 2, 2}, 3}, Weak{{141, 2, 2}, 6}, Weak{{601, 2, 2}, 8}}) {
        const Shape s = constrained(r, {w.s}).front();
        Case c;
        c.kind = CaseKind::exact;
        c.group = g.name;
        c.opt = g.opt;
        c.gamma = weak_gates(s.n, w.k);
        try {
          c.in = exact_problem(r, s, g.opt, ++seed, &c.dO, &c.gamma, true);
        } catch (const NoExactCase&) { continue; }
        add(std::move(c));
      }
  }
  // Random: the user's options, Gaussian inputs, n up to max_n.
  std::vector<long> ns{1, 5, 33, 100, 257, r.max_n};
  for (long& n : ns) n = r.fit_n(n);
  ns.erase(std::remove_if(ns.begin(), ns.end(), [&](long n) { return n > r.fit_n(r.max_n); }), ns.end());
  std::sort(ns.begin(), ns.end());
  ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
  for (long n : ns) {
    Case c;
    c.kind = CaseKind::random;
    c.group = "user";
    c.opt = r.opt;
    c.in = random_inputs({n, r.d, r.dv}, ++seed, r);
    if (r.grad) c.dO = gaussian_upstream(n, r.dv, ++seed);
    if (r.gates) c.gamma = random_gates(n, r, ++seed);
    add(std::move(c));
  }
  if (!r.state) return cases;
  // Carry in: the harness's exact state after a prefix, then the implementation continues.
  const auto groups = exact_groups(r);
  std::vector<Group> carry_groups{groups.front()};
  if (groups.size() > 1) carry_groups.push_back(groups.back());
  for (const Group& g : carry_groups) {
    for (auto [pre, s] : std::vector<std::pair<Eigen::Index, Shape>>{{1, {3, 2, 2}}, {4, {5, 3, 2}}, {9, {70, 2, 3}}}) {
      s = constrained(r, {s}).front();
      Case c;
      c.kind = CaseKind::carry;
      c.group = g.name;
      Options half = g.opt;
      if (half.gamma != 1) half.gamma = rational(1, 2);  // powers of 1/2 keep the state exact in any dtype
      c.opt = half;
      Mat<double> up;
      // With gates: the prefix's at 1/2, the case's own its exact gates (≠ 1 on its first token, which decays
      // the state handed in).
      ColVec<double> gates;
      if (r.gates) {
        c.prefix_gamma = prefix_gates(pre);
        c.gamma = exact_gates(s.n);
        gates.resize(pre + s.n);
        gates << c.prefix_gamma, c.gamma;
      }
      const Problem<double> all =
          exact_problem(r, {pre + s.n, s.d, s.dv}, half, ++seed, &up, r.gates ? &gates : nullptr);
      c.prefix = slice_rows(all, 0, pre);
      c.in = slice_rows(all, pre, pre + s.n);
      if (r.grad) c.dO = up.bottomRows(s.n);
      NamedState<rational> st;
      numerator_and_denominator<rational>(r.op, c.prefix, c.prefix_gamma, half, &st);
      c.state_in = rounded_state(st);
      c.want_state = true;
      if (!representable(c.state_in, r.dtype)) continue;
      add(std::move(c));
    }
  }
  {  // a random prefix's state, rounded to the dtype
    Case c;
    c.kind = CaseKind::carry;
    c.group = "user";
    c.opt = r.opt;
    const Eigen::Index len = r.fit_n(50);
    const Problem<double> all = random_inputs({37 + len, r.d, r.dv}, ++seed, r);
    c.prefix = slice_rows(all, 0, 37);
    c.in = slice_rows(all, 37, 37 + len);
    if (r.grad) c.dO = gaussian_upstream(len, r.dv, ++seed);
    if (r.gates) {
      c.prefix_gamma = random_gates(37, r, ++seed);
      c.gamma = random_gates(len, r, ++seed);
    }
    NamedState<mpfr256> st;
    numerator_and_denominator<mpfr256>(r.op, c.prefix, c.prefix_gamma, r.opt, &st);
    c.state_in = rounded_state(st, r.dtype);
    c.want_state = true;
    add(std::move(c));
  }
  // Split and carry on the implementation itself: the whole sequence, and its first part with the state out;
  // the second part (split-b) is made from what the implementation returns.
  struct Split {
    std::string group;
    Options opt;
    Problem<double> all;
    Eigen::Index at;
    Mat<double> dO;
    ColVec<double> gamma;  // --gates: the whole sequence's
  };
  std::vector<Split> splits;
  // Both halves keep the length constraint: the split falls on a multiple of n_multiple.
  const long at_exact = r.fit_n(4), at_user = r.fit_n(41);
  const Shape exact_whole = constrained(r, {{std::max<long>(9, at_exact + r.n_multiple), 2, 3}}).front();
  {
    Mat<double> up;
    Problem<double> all = exact_problem(r, exact_whole, groups.back().opt, ++seed, &up);
    splits.push_back({groups.back().name, groups.back().opt, std::move(all), at_exact, up,
                      r.gates ? exact_gates(exact_whole.n) : ColVec<double>()});
    const long len = r.fit_n(std::max<long>(90, at_user + r.n_multiple));
    all = random_inputs({len, r.d, r.dv}, ++seed, r);
    Mat<double> dO = r.grad ? gaussian_upstream(len, r.dv, ++seed) : Mat<double>();
    splits.push_back(
        {"user", r.opt, std::move(all), at_user, dO, r.gates ? random_gates(len, r, ++seed) : ColVec<double>()});
  }
  for (const Split& s : splits) {
    Case whole;
    whole.kind = CaseKind::whole;
    whole.group = s.group;
    whole.opt = s.opt;
    whole.in = s.all;
    whole.dO = s.dO;
    whole.gamma = s.gamma;
    whole.want_state = true;
    add(whole);
    const std::string whole_name = cases.back().name;
    Case a;
    a.kind = CaseKind::split_a;
    a.group = s.group;
    a.opt = s.opt;
    a.in = slice_rows(s.all, 0, s.at);
    if (s.dO.size()) a.dO = s.dO.topRows(s.at);
    if (s.gamma.size()) a.gamma = s.gamma.head(s.at);
    a.want_state = true;
    a.pair = whole_name;
    a.split_at = s.at;
    add(a);
  }
  return cases;
}

Case make_split_b(const Case& whole, const Case& split_a, const NamedState<double>& their_state, const Request&) {
  Case b;
  b.kind = CaseKind::split_b;
  b.group = whole.group;
  b.opt = whole.opt;
  b.in = slice_rows(whole.in, split_a.split_at, whole.n());
  if (whole.dO.size()) b.dO = whole.dO.bottomRows(whole.n() - split_a.split_at);
  b.prefix = split_a.in;
  if (whole.gamma.size()) {
    b.gamma = whole.gamma.tail(b.n());
    b.prefix_gamma = split_a.gamma;
  }
  b.state_in = their_state;
  b.want_state = true;
  b.pair = whole.name;
  b.split_at = split_a.split_at;
  b.name = split_a.name;
  const auto at = b.name.find("split-a");
  if (at != std::string::npos) b.name.replace(at, 7, "split-b");
  return b;
}

namespace {

// With --gates, the gates of every token the case's values depend on: its prefix's (the state handed in summarizes
// them), then its own; empty without gates.
ColVec<double> all_gates(const Case& c) {
  if (c.gamma.size() == 0) return {};
  ColVec<double> g(c.prefix_gamma.size() + c.gamma.size());
  g << c.prefix_gamma, c.gamma;
  return g;
}

// Exact inputs: the exact cases and whatever is made from them (carries, splits, shrunk counterexamples); the
// cases of random inputs are in the group "user".
bool has_exact_inputs(const Case& c) { return c.kind == CaseKind::exact || c.group != "user"; }

// The bounds of a case whose values are computed, for an implementation computing in format f.
void set_bounds(Case& c, const Request& r, const EmulatedFormat& f, bool explaining = false) {
  const Problem<double> all = concat(c.prefix, c.in);
  const Eigen::Index n = c.n(), dv = c.in.V.cols();
  const bool exact = has_exact_inputs(c);
  const ColVec<mpfr256> den = c.forward.col(dv);
  // The bound: the serial depth over the whole sequence (the state summarizes the prefix), γ inexact when
  // the dtype cannot hold it, plus an absolute floor for terms that underflow in the dtype; for a narrower
  // format (tf32, bf16, fp16), its operand roundings on top of the fp32 accumulation.
  // Exact cases are judged at float32's roundoff even for float64: at γ = 1 their outputs are integers (or
  // one division away), so any tolerance below 1/2 still demands exactness there, while decayed and
  // normalized exact cases stay exact-within-rounding for float32 arithmetic behind a float64 interface —
  // which the random cases, at the dtype's own u, then call lower precision. Every input and intermediate of
  // an exact case at γ = 1, unnormalized, is a small dyadic the format holds (exact_magnitude): no operand
  // rounding there.
  //
  // Gated cases (--gates; opt.gamma is then 1): the proven bound with the abs operator A run at the case's own
  // gates (gated_abs_values: every term of the gated sums in absolute value, each the γ = 1 term times its gate
  // products); the depth is that of a decaying
  // operator (each Γ a product of gates, each held exactly by the dtype, as a dyadic γ is), so the same γ_h as a
  // fixed γ < 1. The emulated kernels (precision.hpp) run the gated scan operator's fold over the same gates, so the
  // calibrated levels (fp32 on random cases, tf32/bf16/fp16) and the format bound are set as without gates; an exact
  // gated case is never sharp for a narrow format (its gate products are not the format's).
  const bool gated = c.gamma.size() > 0;
  const PrecisionModel pm = precision_model(f.precision, r.dtype);
  const double u_acc = exact ? std::max(pm.u_accumulate, hla::unit_roundoff<float>()) : pm.u_accumulate;
  const double u_op = exact && c.opt.gamma == 1 && !gated && !c.opt.normalized ? 0 : pm.u_operand;
  const double g = from_rational<double>(c.opt.gamma);
  const bool gamma_inexact = c.opt.gamma != 1 && rational(round_to(r.dtype, g)) != c.opt.gamma;
  const long total = static_cast<long>(all.Q.rows());
  const long h = bounds::rounding_depth(r.op, total, c.opt.gamma != 1 || gated, gamma_inexact, total, c.in.Q.cols());
  const long h_op = bounds::operand_roundings(r.op);
  NamedState<double> abs_state;
  const Mat<double> A_all = gated
                                ? gated_abs_values(r.op, all, all_gates(c), c.opt, c.want_state ? &abs_state : nullptr)
                                : abs_values(r.op, all, c.opt, c.want_state ? &abs_state : nullptr);
  const Mat<double> A = A_all.bottomRows(n);
  const double tiny =
      (r.dtype == DType::float64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min()) *
      static_cast<double>(total * total + 1);
  // A narrow format (tf32, bf16, fp16): sharp where every partial sum is a dyadic the format holds (exact cases
  // at γ = 1 within its magnitude; a normalized output then only rounds at the division and on output), else
  // calibrated on emulated kernels (precision.hpp says why). fp32 behind float64 arrays: γ_h of its operand
  // roundings.
  const bool narrow = pm.significand_bits < 24;
  c.sharp = exact && (!narrow || (c.opt.gamma == 1 && !gated && A_all.maxCoeff() <= exact_magnitude(f.precision)));
  const double eps_d = from_rational<double>(c.opt.eps);
  const Mat<double> out = c.expected.unaryExpr([](const mpfr256& x) { return std::fabs(x.convert_to<double>()); });
  // The largest error of an emulated kernel on this case (its output rows are the last n of `all`), and of
  // its final state per part; nullopt where the emulation cannot run (no scan operator, a normalizer that
  // vanishes in fp32).
  const ColVec<double> gates_all = all_gates(c);  // the emulation runs from the zero state over prefix and case
  auto emulated_error = [&](const EmulatedFormat& e,
                            std::map<std::string, double>* state_error) -> std::optional<double> {
    try {
      const Run<double> em = emulate_format(r.op, all, c.opt, e, gated ? &gates_all : nullptr);
      double err = 0;
      for (Eigen::Index t = 0; t < n; ++t)
        for (Eigen::Index k = 0; k < dv; ++k)
          err = std::max(err, abs(mpfr256(em.O(all.Q.rows() - n + t, k)) - c.expected(t, k)).convert_to<double>());
      if (state_error)
        for (const auto& [name, want] : c.expected_state.parts) {
          double es = 0;
          const Mat<double>& got = em.state.at(name);
          for (Eigen::Index i = 0; i < want.size(); ++i)
            es = std::max(es, abs(mpfr256(got(i)) - want(i)).convert_to<double>());
          (*state_error)[name] = es;
        }
      if (!std::isfinite(err)) return std::nullopt;
      return err;
    } catch (const std::exception&) { return std::nullopt; }
  };
  // The proven bound (γ_h), with fp32 behind float64 adding its operand roundings.
  const double gam = bounds::gamma_h(h, u_acc) + (u_op > 0 && !(narrow && c.sharp) ? bounds::gamma_h(h_op, u_op) : 0.0);
  auto proven = [&]() {
    const double u_out = narrow && c.opt.normalized ? pm.u_operand : 0.0;
    return Mat<double>(
        bounds::output_bounds_for(c.expected, A, c.opt.normalized, den, eps_d, u_acc, gam, u_out).array() + tiny);
  };
  // The bound. A narrow format off its sharp cases: calibrated on an emulated correct kernel (precision.hpp says
  // why). fp32 on random inputs: the proven bound, or kFp32LevelFactor × what an emulated fp32 kernel errs where
  // that is lower (the level correct fp32 implementations reach; TF32 products err thousands of times more, yet
  // within the proven bound of a long case). Elsewhere the proven bound.
  std::map<std::string, double> kernel_state_error;
  std::optional<double> e_kernel;
  const bool fp32_level = f.precision == Precision::fp32 && !f.state_in_format && !exact;
  if ((narrow && !c.sharp) || fp32_level) e_kernel = emulated_error(f, narrow ? &kernel_state_error : nullptr);
  Mat<double> proven_bound;
  if (e_kernel && narrow) {
    c.bound = (out * pm.u_operand).array() + kCalibrationFactor * *e_kernel + tiny;
    c.bound_kind = "calibrated";
    // Exact inputs (the short cases): the emulated kernel can be exact on them (its gates in fp32, its partial sums
    // dyadics the format holds), where a correct kernel that rounds another intermediate is not — a chunked gated
    // bf16 kernel rounds its gate-weighted operands: a gate product 441/1024 is not a bf16 number, and an output
    // whose terms cancel to 0 came out −2^−10 against a calibrated bound of ~1e−37 (audit, 2026-12-04). Never below
    // the proven bound there: it holds every kernel whose operands and intermediates are in the format.
    // Explaining a difference (bound_as), the floor applies only where the emulation is exact on the case: elsewhere
    // (the weak exact gates, whose products no narrow format holds) the emulated kernel errs as a correct one does,
    // and the floor — every operand rounding at its worst, ~8% of A in bf16 — would explain a wrong carry (issue 47).
    const bool emulation_exact = *e_kernel <= 1e-3 * pm.u_format * out.maxCoeff();
    if (exact && (!explaining || emulation_exact)) {
      proven_bound = proven();
      c.bound = c.bound.cwiseMax(proven_bound);
    }
  } else {
    proven_bound = proven();
    c.bound = proven_bound;
    c.bound_kind = c.sharp ? "sharp" : "proven";
    if (e_kernel) {
      const Mat<double> level = (out * pm.u_format).array() + kFp32LevelFactor * *e_kernel + tiny;
      if ((level.array() < proven_bound.array()).any()) c.bound_kind = "calibrated";
      c.bound = c.bound.cwiseMin(level);
    }
  }
  // Where a precision problem ends (off the sharp cases): what the coarsest plausible arithmetic errs on this
  // very case — an emulated kernel that accumulates in bf16 — so that an ill-conditioned case (a normalizer
  // near 0, where any rounding of the inputs moves the outputs by their own size) is not mistaken for another
  // function; the proven bound of every operation in the format where no emulation runs. Never below the
  // proven bound: beyond the fp32 level but within it is a precision problem.
  std::optional<double> e_coarse;
  if (!c.sharp) e_coarse = emulated_error({Precision::bf16, true}, nullptr);
  if (e_coarse) {
    c.format_bound =
        (out * precision_model(Precision::bf16, r.dtype).u_format).array() + kCalibrationFactor * *e_coarse + tiny;
    c.format_bound = c.format_bound.cwiseMax(c.bound);
    if (proven_bound.size()) c.format_bound = c.format_bound.cwiseMax(proven_bound);
  } else {
    c.format_bound = bounds::output_bounds_for(c.expected, A, c.opt.normalized, den, eps_d, pm.u_format,
                                               bounds::gamma_h(h + h_op, pm.u_format), pm.u_format)
                         .array() +
                     tiny;
  }
  if (r.grad && c.dO.size()) {
    // The gradients of the case's own tokens from the state it was given (the implementation's own, for a
    // split's second half), with the forward's numerator, denominator and their bounds for the normalized bound.
    const NamedState<double>* init = c.state_in.parts.empty() ? nullptr : &c.state_in;
    Mat<double> forward_bound = 2 * gam * A;
    forward_bound.col(dv).array() += 2 * u_acc * eps_d;
    const double u_grad = c.sharp ? u_acc : std::max(pm.u_accumulate, pm.u_operand);
    const ColVec<double>* gates =
        gated ? &c.gamma : nullptr;  // the case's own tokens' (the state summarizes the prefix)
    c.grad_bound = gradient_bounds(r.op, c.in, c.opt, init, c.dO, u_grad, h, &c.forward, &forward_bound, gates, &A);
    const double u_coarse = std::max(u_grad, precision_model(Precision::bf16, r.dtype).u_format);
    c.grad_format_bound =
        c.sharp ? c.grad_bound
                : gradient_bounds(r.op, c.in, c.opt, init, c.dO, u_coarse, h, &c.forward, &forward_bound, gates, &A);
    // The same underflow floor as the outputs': below the format's smallest normal number a rounding errs by the
    // subnormal spacing, not by u relative (an exact case's gradient of 1e-44 in fp32 is a few subnormal steps).
    add_underflow_floor(c.grad_bound, tiny);
    add_underflow_floor(c.grad_format_bound, tiny);
  }
  if (c.want_state) {
    c.state_bound = abs_state;
    const bool calibrated_state = e_kernel && narrow;
    for (auto& [name, m] : c.state_bound.parts) {
      const Mat<double> proven_state = (m * (2 * gam)).array() + tiny;
      if (!calibrated_state) {
        m = proven_state;
        continue;
      }
      m = Mat<double>::Constant(m.rows(), m.cols(), kCalibrationFactor * kernel_state_error[name] + tiny);
      if (exact) m = m.cwiseMax(proven_state);  // as the outputs' (above): the carry cases hand in exact states
    }
  }
}

}  // namespace

void compute_expected(Case& c, const Request& r) {
  const Problem<double> all = concat(c.prefix, c.in);
  const Eigen::Index n = c.n(), dv = c.in.V.cols();
  const bool exact = has_exact_inputs(c);
  Mat<mpfr256> nd;
  NamedState<mpfr256> state;
  if (exact) {
    NamedState<rational> st;
    const Mat<rational> q =
        numerator_and_denominator<rational>(r.op, all, all_gates(c), c.opt, c.want_state ? &st : nullptr);
    nd = q.unaryExpr([](const rational& x) { return to_mpfr(x); });
    for (const auto& [name, m] : st.parts)
      state.parts.emplace_back(name, Mat<mpfr256>(m.unaryExpr([](const rational& x) { return to_mpfr(x); })));
  } else {
    nd = numerator_and_denominator<mpfr256>(r.op, all, all_gates(c), c.opt, c.want_state ? &state : nullptr);
  }
  nd = Mat<mpfr256>(nd.bottomRows(n));
  const mpfr256 eps = from_rational<mpfr256>(c.opt.eps);
  c.expected.resize(n, dv);
  c.forward = nd;
  for (Eigen::Index t = 0; t < n; ++t) {
    c.forward(t, dv) = c.opt.normalized ? mpfr256(nd(t, dv) + eps) : mpfr256(1);
    for (Eigen::Index k = 0; k < dv; ++k)
      c.expected(t, k) = c.opt.normalized ? mpfr256(nd(t, k) / c.forward(t, dv)) : nd(t, k);
  }
  if (c.want_state) c.expected_state = state;
  if (r.grad && c.dO.size()) {
    const NamedState<double>* init = c.state_in.parts.empty() ? nullptr : &c.state_in;
    // A long case's exact gradients in MPFR-256, a short one's in rationals. In rationals the denominators of a
    // long case multiply every den_t + ε with γ's and the gates' powers (10 s of a 12 s `hla verify --grad` at
    // n = 64, hla2 normalized with ridge; minutes at n = 300 with gates), and the values are rounded to MPFR-256
    // for the comparison anyway. MPFR-256's own error (~2^-250 of the terms' magnitudes) is far below the bound a
    // case is judged with (≥ 2·γ_h(u)·M of those terms, u ≥ 2^-53, plus the underflow floor), so the decision is
    // exact arithmetic's: tests/test_verify.cpp holds the two to 2^-100 of every bound.
    const bool rational_grad = exact && c.n() <= kLiteralMaxN;
    c.expected_grad =
        expected_gradients(r.op, c.in, c.opt, init, c.dO, rational_grad, c.gamma.size() ? &c.gamma : nullptr);
  }
  set_bounds(c, r, {r.declared(), false});
}

void bound_as(Case& c, const Request& r, const EmulatedFormat& f) { set_bounds(c, r, f, true); }

}  // namespace hla::verify::ext
