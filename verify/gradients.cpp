// Expected gradients and their bounds for `hla verify --grad` (gradients.hpp).
#include "verify/gradients.hpp"

#include <fmt/core.h>

#include <cmath>

#include "core/inputs.hpp"
#include "core/operators.hpp"
#include "core/registry.hpp"
#include "fast/backward/dual.hpp"
#include "fast/backward/gated.hpp"
#include "fast/backward/magnitude.hpp"
#include "fast/backward/passes.hpp"
#include "numerics/bounds.hpp"
#include "numerics/gradient_checks.hpp"

// The gated backward is instantiated once, in verify/gated_backward.cpp.
HLA_GATED_BACKWARD_SCALARS(extern)

namespace hla::verify::ext {
namespace {

using backward::Gradients;
using backward::Pass;

template <class T> Mat<T> exactly(const Mat<double>& m) {
  return m.unaryExpr([](double x) { return from_double<T>(x); });
}
Mat<Magnitude> magnitudes_of(const Mat<double>& m) {
  return m.unaryExpr([](double x) { return Magnitude(x, 0); });
}
template <class T, class F> NamedState<T> map_state(const NamedState<double>& s, F&& f) {
  NamedState<T> out;
  for (const auto& [name, m] : s.parts) out.parts.emplace_back(name, f(m));
  return out;
}
template <class T> Mat<mpfr256> to_mpfr_matrix(const Mat<T>& m) {
  return m.unaryExpr([](const T& x) { return to_mpfr(x); });
}

template <class T> GradientValues exact_gradients(const std::string& op, const Problem<double>& in, const Options& opt,
                                                  const NamedState<double>* init, const Mat<double>& dO,
                                                  const ColVec<double>* gates) {
  const Problem<T> p{exactly<T>(in.Q), exactly<T>(in.K), exactly<T>(in.V)};
  std::optional<NamedState<T>> s;
  if (init) s = map_state<T>(*init, [](const Mat<double>& m) { return exactly<T>(m); });
  if (gates) {
    const backward::GatedGradients<T> g =
        backward::gated_backward<T>(op, {p, exactly<T>(Mat<double>(*gates))}, opt, s ? &*s : nullptr, exactly<T>(dO));
    GradientValues v{
        to_mpfr_matrix(g.dQ), to_mpfr_matrix(g.dK), to_mpfr_matrix(g.dV), to_mpfr_matrix(Mat<T>(g.dgamma)), {}};
    for (const auto& [name, m] : g.dstate.parts) v.dstate.parts.emplace_back(name, to_mpfr_matrix(m));
    return v;
  }
  const Gradients<T> g =
      backward::run_pass<T>(op, Pass::serial, p, opt, s ? &*s : nullptr, exactly<T>(dO), fast::DecayRule::corrected, 0);
  GradientValues v{to_mpfr_matrix(g.dQ), to_mpfr_matrix(g.dK), to_mpfr_matrix(g.dV), {}, {}};
  for (const auto& [name, m] : g.dstate.parts) v.dstate.parts.emplace_back(name, to_mpfr_matrix(m));
  return v;
}

// The augmented problem's state for an initial state of op: the value summary carries the denominator's
// summary as one more column (hla2: C ← [C m], G ← [G h]; ahla: P ← [P m], E ← [E n]; linear: S ← [S z]).
NamedState<double> augmented_state(const std::string& op, const NamedState<double>& s) {
  NamedState<double> out = s;
  for (auto& [name, m] : out.parts)
    for (const auto& [matrix, vector] : operator_info(op).summaries)
      if (!matrix.empty() && name == matrix) {
        Mat<double> a(m.rows(), m.cols() + 1);
        a << m, s.at(std::string(vector));
        m = a;
      }
  return out;
}

Problem<double> with_ones(const Problem<double>& in) {
  Problem<double> a = in;
  a.V.conservativeResize(Eigen::NoChange, in.V.cols() + 1);
  a.V.col(in.V.cols()).setOnes();
  return a;
}

// The serial backward on magnitudes (with gates: the gated one, which also bounds ∂L/∂γ; dgamma is empty without).
backward::GatedGradients<Magnitude> magnitude_run(const std::string& op, const Problem<double>& in, const Options& opt,
                                                  const NamedState<double>* init, const Mat<double>& upstream,
                                                  const ColVec<double>* gates) {
  const Problem<Magnitude> p{magnitudes_of(in.Q), magnitudes_of(in.K), magnitudes_of(in.V)};
  std::optional<NamedState<Magnitude>> s;
  if (init) s = map_state<Magnitude>(*init, [](const Mat<double>& m) { return magnitudes_of(m); });
  Options un = opt;
  un.normalized = false;
  if (gates)
    return backward::gated_backward<Magnitude>(op, {p, magnitudes_of(Mat<double>(*gates))}, un, s ? &*s : nullptr,
                                               magnitudes_of(upstream));
  Gradients<Magnitude> g = backward::run_pass<Magnitude>(op, Pass::serial, p, un, s ? &*s : nullptr,
                                                         magnitudes_of(upstream), fast::DecayRule::corrected, 0);
  return {std::move(g.dQ), std::move(g.dK), std::move(g.dV), {}, std::move(g.dstate)};
}

// 2·γ_h·M per entry, h the larger of the magnitude run's depth and `h_min`; plus `extra` (same shape) if given.
Mat<double> entry_bounds(const Mat<Magnitude>& m, double u, long h_min, const Mat<Magnitude>* extra,
                         Eigen::Index cols) {
  Mat<double> b(m.rows(), cols);
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < cols; ++j) {
      const long h = std::max<long>(h_min, m(i, j).k);
      b(i, j) = 2 * bounds::gamma_h(h, u) * m(i, j).v + (extra ? (*extra)(i, j).v : 0.0);
      // 0 · ∞ in the magnitude run (a zero magnitude times an unbounded upstream error): no finite bound, never a
      // NaN that a comparison would read as 0.
      if (std::isnan(b(i, j))) b(i, j) = INFINITY;
    }
  return b;
}

}  // namespace

bool has_gradient_battery(const std::string& op) { return backward::has_pass(op, Pass::serial); }

GradientValues expected_gradients(const std::string& op, const Problem<double>& in, const Options& opt,
                                  const NamedState<double>* init, const Mat<double>& dO, bool exact,
                                  const ColVec<double>* gates) {
  return exact ? exact_gradients<rational>(op, in, opt, init, dO, gates)
               : exact_gradients<mpfr256>(op, in, opt, init, dO, gates);
}

GradientBounds gradient_bounds(const std::string& op, const Problem<double>& in, const Options& opt,
                               const NamedState<double>* init, const Mat<double>& dO, double u, long h,
                               const Mat<mpfr256>* forward, const Mat<double>* forward_bound,
                               const ColVec<double>* gates, const Mat<double>* abs_terms) {
  const long h_min = 2 * h;
  GradientBounds b;
  // dgamma of a kernel in cumulative log-gates (gradients.hpp): every pair's term reaches every gate up to its t, each
  // with a factor ≤ e/γ_r, whatever cancels; `up` the upstream magnitudes (of the numerator columns, and of the
  // denominator's when normalized), `up_err` their own error. A few more roundings than the serial depth: exp, log.
  auto log_gate_bound = [&](const Mat<double>& up, const Mat<double>* up_err) {
    if (!gates || !abs_terms) return;
    const Eigen::Index n = in.Q.rows();
    const double e = operator_info(op).gate_degree, gam = bounds::gamma_h(h_min + 16, u);
    double acc = 0, acc_err = 0;
    Mat<double> out(n, 1);
    for (Eigen::Index t = n - 1; t >= 0; --t) {
      for (Eigen::Index j = 0; j < up.cols(); ++j) {
        acc += up(t, j) * (*abs_terms)(t, j);
        if (up_err) acc_err += (*up_err)(t, j) * (*abs_terms)(t, j);
      }
      out(t, 0) = e / (*gates)(t) * (2 * gam * acc + acc_err);
    }
    b.dgamma = b.dgamma.cwiseMax(out);
  };
  if (!opt.normalized) {
    const backward::GatedGradients<Magnitude> m = magnitude_run(op, in, opt, init, dO, gates);
    b.dQ = entry_bounds(m.dQ, u, h_min, nullptr, m.dQ.cols());
    b.dK = entry_bounds(m.dK, u, h_min, nullptr, m.dK.cols());
    b.dV = entry_bounds(m.dV, u, h_min, nullptr, m.dV.cols());
    if (gates) b.dgamma = entry_bounds(Mat<Magnitude>(m.dgamma), u, h_min, nullptr, 1);
    log_gate_bound(dO.cwiseAbs(), nullptr);
    for (const auto& [name, part] : m.dstate.parts)
      b.dstate.parts.emplace_back(name, entry_bounds(part, u, h_min, nullptr, part.cols()));
    return b;
  }
  // Normalized: the upstream g = (dO/D, −⟨dO, N⟩/D²) of the unnormalized operator on [V 1], and a bound on
  // its error δg from the forward's bounds bN, bD on N and D (first order in them, with the division's own
  // rounding); rows whose D is within its bound of 0 bound nothing.
  const Eigen::Index n = in.Q.rows(), dv = in.V.cols();
  Mat<double> g(n, dv + 1), dg(n, dv + 1);
  for (Eigen::Index t = 0; t < n; ++t) {
    const double D = std::fabs((*forward)(t, dv).convert_to<double>()), bD = (*forward_bound)(t, dv);
    const double lower = D - bD;
    double gD = 0, dgD = 0;
    for (Eigen::Index j = 0; j < dv; ++j) {
      const double N = std::fabs((*forward)(t, j).convert_to<double>()), bN = (*forward_bound)(t, j),
                   w = std::fabs(dO(t, j));
      g(t, j) = w / D;
      dg(t, j) = lower > 0 ? w * bD / (D * lower) + u * g(t, j) : INFINITY;
      gD += w * N / (D * D);
      dgD += lower > 0 ? w * (bN / (lower * lower) + N * (2 * D * bD + bD * bD) / (D * D * lower * lower)) : INFINITY;
    }
    g(t, dv) = gD;
    dg(t, dv) = dgD + 2 * u * gD;
  }
  const Problem<double> aug = with_ones(in);
  std::optional<NamedState<double>> init_aug;
  if (init) init_aug = augmented_state(op, *init);
  const NamedState<double>* ia = init_aug ? &*init_aug : nullptr;
  const backward::GatedGradients<Magnitude> m = magnitude_run(op, aug, opt, ia, g, gates),
                                            e = magnitude_run(op, aug, opt, ia, dg, gates);
  b.dQ = entry_bounds(m.dQ, u, h_min, &e.dQ, m.dQ.cols());
  b.dK = entry_bounds(m.dK, u, h_min, &e.dK, m.dK.cols());
  b.dV = entry_bounds(m.dV, u, h_min, &e.dV, dv);  // the ones column has no gradient to return
  if (gates) {
    const Mat<Magnitude> eg = e.dgamma;
    b.dgamma = entry_bounds(Mat<Magnitude>(m.dgamma), u, h_min, &eg, 1);
    log_gate_bound(g, &dg);
  }
  return b;
}

void add_underflow_floor(GradientBounds& b, double floor) {
  for (Mat<double>* m : {&b.dQ, &b.dK, &b.dV, &b.dgamma}) m->array() += floor;
  for (auto& part : b.dstate.parts) part.second.array() += floor;
}

namespace {

using Eval =
    std::function<std::optional<ExactGradients>(const Problem<rational>&, const Options&, const Mat<rational>&)>;

std::optional<ExactGradients> serial_backward(const std::string& op, const Problem<rational>& p, const Options& o,
                                              const Mat<rational>& dO,
                                              fast::DecayRule rule = fast::DecayRule::corrected) {
  try {
    const Gradients<rational> g = backward::run_pass<rational>(op, Pass::serial, p, o, nullptr, dO, rule, 0);
    return ExactGradients{g.dQ, g.dK, g.dV};
  } catch (const NumericalError&) { return std::nullopt; }
}

}  // namespace

std::vector<GradientCandidate> gradient_candidates(const std::string& op) {
  std::vector<GradientCandidate> out;
  auto add = [&](std::string key, std::string what, std::string claim, Eval f) {
    out.push_back({"backward:" + std::move(key), std::move(what), std::move(claim), std::move(f)});
  };
  // The paper's serial formula where the harness registers a correction of it (hla2's Algorithm 1).
  const Entry<rational>& printed = registry<rational>().find(op, "serial");
  if (printed.target == Target::paper_formula && registry<rational>().try_find(op, "serial", "corrected"))
    add("paper-decay-rule", "the gradients of Algorithm 1's decayed recurrence as printed (G_t = γG + k kᵀ C_{t−1})",
        printed.claim, [op](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
          if (o.gamma == 1) return std::nullopt;
          return serial_backward(op, p, o, dO, fast::DecayRule::paper);
        });
  add("no-decay", "the gradients at γ = 1: decay left out of the backward", "",
      [op](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
        if (o.gamma == 1) return std::nullopt;
        Options u = o;
        u.gamma = 1;
        return serial_backward(op, p, u, dO);
      });
  add("decay-squared", "the gradients with γ² in place of γ", "",
      [op](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
        if (o.gamma == 1) return std::nullopt;
        Options u = o;
        u.gamma = o.gamma * o.gamma;
        return serial_backward(op, p, u, dO);
      });
  if (op_id(op) == OpId::hla2)
    add("unmasked", "the gradients of the unmasked operator (hla2-unmasked): the mask missing in the backward", "",
        [](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
          try {
            const Gradients<rational> g = forward_mode_gradients<rational>(
                p, nullptr, dO, [&](const Problem<Dual<rational>>& dp, const NamedState<Dual<rational>>*) {
                  return reference::hla2(dp, o, false).O;
                });
            return ExactGradients{g.dQ, g.dK, g.dV};
          } catch (const NumericalError&) { return std::nullopt; }
        });
  for (const OperatorInfo& info : kOperators)
    if (const std::string other(info.name); info.backward && other != op)
      add("operator:" + other, "the gradients of SPEC's " + other + " operator", "",
          [other](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
            Options u = o;
            if (!operator_info(other).options.ridge) u.ridge = 0;
            if (u.ridge != o.ridge) return std::nullopt;
            return serial_backward(other, p, u, dO);
          });
  add("normalizer-detached", "the normalizer den_t + ε treated as a constant (detached from the graph)", "",
      [op](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
        if (!o.normalized) return std::nullopt;
        // den_t + ε from the forward on [V 1], then the unnormalized backward with upstream dO_t / den_t
        Options un = o;
        un.normalized = false;
        Problem<rational> aug{p.Q, p.K, Mat<rational>(p.V.rows(), p.V.cols() + 1)};
        aug.V << p.V, Mat<rational>::Ones(p.V.rows(), 1);
        const Mat<rational> nd = registry<rational>().reference(op)(aug, un).O;
        Mat<rational> up = dO;
        for (Eigen::Index t = 0; t < up.rows(); ++t) {
          const rational den = nd(t, p.V.cols()) + o.eps;
          if (den == 0) return std::nullopt;
          up.row(t) /= den;
        }
        return serial_backward(op, p, un, up);
      });
  add("swap-dq-dk", "dq and dk swapped", "",
      [op](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
        auto g = serial_backward(op, p, o, dO);
        if (g) std::swap(g->dQ, g->dK);
        return g;
      });
  for (int w : {1, 2, 3, 4, 8, 16, 32, 64, 128}) {
    add(fmt::format("no-carry@w={}", w),
        fmt::format("a chunk backward without the carry: the state restarts every {} tokens", w), "",
        [op, w](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
          const Eigen::Index n = p.Q.rows();
          if (n <= w) return std::nullopt;
          ExactGradients all{Mat<rational>(n, p.Q.cols()), Mat<rational>(n, p.K.cols()), Mat<rational>(n, p.V.cols())};
          for (Eigen::Index s = 0; s < n; s += w) {
            const Eigen::Index len = std::min<Eigen::Index>(w, n - s);
            auto g = serial_backward(op, slice_rows(p, s, s + len), o, dO.middleRows(s, len));
            if (!g) return std::nullopt;
            all.dQ.middleRows(s, len) = g->dQ;
            all.dK.middleRows(s, len) = g->dK;
            all.dV.middleRows(s, len) = g->dV;
          }
          return all;
        });
    // The other way a chunked backward drops the cross-chunk term: the forward carries the state, the backward
    // treats the carried state as a constant (detached), so no gradient flows through it into earlier chunks.
    add(fmt::format("carry-detached@w={}", w),
        fmt::format("a chunk backward that treats the carried state as a constant: no gradient into earlier chunks "
                    "through it (chunks of {})",
                    w),
        "", [op, w](const auto& p, const Options& o, const auto& dO) -> std::optional<ExactGradients> {
          const Eigen::Index n = p.Q.rows();
          if (n <= w) return std::nullopt;
          const Entry<rational>& serial = registry<rational>().find_exact(op, "serial");
          ExactGradients all{Mat<rational>(n, p.Q.cols()), Mat<rational>(n, p.K.cols()), Mat<rational>(n, p.V.cols())};
          try {
            for (Eigen::Index s = 0; s < n; s += w) {
              const Eigen::Index len = std::min<Eigen::Index>(w, n - s);
              std::optional<NamedState<rational>> carried;
              if (s > 0) carried = serial(slice_rows(p, 0, s), o).state;
              const Gradients<rational> g = backward::run_pass<rational>(
                  op, Pass::serial, slice_rows(p, s, s + len), o, carried ? &*carried : nullptr, dO.middleRows(s, len),
                  fast::DecayRule::corrected, 0);
              all.dQ.middleRows(s, len) = g.dQ;
              all.dK.middleRows(s, len) = g.dK;
              all.dV.middleRows(s, len) = g.dV;
            }
          } catch (const NumericalError&) { return std::nullopt; }
          return all;
        });
  }
  return out;
}

double gradient_magnitude(const std::string& op, const Problem<double>& in, const Options& opt, const Mat<double>& dO,
                          const ColVec<double>* gates) {
  Mat<double> up(dO.rows(), dO.cols() + 1);
  up << dO, Mat<double>::Ones(dO.rows(), 1);
  const backward::GatedGradients<Magnitude> m = magnitude_run(op, with_ones(in), opt, nullptr, up, gates);
  const Mat<Magnitude> dgamma = m.dgamma;
  double big = 0;
  for (const Mat<Magnitude>* x : {&m.dQ, &m.dK, &m.dV, &dgamma})
    for (Eigen::Index i = 0; i < x->size(); ++i) big = std::max(big, (*x)(i).v);
  return big;
}

}  // namespace hla::verify::ext
