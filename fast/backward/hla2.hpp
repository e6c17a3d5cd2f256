// Backward (reverse-mode gradients) of masked second-order HLA, L = Σ_t ⟨dO_t, o_t⟩:
//   1. Hla2Ops: the vector–Jacobian products of the serial form (fast/serial/hla2.hpp: §3.1 online updates,
//      §4.3 decay with DecayRule paper | corrected, Algorithm 1's read-out with ridge λ and ε), driven by
//      recurrence_backward (serial backward, or checkpointed at chunk boundaries).
//   2. hla2_scan_backward: §4.2 "Backward for gradients" — a reverse scan applying the adjoint ⊕* of the
//      masked concatenation (eq. 4.1; its decay-aware version with the exponent that matches the serial
//      recurrence), with checkpoints at chunk (tile) boundaries.
//
// Notation: token t has q, k ∈ R^d (columns), v ∈ R^{1×dv}; X̄ = ∂L/∂X.
//
// Forward (fast/serial/hla2.hpp), with (κ, c) = (γ, 1) for the paper's rule (§4.3, Alg. 1 line 6) and
// (γ², γ) for the corrected rule:
//   G_t = κ G_{t−1} + c k (kᵀ C_{t−1})      h_t = κ h_{t−1} + c k (kᵀ m_{t−1})
//   S_t = γ S_{t−1} + k kᵀ     C_t = γ C_{t−1} + q v     m_t = γ m_{t−1} + q
//   u = qᵀ(S_t + λI),  num = u C_t − qᵀ G_t,  den = u m_t − qᵀ h_t,  o_t = num / (den + ε) (or num)
//
// Read-out adjoint (out_vjp), with (num̄, dēn) from NormalizerVjp:
//   ū = num̄ C_tᵀ + dēn m_tᵀ
//   C̄_t += uᵀ num̄    m̄_t += uᵀ dēn    Ḡ_t −= q num̄    h̄_t −= q dēn    S̄_t += q ū
//   dq  += (S_t + λI) ūᵀ − G_t num̄ᵀ − h_t dēn
// State-gradient recurrence (step_vjp), X̄_t → X̄_{t−1}:
//   S̄_{t−1} = γ S̄_t
//   C̄_{t−1} = γ C̄_t + c k (kᵀ Ḡ_t)         Ḡ_{t−1} = κ Ḡ_t
//   m̄_{t−1} = γ m̄_t + c k (kᵀ h̄_t)         h̄_{t−1} = κ h̄_t
//   dk += (S̄_t + S̄_tᵀ) k + c [Ḡ_t (kᵀC_{t−1})ᵀ + C_{t−1} (kᵀḠ_t)ᵀ + h̄_t (kᵀm_{t−1}) + m_{t−1} (kᵀh̄_t)]
//   dq += C̄_t vᵀ + m̄_t          dv += qᵀ C̄_t
// (S̄ is not assumed symmetric: an initial state S_0 may be any matrix.)
#pragma once

#include "fast/backward/recurrence.hpp"
#include "fast/scan/operators.hpp"  // Hla2Op, and its one compiled copy per scalar
#include "fast/serial/hla2.hpp"

namespace hla::backward {

template <class T> using Hla2X = fast::Hla2State<T, true>;

// The read-out adjoint (see the header comment). Shared by the serial backward and the scan backward.
template <class T> void hla2_out_vjp(const Hla2X<T>& x, const Token<T>& tok, const RowVec<T>& dy, const T& lambda,
                                     bool normalized, const T& eps, Eigen::Index t, Hla2X<T>& bar, TokenGrad<T>& g) {
  const ColVec<T>& q = tok.q;
  RowVec<T> u = q.transpose() * x.S;
  if (lambda != T(0)) u += lambda * q.transpose();
  RowVec<T> num = u * x.C;
  num.noalias() -= q.transpose() * x.G;
  const T den = T((u * x.m)(0, 0) - (q.transpose() * x.h)(0, 0));
  const NormalizerVjp<T> nv(num, T(den + eps), normalized, dy, t);
  RowVec<T> ubar = nv.dnum * x.C.transpose();
  if (normalized) ubar += nv.dden * x.m.transpose();
  bar.C.noalias() += u.transpose() * nv.dnum;
  bar.G.noalias() -= q * nv.dnum;
  bar.S.noalias() += q * ubar;
  g.dq.noalias() += x.S * ubar.transpose();
  if (lambda != T(0)) g.dq += lambda * ubar.transpose();
  g.dq.noalias() -= x.G * nv.dnum.transpose();
  if (normalized) {
    bar.m.noalias() += u.transpose() * nv.dden;
    bar.h.noalias() -= q * nv.dden;
    g.dq -= x.h.col(0) * nv.dden;
  }
}

// Adjoint of a token's deltas (k kᵀ, q v, q) given their gradients (S̄, C̄, m̄) — the last line of step_vjp,
// and the token segment's adjoint in the scan backward.
template <class T> void hla2_delta_vjp(const Hla2X<T>& bar, const Token<T>& tok, TokenGrad<T>& g) {
  g.dk.noalias() += (bar.S + bar.S.transpose()) * tok.k;
  g.dq.noalias() += bar.C * tok.v.transpose();
  g.dq += bar.m.col(0);
  g.dv.noalias() += tok.q.transpose() * bar.C;
}

template <class T> struct Hla2Ops {
  using State = Hla2X<T>;
  T gamma, lambda, eps;
  bool normalized;
  fast::DecayRule rule;

  Hla2Ops(const Options& opt, fast::DecayRule r)
      : gamma(from_rational<T>(opt.gamma)),
        lambda(from_rational<T>(opt.ridge)),
        eps(from_rational<T>(opt.eps)),
        normalized(opt.normalized),
        rule(r) {}

  void step(State& x, const Token<T>& tok) const { fast::hla2_step(x, tok.q, tok.k, tok.v, gamma, rule); }

  void out_vjp(const State& x, const Token<T>& tok, const RowVec<T>& dy, Eigen::Index t, State& bar,
               TokenGrad<T>& g) const {
    hla2_out_vjp(x, tok, dy, lambda, normalized, eps, t, bar, g);
  }

  // prev = X_{t−1}, cur = X_t (unused: the step is linear in the state), bar: X̄_t in, X̄_{t−1} out.
  void step_vjp(const State& prev, const State&, const Token<T>& tok, State& bar, TokenGrad<T>& g) const {
    const ColVec<T>& k = tok.k;
    const T c = rule == fast::DecayRule::corrected ? gamma : T(1);
    const T kappa = rule == fast::DecayRule::corrected ? T(gamma * gamma) : gamma;
    // Cross-summaries G, h (read C_{t−1}, m_{t−1}).
    const RowVec<T> kC = k.transpose() * prev.C;     // kᵀ C_{t−1}
    const T km = k.dot(ColVec<T>(prev.m.col(0)));    // kᵀ m_{t−1}
    const RowVec<T> kGbar = k.transpose() * bar.G;   // kᵀ Ḡ_t
    const T khbar = k.dot(ColVec<T>(bar.h.col(0)));  // kᵀ h̄_t
    g.dk.noalias() += c * (bar.G * kC.transpose() + prev.C * kGbar.transpose());
    g.dk += c * (km * bar.h.col(0) + khbar * prev.m.col(0));
    hla2_delta_vjp(bar, tok, g);  // token deltas of S, C, m
    // X̄_{t−1}.
    bar.S *= gamma;
    bar.C *= gamma;
    bar.C.noalias() += c * (k * kGbar);
    bar.m *= gamma;
    bar.m.col(0) += (c * khbar) * k;
    bar.G *= kappa;
    bar.h *= kappa;
  }
};

// Serial backward (all states stored) or checkpointed backward (chunk = w), see recurrence.hpp.
template <class T> Gradients<T> hla2_backward(const Problem<T>& p, const Options& opt,
                                              const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                              fast::DecayRule rule, Eigen::Index chunk = 0,
                                              BackwardStats* stats = nullptr) {
  return recurrence_backward(Hla2Ops<T>(opt, rule), p, init, dO, chunk, stats);
}

// ---- reverse scan with ⊕* -------------------------------------------------------------------------
//
// A segment is (S, C, m, G, h; ρ = γ^length). The decay-aware masked concatenation used here is
//   A ⊕ B = (ρ_B S_A + S_B, ρ_B C_A + C_B, ρ_B m_A + m_B,
//            ρ_B² G_A + G_B + ρ_B S_B C_A,  ρ_B² h_A + h_B + ρ_B S_B m_A,  ρ_A ρ_B)
// — eq. 4.1 at γ = 1. For γ < 1 it is the operator whose single-token fold is the *corrected* serial
// rule (G_t = γ² G_{t−1} + γ k kᵀ C_{t−1}): each pair j < i carries γ^{(t−i)+(t−j)}, so G_A is attenuated
// twice. (The §4.2 printed ⊕γ has ρ_B G_A, which folds to G_t = γG_{t−1} + γ k kᵀ C_{t−1}: neither the
// paper's §4.3 serial rule nor SPEC's hla2 — see the scan claims. The paper's serial rule
// G_t = γG_{t−1} + k kᵀ C_{t−1} needs an extra undecayed Σ k kᵀ in the segment to be a monoid at all, so the
// scan backward supports the corrected rule only, and the paper rule only at γ = 1 where they coincide.)
//
// Its adjoint ⊕*: given R̄ = ∂L/∂(A ⊕ B), accumulate
//   S̄_A += ρ_B S̄          S̄_B += S̄ + ρ_B (Ḡ C_Aᵀ + h̄ m_Aᵀ)
//   C̄_A += ρ_B C̄ + ρ_B S_Bᵀ Ḡ     C̄_B += C̄
//   m̄_A += ρ_B m̄ + ρ_B S_Bᵀ h̄     m̄_B += m̄
//   Ḡ_A += ρ_B² Ḡ          Ḡ_B += Ḡ
//   h̄_A += ρ_B² h̄          h̄_B += h̄            (ρ is a constant: γ is not differentiated)
//
// Algorithm (hla2_scan_backward), chunks of width w, B = ⌈n/w⌉:
//   forward   P_0 = X_0 (initial state); chunk summary Σ_c = T_b ⊕ … ⊕ T_{e−1}; P_{c+1} = P_c ⊕ Σ_c.
//             Only the carries P_0..P_{B−1} are kept: the checkpoints at tile boundaries, O(n/w) states.
//   backward  P̄_B = 0. For c = B−1 … 0:
//             recompute the chunk's local inclusive prefixes L_t = T_b ⊕ … ⊕ T_t (O(w) states);
//             (P̄_c, L̄_{e−1}) += ⊕*(P_c, Σ_c = L_{e−1}; P̄_{c+1})                 [the reverse scan across chunks]
//             for t = e−1 … b:  I_t = P_c ⊕ L_t (= X_t by Thm 4.1);  Ī_t = out_vjp(I_t; dO_t);
//                               (P̄_c, L̄_t) += ⊕*(P_c, L_t; Ī_t);
//                               (L̄_{t−1}, T̄_t) += ⊕*(L_{t−1}, T_t; L̄_t)  (t > b; L_b = T_b so T̄_b = L̄_b)
//                               token gradients from T̄_t = ∂L/∂(k kᵀ, q v, q):
//                               dk += (S̄_T + S̄_Tᵀ) k,  dq += C̄_T vᵀ + m̄_T,  dv += qᵀ C̄_T
//             ∂L/∂X_0 = P̄_0.
// Cost O(n·d²·dv) (a ⊕ per token for I_t and one for L_t) — a verification of the paper's statement, not
// a fast kernel; memory O((n/w + w)·|X|).
// The operator itself is the scan forms' (fast/scan/hla2.hpp, Hla2Op, variant corrected): the backward
// differentiates exactly the combine the forward scans apply.
template <class T> using Hla2Segment = scan::Hla2Seg<T, true>;

// A segment's adjoint: of its parts, and of its ρ. The fixed-γ scan backward leaves ρ̄ at 0 (γ is not
// differentiated); the gated one (fast/backward/gated.hpp) differentiates it, a token's ρ being its gate γ_t.
template <class T> struct Hla2SegmentBar {
  Hla2X<T> st;
  T rho{0};
  static Hla2SegmentBar zero(Eigen::Index d, Eigen::Index dv) { return {Hla2X<T>::zero(d, dv), T(0)}; }
};

// ⊕*: accumulates into abar, bbar the adjoints of A and B given rbar = ∂L/∂(A ⊕ B) (see above). With `rho`, also
// the adjoints of the ρs, from the combine's ρ_B S_A, ρ_B C_A, ρ_B m_A, ρ_B² G_A, ρ_B² h_A, ρ_B S_B C_A, ρ_B S_B m_A
// and ρ_A ρ_B:
//   ρ̄_B += ⟨S̄, S_A⟩ + ⟨C̄ + S_Bᵀ Ḡ, C_A⟩ + ⟨m̄ + S_Bᵀ h̄, m_A⟩ + 2ρ_B (⟨Ḡ, G_A⟩ + ⟨h̄, h_A⟩) + ρ_A ρ̄
//   ρ̄_A += ρ_B ρ̄
template <class T> void hla2_combine_vjp(const Hla2Segment<T>& a, const Hla2Segment<T>& b,
                                         const Hla2SegmentBar<T>& rbar, Hla2SegmentBar<T>& abar,
                                         Hla2SegmentBar<T>& bbar, bool rho = false) {
  const T rb = b.rho, rb2 = b.rho * b.rho;
  const Hla2X<T>& r = rbar.st;
  const Mat<T> SG = b.st.S.transpose() * r.G, Sh = b.st.S.transpose() * r.h;  // S_Bᵀ Ḡ, S_Bᵀ h̄
  abar.st.S += rb * r.S;
  bbar.st.S += r.S;
  bbar.st.S.noalias() += rb * (r.G * a.st.C.transpose() + r.h * a.st.m.transpose());
  abar.st.C += rb * r.C;
  abar.st.C += rb * SG;
  bbar.st.C += r.C;
  abar.st.m += rb * r.m;
  abar.st.m += rb * Sh;
  bbar.st.m += r.m;
  abar.st.G += rb2 * r.G;
  bbar.st.G += r.G;
  abar.st.h += rb2 * r.h;
  bbar.st.h += r.h;
  if (!rho) return;
  const T two_rb = rb + rb;
  bbar.rho +=
      T(r.S.cwiseProduct(a.st.S).sum() + (r.C + SG).cwiseProduct(a.st.C).sum() + (r.m + Sh).cwiseProduct(a.st.m).sum() +
        two_rb * T(r.G.cwiseProduct(a.st.G).sum() + r.h.cwiseProduct(a.st.h).sum()) + a.rho * rbar.rho);
  abar.rho += rb * rbar.rho;
}

// The reverse scan (the algorithm above) over an hla2 segment operator `op`: the fixed-γ operator, or a gated one
// whose token segments carry their gates (fast/scan/gated.hpp). With drho, each token's ρ is differentiated too:
// (*drho)(t) = ∂L/∂ρ_{T_t}, which for the gated operator is ∂L/∂γ_t.
template <class Op, class T>
Gradients<T> hla2_reverse_scan(const Op& op, const Problem<T>& p, const Options& opt,
                               const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO, Eigen::Index chunk,
                               std::type_identity_t<ColVec<T>>* drho, BackwardStats* stats) {
  using Bar = Hla2SegmentBar<T>;
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  const Eigen::Index w = (chunk <= 0 || chunk > n) ? std::max<Eigen::Index>(n, 1) : chunk;
  const T lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps);
  const bool rho = drho != nullptr;
  if (rho) *drho = ColVec<T>::Zero(n);
  const Bar zero = Bar::zero(d, dv);
  // Forward across chunks: the carries P_c (checkpoints).
  std::vector<Hla2Segment<T>> carry{op.prefix(load_state<Hla2X<T>>(init, d, dv))};
  auto local_prefixes = [&](Eigen::Index begin, Eigen::Index end) {
    std::vector<Hla2Segment<T>> L;
    for (Eigen::Index t = begin; t < end; ++t) {
      Hla2Segment<T> tok = op.token(Token<T>(p, t));
      L.push_back(L.empty() ? tok : op.combine(L.back(), tok));
    }
    return L;
  };
  const Eigen::Index chunks = (n + w - 1) / w;
  for (Eigen::Index c = 0; c + 1 < chunks; ++c)
    carry.push_back(op.combine(carry.back(), local_prefixes(c * w, std::min(n, c * w + w)).back()));
  // Reverse scan.
  Gradients<T> g = zero_gradients(p);
  Bar pbar_next = zero;        // P̄_{c+1}
  std::size_t peak_local = 0;  // a chunk's prefixes L and their adjoints L̄
  for (Eigen::Index c = chunks - 1; c >= 0; --c) {
    const Eigen::Index begin = c * w, end = std::min(n, begin + w);
    const std::vector<Hla2Segment<T>> L = local_prefixes(begin, end);
    std::vector<Bar> Lbar(L.size(), zero);
    peak_local = std::max(peak_local, L.size() + Lbar.size());
    Bar pbar = zero;
    if (c + 1 < chunks) hla2_combine_vjp(carry[c], L.back(), pbar_next, pbar, Lbar.back(), rho);
    for (Eigen::Index t = end - 1; t >= begin; --t) {
      const std::size_t s = static_cast<std::size_t>(t - begin);
      const Token<T> tok(p, t);
      TokenGrad<T> tg(d, dv);
      Bar ibar = zero;
      hla2_out_vjp(op.combine(carry[c], L[s]).st, tok, RowVec<T>(dO.row(t)), lambda, opt.normalized, eps, t, ibar.st,
                   tg);
      hla2_combine_vjp(carry[c], L[s], ibar, pbar, Lbar[s], rho);
      Bar tbar = zero;
      if (s > 0)
        hla2_combine_vjp(L[s - 1], op.token(tok), Lbar[s], Lbar[s - 1], tbar, rho);
      else
        tbar = Lbar[s];
      hla2_delta_vjp(tbar.st, tok, tg);
      if (rho) (*drho)(t) = tbar.rho;
      g.dQ.row(t) += tg.dq.transpose();
      g.dK.row(t) += tg.dk.transpose();
      g.dV.row(t) += tg.dv;
    }
    pbar_next = pbar;
  }
  if (n == 0) pbar_next = zero;
  g.dstate = export_state<Hla2X<T>, T>(pbar_next.st);
  if (stats) *stats = {carry.size(), carry.size() + peak_local, numbers_in(zero.st) + (rho ? 1 : 0)};
  return g;
}

template <class T> Gradients<T> hla2_scan_backward(const Problem<T>& p, const Options& opt,
                                                   const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                                   fast::DecayRule rule, Eigen::Index chunk,
                                                   BackwardStats* stats = nullptr) {
  check_upstream(p, dO);
  if (rule == fast::DecayRule::paper && opt.gamma != 1)
    throw InputError(
        "hla2 scan backward: the paper's decayed serial rule (§4.3) is not a fold of a (S, C, m, G, h) "
        "concatenation; use the corrected rule for gamma < 1");
  return hla2_reverse_scan(scan::Hla2Op<T, true>(opt, scan::Variant::corrected), p, opt, init, dO, chunk, nullptr,
                           stats);
}

}  // namespace hla::backward
