// The diagnosis catalogue (diagnosis.hpp): registered forms, other operators, named mistakes.
#include "verify/diagnosis.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/exactness.hpp"
#include "verify/cases.hpp"

namespace hla::verify::ext {
namespace {

template <class T> using Out = std::optional<Mat<T>>;
template <class T> using P = Problem<T>;

// Chunk widths at which chunk-dependent candidates are tried: the small ones a test suite uses and the
// powers of two kernels use.
const std::vector<int> kChunkWidths{1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256};

// Q, K, [V 1]: numerator columns and the denominator column in one evaluation.
template <class T> P<T> with_ones(const P<T>& p) {
  P<T> a{p.Q, p.K, Mat<T>(p.V.rows(), p.V.cols() + 1)};
  a.V.leftCols(p.V.cols()) = p.V;
  a.V.col(p.V.cols()).setConstant(T(1));
  return a;
}

enum class Division { spec, no_eps, abs_den, eps_after, signed_clamp };
// num / (den + ε) in one of the ways an implementation might write it; nullopt on a zero denominator. signed_clamp:
// num / (sign(den) · max(|den|, ε)) (fla's normalized form; equal to ε missing wherever |den| ≥ ε).
template <class T> Out<T> divide(const Mat<T>& nd, const rational& eps, Division how) {
  const Eigen::Index dv = nd.cols() - 1;
  const T e = from_rational<T>(eps);
  Mat<T> o(nd.rows(), dv);
  for (Eigen::Index t = 0; t < nd.rows(); ++t) {
    T den = nd(t, dv);
    if (how == Division::abs_den && den < 0) den = -den;
    if (how == Division::signed_clamp) den = den >= 0 ? (den < e ? e : den) : (-den < e ? T(-e) : den);
    if (how == Division::spec || how == Division::abs_den) den += e;
    if (den == 0) return std::nullopt;
    const T after = how == Division::eps_after ? from_rational<T>(eps) : T(0);
    for (Eigen::Index c = 0; c < dv; ++c) o(t, c) = nd(t, c) / den + after;
  }
  return o;
}

// The operator through the harness's path (operator_value), nullopt where it is not defined (vanishing
// normalizer, options the operator does not take).
template <class T> Out<T> exact_or_none(const std::string& op, const P<T>& p, const Options& o) {
  if (!caps_allow(registry<T>().reference(op).caps, o)) return std::nullopt;
  try {
    return operator_value<T>(op, p, o);
  } catch (const NumericalError&) { return std::nullopt; }
}

template <class T> Out<T> normalized_from(const std::string& op, const P<T>& p, const Options& o, Division how) {
  Options un = o;
  un.normalized = false;
  Out<T> nd = exact_or_none(op, with_ones(p), un);
  if (!nd) return std::nullopt;
  if (!o.normalized) return Mat<T>(nd->leftCols(nd->cols() - 1));
  return divide(*nd, o.eps, how);
}

// Second-order literal sums with another decay exponent or mask than SPEC's (the mistakes' own definition):
//   hla2:  Σ_{j≤t} Σ_{i≤j (masked) | i≤t} γ^{e(t,i,j)} (q_t·k_i)(q_j·k_i) v_j  + λ Σ_{j≤t} γ^(t−j) (q_t·q_j) v_j
//   ahla:  Σ_{i≤t} Σ_{j≤i} γ^{e(t,i,j)} (q_t·k_i)(q_i·k_j) v_j
// with every ≤ of the masks a < when `strict`; normalization as SPEC's. O(n³): only on short cases.
struct SecondOrderSum {
  std::function<long(long t, long i, long j)> exponent;
  bool strict = false;
};
template <class T>
Out<T> second_order_sum(const std::string& op, const P<T>& p, const Options& o, const SecondOrderSum& sum) {
  const OpId id = op_id(op);
  const auto& e = sum.exponent;
  const long n = p.Q.rows(), diag = sum.strict ? 0 : 1;  // the masks run to t − 1 + diag
  if (n > 64) return std::nullopt;
  std::vector<T> g(static_cast<std::size_t>(3 * n + 1));
  g[0] = 1;
  const T gamma = from_rational<T>(o.gamma);
  for (std::size_t k = 1; k < g.size(); ++k) g[k] = g[k - 1] * gamma;
  const Mat<T> qk = p.Q * p.K.transpose(), qq = p.Q * p.Q.transpose();
  const Eigen::Index dv = p.V.cols();
  Mat<T> nd = Mat<T>::Zero(n, dv + 1);
  const T ridge = from_rational<T>(o.ridge);
  auto add = [&](long t, long j, const T& w) {
    nd.row(t).leftCols(dv) += w * p.V.row(j);
    nd(t, dv) += w;
  };
  for (long t = 0; t < n; ++t) {
    if (id == OpId::ahla) {
      for (long i = 0; i < t + diag; ++i)
        for (long j = 0; j < i + diag; ++j) add(t, j, g[static_cast<std::size_t>(e(t, i, j))] * qk(t, i) * qk(i, j));
    } else {
      for (long j = 0; j < t + diag; ++j) {
        const long last = id == OpId::hla2 ? j : t;  // the mask i ≤ j (hla2-unmasked: i ≤ t)
        for (long i = 0; i < last + diag; ++i) add(t, j, g[static_cast<std::size_t>(e(t, i, j))] * qk(t, i) * qk(j, i));
        if (o.ridge != 0) add(t, j, ridge * g[static_cast<std::size_t>(t - j)] * qq(t, j));
      }
    }
  }
  if (!o.normalized) return Mat<T>(nd.leftCols(dv));
  return divide(nd, o.eps, Division::spec);
}

// hla2 by the u-form chunk algorithm of examples/torch_hla2_chunked.py (SPEC's operator when carry_shift = 0):
// per chunk of w tokens, u_a = γ^(a+1+shift) S q_a + Σ_{b≤a} γ^(a−b) (q_a·k_b) k_b, then a decayed linear-attention
// chunk over (Q, U, [V 1]) whose carries are decayed γ^(2(a+1+shift)) and γ^(a+1+shift) (ridge).
template <class T> Out<T> u_form_chunked(const P<T>& in, const Options& o, long w, long carry_shift) {
  const P<T> p = with_ones(in);
  const long n = p.Q.rows();
  const Eigen::Index d = p.Q.cols(), dv = p.V.cols();
  const T gamma = from_rational<T>(o.gamma), ridge = from_rational<T>(o.ridge);
  std::vector<T> g(static_cast<std::size_t>(2 * w + 2));  // γ^0 .. γ^(2w+1)
  g[0] = 1;
  for (std::size_t k = 1; k < g.size(); ++k) g[k] = g[k - 1] * gamma;
  auto pw = [&](long k) { return g[static_cast<std::size_t>(k)]; };
  Mat<T> S = Mat<T>::Zero(d, d), Cu = Mat<T>::Zero(d, dv), Cq = Mat<T>::Zero(d, dv), nd(n, dv);
  for (long s = 0; s < n; s += w) {
    const long L = std::min<long>(w, n - s);
    const Mat<T> Qc = p.Q.middleRows(s, L), Kc = p.K.middleRows(s, L), Vc = p.V.middleRows(s, L);
    Mat<T> D1 = Mat<T>::Zero(L, L), D2 = Mat<T>::Zero(L, L);
    for (long a = 0; a < L; ++a)
      for (long b = 0; b <= a; ++b) {
        D1(a, b) = pw(a - b);
        D2(a, b) = pw(2 * (a - b));
      }
    ColVec<T> up(L), up2(L), tail(L), tail2(L);
    for (long a = 0; a < L; ++a) {
      up(a) = pw(a + 1 + carry_shift);
      up2(a) = pw(2 * (a + 1 + carry_shift));
      tail(a) = pw(L - 1 - a);
      tail2(a) = pw(2 * (L - 1 - a));
    }
    const Mat<T> QK = Qc * Kc.transpose();
    const Mat<T> U = up.asDiagonal() * (Qc * S) + Mat<T>(D1.cwiseProduct(QK)) * Kc;
    const Mat<T> QU = Qc * U.transpose();
    Mat<T> O = up2.asDiagonal() * (Qc * Cu) + Mat<T>(D2.cwiseProduct(QU)) * Vc;
    if (o.ridge != 0) {
      const Mat<T> QQ = Qc * Qc.transpose();
      O += ridge * Mat<T>(up.asDiagonal() * (Qc * Cq) + Mat<T>(D1.cwiseProduct(QQ)) * Vc);
    }
    nd.middleRows(s, L) = O;
    S = pw(L) * S + Kc.transpose() * (tail.asDiagonal() * Kc);
    Cu = pw(2 * L) * Cu + U.transpose() * (tail2.asDiagonal() * Vc);
    Cq = pw(L) * Cq + Qc.transpose() * (tail.asDiagonal() * Vc);
  }
  if (!o.normalized) return Mat<T>(nd.leftCols(dv - 1));
  return divide(nd, o.eps, Division::spec);
}

template <class T> void add_registered(std::vector<Candidate<T>>& out, const std::string& op) {
  for (const Entry<T>& e : registry<T>().entries()) {
    if (e.op != op || e.form == "reference") continue;
    // Only forms every scalar has (not the floating-only ones, e.g. chunked-naive-cumprod): the battery pairs the
    // rational and float64 candidate lists index by index.
    if (!registry<rational>().try_find(e.op, e.form, e.variant)) continue;
    const bool by_width = e.caps.chunk && e.target == Target::paper_formula;
    const std::vector<int> widths = by_width ? kChunkWidths : std::vector<int>{16};
    for (int w : widths) {
      const Entry<T>* entry = &e;
      Candidate<T> c;
      c.key = e.key() + (by_width ? fmt::format("@w={}", w) : "");
      c.description = e.cite + (by_width ? fmt::format(" (chunk width {})", w) : "");
      // the ledger claim that decides a paper formula against the operator (the registry entry's; results/claims.md)
      c.claim = e.target == Target::paper_formula ? e.claim : "";
      c.eval = [entry, w](const P<T>& p, const Options& o) -> Out<T> {
        if (!caps_allow(entry->caps, o)) return std::nullopt;
        if (entry->caps.chunk && w > 1 && p.Q.rows() <= w && w != 16) return std::nullopt;  // one chunk: nothing new
        Options ow = o;
        ow.chunk = w;
        ow.threads = 1;
        try {
          return (*entry)(p, ow).O;
        } catch (const NumericalError&) { return std::nullopt; }
      };
      out.push_back(std::move(c));
    }
  }
}

template <class T> void add_other_operators(std::vector<Candidate<T>>& out, const std::string& op) {
  for (const OperatorInfo& info : kOperators) {
    const std::string other(info.name);
    if (other == op || !info.streaming) continue;
    out.push_back({"operator:" + other, "SPEC's " + other + " operator instead of " + op, "",
                   [other](const P<T>& p, const Options& o) { return exact_or_none(other, p, o); }});
  }
}

// The ways of dividing by the normalizer other than SPEC's num / (den + ε): key, description, division, and whether
// it needs ε > 0 (else it is SPEC's). The fixed-γ and the gated catalogues both list them.
struct DivisionMistake {
  const char* key;
  const char* what;
  Division how;
  bool needs_eps;
};
const std::vector<DivisionMistake> kDivisionMistakes{
    {"convention:signed-clamp",
     "normalized by sign(den) · max(|den|, ε) (fla's form; on cases where every |den| ≥ ε the same as ε "
     "missing)",
     Division::signed_clamp, true},
    {"mistake:eps-missing", "normalized without ε: num / den", Division::no_eps, true},
    {"mistake:eps-abs-den", "normalized by |den| + ε", Division::abs_den, false},
    {"mistake:eps-after-division", "ε added after the division: num / den + ε", Division::eps_after, true}};

template <class T> void add_mistakes(std::vector<Candidate<T>>& out, const std::string& op) {
  const OpId id = op_id(op);
  auto add = [&](std::string key, std::string what, std::function<Out<T>(const P<T>&, const Options&)> f) {
    out.push_back({"mistake:" + std::move(key), std::move(what), "", std::move(f)});
  };
  add("output-before-update",
      "o_t read from the state before token t is added (and before its decay): only tokens < t reach o_t",
      [op](const P<T>& p, const Options& o) -> Out<T> {
        // The exact streaming form, stepped one token at a time: o_t is the read-out of state_{t−1} for a token
        // with k = v = 0 at γ = 1 (no delta, no decay).
        const auto [form, variant] = streaming_form(op, o);
        const Entry<T>& e = registry<T>().find(op, form, variant);
        if (!caps_allow(e.caps, o) || !e.caps.state) return std::nullopt;
        Options read = o;
        read.gamma = 1;
        const Eigen::Index n = p.Q.rows(), d = p.Q.cols(), dv = p.V.cols();
        Mat<T> O(n, dv);
        NamedState<T> st;
        try {
          for (Eigen::Index t = 0; t < n; ++t) {
            const P<T> probe{p.Q.row(t), Mat<T>::Zero(1, d), Mat<T>::Zero(1, dv)};
            O.row(t) = e(probe, read, t ? &st : nullptr).O.row(0);
            st = e(slice_rows(p, t, t + 1), o, t ? &st : nullptr).state;
          }
        } catch (const NumericalError&) { return std::nullopt; }
        return O;
      });
  add("swap-qk", "queries and keys swapped", [op](const P<T>& p, const Options& o) {
    return exact_or_none(op, P<T>{p.K, p.Q, p.V}, o);
  });
  add("no-decay", "decay γ ignored (computed at γ = 1)", [op](const P<T>& p, const Options& o) -> Out<T> {
    if (o.gamma == 1) return std::nullopt;
    Options u = o;
    u.gamma = 1;
    return exact_or_none(op, p, u);
  });
  add("decay-squared", "decay applied twice per step (γ² in place of γ)",
      [op](const P<T>& p, const Options& o) -> Out<T> {
        if (o.gamma == 1) return std::nullopt;
        Options u = o;
        u.gamma = o.gamma * o.gamma;
        return exact_or_none(op, p, u);
      });
  for (const DivisionMistake& m : kDivisionMistakes)
    out.push_back({m.key, m.what, "", [op, m](const P<T>& p, const Options& o) -> Out<T> {
                     if (!o.normalized || (m.needs_eps && o.eps == 0)) return std::nullopt;
                     return normalized_from(op, p, o, m.how);
                   }});
  add("normalization-flipped", "normalized where SPEC's is not, or not where it is",
      [op](const P<T>& p, const Options& o) {
        Options u = o;
        u.normalized = !o.normalized;
        return exact_or_none(op, p, u);
      });
  add("ridge-missing", "ridge λ ignored", [op](const P<T>& p, const Options& o) -> Out<T> {
    if (o.ridge == 0) return std::nullopt;
    Options u = o;
    u.ridge = 0;
    return exact_or_none(op, p, u);
  });
  add("ridge-numerator-only", "ridge λ in the numerator but not in the denominator",
      [op](const P<T>& p, const Options& o) -> Out<T> {
        if (o.ridge == 0 || !o.normalized) return std::nullopt;
        Options un = o, plain = o;
        un.normalized = plain.normalized = false;
        plain.ridge = 0;
        Out<T> num = exact_or_none(op, p, un), nd = exact_or_none(op, with_ones(p), plain);
        if (!num || !nd) return std::nullopt;
        Mat<T> mixed = *nd;
        mixed.leftCols(p.V.cols()) = *num;
        return divide(mixed, o.eps, Division::spec);
      });
  if (operator_info(op).options.ridge)
    add("ridge-undecayed", "ridge term λ Σ_j (q_t·q_j) v_j without its decay γ^(t−j)",
        [op](const P<T>& p, const Options& o) -> Out<T> {
          if (o.ridge == 0 || o.gamma == 1) return std::nullopt;
          Options plain = o, lin;
          plain.ridge = 0;
          plain.normalized = false;
          Out<T> base = exact_or_none(op, with_ones(p), plain),
                 ridge = exact_or_none("linear", with_ones(P<T>{p.Q, p.Q, p.V}), lin);
          if (!base || !ridge) return std::nullopt;
          Mat<T> nd = *base + from_rational<T>(o.ridge) * *ridge;
          if (!o.normalized) return Mat<T>(nd.leftCols(p.V.cols()));
          return divide(nd, o.eps, Division::spec);
        });
  for (int w : kChunkWidths) {
    if (w == 1) continue;
    add(fmt::format("chunk-reset@w={}", w),
        fmt::format("a chunk form without its carry: the state restarts every {} tokens", w),
        [op, w](const P<T>& p, const Options& o) -> Out<T> {
          const long n = p.Q.rows();
          if (n <= w) return std::nullopt;
          Mat<T> O(n, p.V.cols());
          for (long s = 0; s < n; s += w) {
            const long len = std::min<long>(w, n - s);
            Out<T> r =
                exact_or_none(op, P<T>{p.Q.middleRows(s, len), p.K.middleRows(s, len), p.V.middleRows(s, len)}, o);
            if (!r) return std::nullopt;
            O.middleRows(s, len) = *r;
          }
          return O;
        });
  }
  // The intra-chunk mask written without its diagonal (diff > 0 for diff >= 0): every token's own term is lost,
  // in every chunk alike, so the mistake does not depend on the chunk width.
  if (id == OpId::hla2 || id == OpId::ahla)
    add("mask-diagonal-dropped",
        "the diagonal dropped from the causal mask (an intra-chunk mask diff > 0 for diff >= 0): o_t sums only earlier "
        "tokens, "
        "each through earlier ones",
        [op, ahla = id == OpId::ahla](const P<T>& p, const Options& o) -> Out<T> {
          SecondOrderSum spec;  // SPEC's decay: γ^((t−i)+(t−j)) for hla2, γ^(t−j) for ahla
          spec.exponent = [ahla](long t, long i, long j) { return ahla ? t - j : (t - i) + (t - j); };
          spec.strict = true;
          return second_order_sum(op, p, o, spec);
        });
  // The u-form chunk algorithm (examples/torch_hla2_chunked.py) with its carry decayed γ^a in place of γ^(a+1)
  // (a the token's offset in its chunk): every term that crosses a chunk boundary keeps one γ too many per
  // boundary summary it crosses.
  if (id == OpId::hla2)
    for (int w : kChunkWidths) {
      if (w == 1) continue;
      add(fmt::format("carry-decay-off-by-one@w={}", w),
          fmt::format(
              "the chunk carry's decay exponent off by one (gamma^a for gamma^(a+1) at offset a, chunk width {})", w),
          [w](const P<T>& p, const Options& o) -> Out<T> {
            if (o.gamma == 1 || p.Q.rows() <= w) return std::nullopt;
            return u_form_chunked(p, o, w, -1);
          });
    }
  struct Named {
    const char* key;
    const char* what;
    long (*e)(long t, long i, long j);
  };
  std::vector<Named> exponents;
  if (id == OpId::hla2 || id == OpId::hla2_unmasked) {
    exponents = {
        {"decay-keys-only", "decay γ^(t−i) on the key summary S only (C, m undecayed)",
         [](long t, long i, long) { return t - i; }},
        {"decay-values-only", "decay γ^(t−j) on C, m only (S undecayed)", [](long t, long, long j) { return t - j; }}};
  } else if (id == OpId::ahla) {
    exponents = {{"decay-outer-only", "decay γ^(t−i) on the outer summary only (P undecayed)",
                  [](long t, long i, long) { return t - i; }},
                 {"decay-inner-only", "decay γ^(i−j) on P only (the outer summary undecayed)",
                  [](long, long i, long j) { return i - j; }},
                 {"decay-both-from-t", "decay γ^((t−i)+(t−j)): both summaries decayed from t",
                  [](long t, long i, long j) { return (t - i) + (t - j); }}};
  }
  for (const Named& x : exponents) {
    const auto e = x.e;
    add(x.key, x.what, [op, e](const P<T>& p, const Options& o) -> Out<T> {
      if (o.gamma == 1) return std::nullopt;
      return second_order_sum(op, p, o, {e});
    });
  }
}

// ---- the gated catalogue ----------------------------------------------------------------------------------------
using GP = GatedProblem<rational>;

// A gated serial form of fast/gated_forms (SPEC's, or a variant the ledger holds against it), nullopt where it is
// not defined (a vanishing normalizer, gates that are not squares for the proposal).
Out<rational> gated_form(const std::string& op, const std::string& variant, const GP& g, const Options& o) {
  try {
    return gated::run<rational>({op, "serial", variant}, g, o).O;
  } catch (const std::exception&) { return std::nullopt; }
}

// SPEC's gated operator at other gates: the mistakes that amount to using the wrong gate somewhere.
Out<rational> with_gates(const std::string& op, const GP& g, ColVec<rational> gates, const Options& o) {
  return gated_form(op, "spec", {g.qkv, std::move(gates)}, o);
}

// The float64 form of a registered gated serial form (SPEC's, or hla2's printed `paper` one, Algorithm 1's rule), on
// inputs whose Problem::gates are given (`gates` replaces them when set).
Out<double> gated_form_double(const std::string& op, const std::string& variant, const P<double>& p, const Options& o,
                              std::optional<ColVec<double>> gates = std::nullopt) {
  try {
    P<double> q = p;
    if (gates) q.gates = std::move(*gates);
    const Entry<double>& e =
        variant.empty() ? registry<double>().find_exact(op, "serial") : registry<double>().find(op, "serial", variant);
    return e(q, o).O;
  } catch (const std::exception&) { return std::nullopt; }
}

// The gate changes of the catalogue's wrong-gate mistakes, for either scalar: nullopt where a case is too short to
// show them. late: γ_{t−1} for token t; early: γ_{t+1} (the last row's is any value: not compared); at every chunk
// start s = w, 2w, …: γ_s taken as 1 (a carry without the chunk's first gate), or γ_s γ_{s−1} (one gate too many).
template <class T> std::optional<ColVec<T>> late_gates(const ColVec<T>& g) {
  if (g.size() < 3) return std::nullopt;
  ColVec<T> late = g;
  for (Eigen::Index t = 1; t < g.size(); ++t) late(t) = g(t - 1);
  return late;
}
template <class T> std::optional<ColVec<T>> early_gates(const ColVec<T>& g) {
  if (g.size() < 3) return std::nullopt;
  ColVec<T> early = g;
  for (Eigen::Index t = 0; t + 1 < g.size(); ++t) early(t) = g(t + 1);
  early(g.size() - 1) = T(1);
  return early;
}
template <class T> std::optional<ColVec<T>> boundary_gates(const ColVec<T>& g, long w, bool extra) {
  if (g.size() <= w) return std::nullopt;
  ColVec<T> changed = g;
  for (Eigen::Index s = w; s < g.size(); s += w) changed(s) = extra ? T(g(s) * g(s - 1)) : T(1);
  return changed;
}

// How a chunk form decays its carry (the state at the previous chunk's end), in the catalogue's carry mistakes.
enum class CarryRule {
  first_gate_power,    // read at offset a decayed by γ_s^(a+1), handed on by γ_s^L: the chunk's first gate alone
  decayed_twice,       // handed on decayed by the chunk's total gate twice (read right)
  not_decayed,         // handed on not decayed at all (read right)
  tail_decayed_twice,  // only the carry into the last, partial chunk decayed twice: a tail written apart
};

// The decays D(t, j), the weight of token j at t, of a chunk form of width w whose carry follows `rule` (the true
// Γ(t, j) = Π_{r=j+1..t} γ_r within a chunk). `square`: the gates squared (the second pass of hla2's u-form).
template <class T> Mat<T> carry_decays(const ColVec<T>& gamma, long w, CarryRule rule, bool square) {
  const long n = gamma.size();
  ColVec<T> g = gamma;
  if (square) g = g.cwiseProduct(gamma);
  Mat<T> D = Mat<T>::Zero(n, n);
  ColVec<T> end = ColVec<T>::Zero(n);  // token j's weight in the state at the previous chunk's end
  for (long s = 0; s < n; s += w) {
    const long L = std::min<long>(w, n - s);
    T carry(1);
    for (long a = 0; a < L; ++a) {
      const long t = s + a;
      carry *= rule == CarryRule::first_gate_power ? g(s) : g(t);
      T inside(1);
      for (long j = t; j >= s; --j) {
        D(t, j) = inside;
        inside *= g(j);
      }
      for (long j = 0; j < s; ++j) D(t, j) = carry * end(j);
    }
    const bool tail_next = s + L < n && n - (s + L) < w;
    const bool twice = rule == CarryRule::decayed_twice || (rule == CarryRule::tail_decayed_twice && tail_next);
    const T out = rule == CarryRule::not_decayed ? T(1) : twice ? T(carry * carry) : carry;
    for (long j = 0; j < s; ++j) end(j) *= out;
    T inside(1);
    for (long j = s + L - 1; j >= s; --j) {
      end(j) = inside;
      inside *= g(j);
    }
  }
  return D;
}

// linear and hla2 with those decays in place of Γ, in matrix form: linear o = (D ⊙ QKᵀ) V; hla2 in SPEC's u-form
// (two gated linear passes, the second at the squared gates), U = (D ⊙ QKᵀ) K, o = (D² ⊙ QUᵀ) V + λ (D ⊙ QQᵀ) V,
// D² the decays of the squared gates; normalized through [V 1] as SPEC's.
template <class T> Out<T> with_carry_rule(const std::string& op, const P<T>& p, const ColVec<T>& gamma, long w,
                                          CarryRule rule, const Options& o) {
  if (p.Q.rows() <= w) return std::nullopt;
  const P<T> a = with_ones(p);
  const Mat<T> D = carry_decays(gamma, w, rule, false);
  Mat<T> nd;
  if (op_id(op) == OpId::linear) {
    nd = Mat<T>(D.cwiseProduct(a.Q * a.K.transpose())) * a.V;
  } else {
    const Mat<T> U = Mat<T>(D.cwiseProduct(a.Q * a.K.transpose())) * a.K;
    nd = Mat<T>(carry_decays(gamma, w, rule, true).cwiseProduct(a.Q * U.transpose())) * a.V;
    if (o.ridge != 0) nd += from_rational<T>(o.ridge) * (Mat<T>(D.cwiseProduct(a.Q * a.Q.transpose())) * a.V);
  }
  if (!o.normalized) return Mat<T>(nd.leftCols(p.V.cols()));
  return divide(nd, o.eps, Division::spec);
}

// SPEC's gated serial form in T (rationals on the exact cases, float64 on the long ones), from `init` when given, its
// final state into `state` when asked; nullopt where it is undefined (a vanishing normalizer).
template <class T> Out<T> gated_spec(const std::string& op, const P<T>& p, const ColVec<T>& gamma, const Options& o,
                                     const NamedState<T>* init = nullptr, NamedState<T>* state = nullptr) {
  try {
    Run<T> r = gated::run<T>({op, "serial"}, {P<T>{p.Q, p.K, p.V}, gamma}, o, init);
    if (state) *state = std::move(r.state);
    return std::move(r.O);
  } catch (const std::exception&) { return std::nullopt; }
}

// The fixed-γ catalogue's mistakes that do not depend on how the decay is written, with gates (issue 47): `key` names
// one of kGatedAnalogues. Evaluated in T on the inputs and their gates.
template <class T> Out<T> gated_analogue(const std::string& op, const std::string& key, const P<T>& p,
                                         const ColVec<T>& g, const Options& o) {
  const Eigen::Index n = p.Q.rows(), d = p.Q.cols(), dv = p.V.cols();
  Options un = o;  // numerators and denominators, on [V 1]
  un.normalized = false;
  auto finish = [&](const Out<T>& nd, const Options& as) -> Out<T> {
    if (!nd) return std::nullopt;
    if (!as.normalized) return Mat<T>(nd->leftCols(dv));
    return divide(*nd, as.eps, Division::spec);
  };
  if (key == "mistake:output-before-update") {
    // o_t read from the state after token t − 1, before token t's update and gate: a probe token (q_t, k = 0,
    // [v 1] = 0) at gate 1 reads it without changing it.
    const P<T> a = with_ones(p);
    Mat<T> nd(n, dv + 1);
    NamedState<T> st;
    const ColVec<T> one = ColVec<T>::Constant(1, T(1));
    for (Eigen::Index t = 0; t < n; ++t) {
      const Out<T> r =
          gated_spec(op, P<T>{p.Q.row(t), Mat<T>::Zero(1, d), Mat<T>::Zero(1, dv + 1)}, one, un, t ? &st : nullptr);
      NamedState<T> next;
      if (!r || !gated_spec(op, slice_rows(a, t, t + 1), ColVec<T>(g.segment(t, 1)), un, t ? &st : nullptr, &next))
        return std::nullopt;
      nd.row(t) = r->row(0);
      st = std::move(next);
    }
    return finish(nd, o);
  }
  if (key == "mistake:swap-qk") return gated_spec(op, P<T>{p.K, p.Q, p.V}, g, o);
  if (key == "mistake:normalization-flipped") {
    Options u = o;
    u.normalized = !o.normalized;
    return gated_spec(op, p, g, u);
  }
  if (o.ridge == 0) return std::nullopt;  // the ridge mistakes
  Options plain = un;
  plain.ridge = 0;
  if (key == "mistake:ridge-missing") return finish(gated_spec(op, with_ones(p), g, plain), o);
  if (key == "mistake:ridge-numerator-only") {
    if (!o.normalized) return std::nullopt;
    Out<T> num = gated_spec(op, with_ones(p), g, un), nd = gated_spec(op, with_ones(p), g, plain);
    if (!num || !nd) return std::nullopt;
    nd->leftCols(dv) = num->leftCols(dv);
    return finish(nd, o);
  }
  // ridge-undecayed: λ Σ_j (q_t·q_j) [v_j 1] without its gates Γ(t, j)
  Out<T> base = gated_spec(op, with_ones(p), g, plain),
         ridge = exact_or_none("linear", with_ones(P<T>{p.Q, p.Q, p.V}), Options{});
  if (!base || !ridge) return std::nullopt;
  return finish(Mat<T>(*base + from_rational<T>(o.ridge) * *ridge), o);
}

struct GatedAnalogue {
  const char* key;
  const char* what;
};
const std::vector<GatedAnalogue> kGatedAnalogues{
    {"mistake:output-before-update",
     "o_t read from the state before token t is added (and before its gate): only tokens < t reach o_t"},
    {"mistake:swap-qk", "queries and keys swapped"},
    {"mistake:normalization-flipped", "normalized where SPEC's is not, or not where it is"},
    {"mistake:ridge-missing", "ridge lambda ignored"},
    {"mistake:ridge-numerator-only", "ridge lambda in the numerator but not in the denominator"},
    {"mistake:ridge-undecayed",
     "ridge term lambda sum_j (q_t.q_j) v_j without its gates Gamma(t, j) (the ridge read from an undecayed sum)"}};

}  // namespace

std::vector<GatedCandidate> gated_diagnosis_candidates(const std::string& op) {
  const OpId id = op_id(op);
  std::vector<GatedCandidate> out;
  auto add = [&](std::string key, std::string what, std::string claim,
                 std::function<Out<rational>(const GP&, const Options&)> f, bool last_row_undefined = false) {
    out.push_back({std::move(key), std::move(what), std::move(claim), last_row_undefined, std::move(f)});
  };
  // A wrong-gate mistake: SPEC's operator at the gates change(γ) gives, in rationals and in float64.
  auto add_changed = [&](std::string key, std::string what, auto change, bool last_row_undefined = false) {
    GatedCandidate c{std::move(key), std::move(what), "", last_row_undefined,
                     [op, change](const GP& g, const Options& o) -> Out<rational> {
                       auto gates = change(g.gamma);
                       if (!gates) return std::nullopt;
                       return with_gates(op, g, std::move(*gates), o);
                     }};
    c.eval_double = [op, change](const P<double>& p, const Options& o) -> Out<double> {
      auto gates = change(p.gates);
      if (!gates) return std::nullopt;
      return gated_form_double(op, "", p, o, std::move(*gates));
    };
    out.push_back(std::move(c));
  };
  if (id == OpId::hla2) {
    add("gated:hla2/serial/algorithm1-rule",
        "Algorithm 1's decay rule with gates: G_t = gamma_t G_{t-1} + k_t k_t^T C_{t-1} (SPEC's keeps gamma_t^2 "
        "G_{t-1} + "
        "gamma_t k_t (k_t^T C_{t-1}))",
        "gated.hla2.algorithm1-rule",
        [](const GP& g, const Options& o) { return gated_form("hla2", "algorithm1-rule", g, o); });
    out.back().eval_double = [](const P<double>& p, const Options& o) {
      return gated_form_double("hla2", "paper", p, o);  // hla2's printed serial form runs Algorithm 1's rule
    };
    add("gated:hla2/serial/proposal",
        "the gated-HLA proposal's recurrence: G <- a_t G + k k^T (gamma_t C), a_t = sqrt(gamma_t) (G must keep "
        "gamma_t^2)",
        "gated.hla2.proposal", [](const GP& g, const Options& o) { return gated_form("hla2", "proposal", g, o); });
  }
  // The fixed-γ catalogue's division mistakes (ε's placement, the signed clamp) with gates: SPEC's gated numerators
  // and denominators (the gated serial form on [V 1]) divided another way.
  for (const DivisionMistake& m : kDivisionMistakes) {
    GatedCandidate c{m.key, m.what, "", false, [op, m](const GP& g, const Options& o) -> Out<rational> {
                       if (!o.normalized || (m.needs_eps && o.eps == 0)) return std::nullopt;
                       Options un = o;
                       un.normalized = false;
                       const Out<rational> nd = gated_form(op, "spec", {with_ones(g.qkv), g.gamma}, un);
                       return nd ? divide(*nd, o.eps, m.how) : std::nullopt;
                     }};
    c.eval_double = [op, m](const P<double>& p, const Options& o) -> Out<double> {
      if (!o.normalized || (m.needs_eps && o.eps == 0)) return std::nullopt;
      Options un = o;
      un.normalized = false;
      P<double> a = with_ones(p);
      a.gates = p.gates;
      const Out<double> nd = gated_form_double(op, "", a, un);
      return nd ? divide(*nd, o.eps, m.how) : std::nullopt;
    };
    out.push_back(std::move(c));
  }
  for (const GatedAnalogue& m : kGatedAnalogues) {
    if (std::string(m.key).rfind("mistake:ridge", 0) == 0 && !operator_info(op).options.ridge) continue;
    GatedCandidate c{m.key, m.what, "", false, [op, key = std::string(m.key)](const GP& g, const Options& o) {
                       return gated_analogue<rational>(op, key, g.qkv, g.gamma, o);
                     }};
    c.eval_double = [op, key = std::string(m.key)](const P<double>& p, const Options& o) {
      return gated_analogue<double>(op, key, p, p.gates, o);
    };
    out.push_back(std::move(c));
  }
  add_changed("mistake:gates-late",
              "gates misaligned by one token: gamma_{t-1} used for token t (a shift of the gates by one)",
              [](const auto& g) { return late_gates(g); });
  add_changed(
      "mistake:gates-early", "gates misaligned by one token: gamma_{t+1} used for token t (the last row not compared)",
      [](const auto& g) { return early_gates(g); }, true);
  for (int w : kChunkWidths) {
    if (w == 1) continue;
    // Each boundary gate changed: the carry into a chunk starting at s decayed without γ_s, or with γ_{s−1} too.
    add_changed(fmt::format("mistake:carry-without-first-gate@w={}", w),
                fmt::format("a chunk form whose carry is decayed by the product without the chunk's first gate "
                            "(Pi_{{r=s+1..t}} for Pi_{{r=s..t}}, chunk width {})",
                            w),
                [w](const auto& g) { return boundary_gates(g, w, false); });
    add_changed(
        fmt::format("mistake:carry-extra-gate@w={}", w),
        fmt::format("a chunk form whose carry is decayed by one gate too many (Pi_{{r=s-1..t}}: the previous chunk's "
                    "last gate too, chunk width {})",
                    w),
        [w](const auto& g) { return boundary_gates(g, w, true); });
    if (id != OpId::linear && id != OpId::hla2) continue;
    struct Rule {
      CarryRule rule;
      std::string key, what;
    };
    for (const Rule& r :
         {Rule{CarryRule::first_gate_power, "carry-first-gate-power",
               "decayed by the chunk's first gate to a power (gamma_s^(a+1) at offset a, for Pi_{r=s..s+a} gamma_r)"},
          Rule{CarryRule::decayed_twice, "carry-decayed-twice",
               "handed on decayed twice by the chunk's total gate (its product squared)"},
          Rule{CarryRule::not_decayed, "carry-not-decayed",
               "handed on without the chunk's decay (S <- S + the chunk's own terms)"},
          Rule{CarryRule::tail_decayed_twice, "tail-carry-decayed-twice",
               "decayed twice by the last full chunk's total gate into the tail chunk only (n not a multiple of w: "
               "the tail computed from the wrong carry)"}}) {
      GatedCandidate c{fmt::format("mistake:{}@w={}", r.key, w),
                       fmt::format("a chunk form whose carry is {} (chunk width {})", r.what, w), "", false,
                       [op, w, rule = r.rule](const GP& g, const Options& o) {
                         return with_carry_rule<rational>(op, g.qkv, g.gamma, w, rule, o);
                       }};
      c.eval_double = [op, w, rule = r.rule](const P<double>& p, const Options& o) {
        return with_carry_rule<double>(op, p, p.gates, w, rule, o);
      };
      out.push_back(std::move(c));
    }
  }
  return out;
}

bool state_in_undecayed(const std::string& op, const std::vector<CarriedOutputs>& cases) {
  bool distinguishable = false;
  for (const CarriedOutputs& c : cases) {
    if (c.gamma.size() == 0 || c.state_in.parts.empty()) return false;
    ColVec<mpfr256> g = c.gamma.unaryExpr([](double x) { return mpfr256(x); });
    g(0) = 1;
    NamedState<mpfr256> init;
    for (const auto& [name, m] : c.state_in.parts)
      init.parts.emplace_back(name, m.unaryExpr([](double x) { return mpfr256(x); }));
    Mat<mpfr256> want;
    try {
      want = gated::run<mpfr256>({op, "serial"}, {convert_problem<mpfr256>(c.in), g}, c.opt, &init).O;
    } catch (const std::exception&) { return false; }
    for (Eigen::Index i = 0; i < want.size(); ++i) {
      const double w = want(i).convert_to<double>(),
                   tol = c.bound(i) + 1e3 * std::numeric_limits<float>::epsilon() * std::fabs(w);
      if (!(std::fabs(c.got(i) - w) <= tol)) return false;
      if (std::fabs(c.expected(i).convert_to<double>() - w) > tol) distinguishable = true;
    }
  }
  return distinguishable;
}

std::optional<int> padding_decay_width(const std::string& op, const std::vector<ReturnedState>& states) {
  if (states.empty()) return std::nullopt;
  for (int w : kChunkWidths) {
    bool all = true;
    for (std::size_t k = 0; k < states.size() && all; ++k) {
      const ReturnedState& s = states[k];
      const long pad = (w - s.n % w) % w;
      if (pad == 0) {  // no padding at this width: the mistake would have left this state right
        all = false;
        break;
      }
      const auto [form, variant] = streaming_form(op, s.opt);
      const Entry<double>& e = registry<double>().find(op, form, variant);
      const Problem<double> zeros{Mat<double>::Zero(pad, s.d), Mat<double>::Zero(pad, s.d),
                                  Mat<double>::Zero(pad, s.dv)};
      Options o = s.opt;
      o.normalized = false;
      NamedState<double> padded;
      try {
        padded = e(zeros, o, &s.truth).state;
      } catch (const std::exception&) { return std::nullopt; }
      for (const auto& [name, want] : padded.parts) {
        const Mat<double>& got = s.got.at(name);
        const Mat<double>& bound = s.bound.at(name);
        if (got.rows() != want.rows() || got.cols() != want.cols()) return std::nullopt;
        // float64 evaluation of a few decays: its own error is far below the state's bound
        if (!((got - want).cwiseAbs().array() <= bound.array() + 1e-12 * want.cwiseAbs().array()).all()) all = false;
      }
    }
    if (all) return w;
  }
  return std::nullopt;
}

template <class T> std::vector<Candidate<T>> diagnosis_candidates(const std::string& op) {
  std::vector<Candidate<T>> out;
  add_registered(out, op);
  add_other_operators(out, op);
  add_mistakes(out, op);
  return out;
}
template std::vector<Candidate<rational>> diagnosis_candidates<rational>(const std::string&);
template std::vector<Candidate<double>> diagnosis_candidates<double>(const std::string&);

}  // namespace hla::verify::ext
