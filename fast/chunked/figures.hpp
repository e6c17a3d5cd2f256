// The paper's DRAWN chunk formulas, implemented exactly as printed (γ = 1, no normalization — the
// figures define neither), for the claims ledger. They run chunk by chunk, carrying the state with the
// figures' own ⊕ (which is exact: eq. 4.1 / eq. 6.2); only the per-chunk *output* formula is the drawn one.
//
// Figure 1(C), hla2/chunk-figure1c/paper:
//   O_t^(k) = q_tᵀ (S^{K,(k−1)} C^{QV,(k−1)} − G^{(k−1)}) + [((L⊙Q^(k)K^(k)ᵀ)(L⊙Q^(k)K^(k)ᵀ)ᵀ ⊙ L) V^(k)]_t
//   Derivation (fast/chunked/hla2.hpp) says the exact output also has the term
//   q_tᵀ S^{K,(k−1)} Σ_{j in chunk k, j≤t} q_j v_jᵀ  (pairs i in earlier chunks, j in chunk k), which the
//   figure omits: it equals SPEC's hla2 on the first chunk from a zero state, and in general
//   figure1c_t = hla2_t − q_tᵀ S^{K,(k−1)} Σ_{c≤j≤t} q_j v_jᵀ.
//
// Figure 2(C), ahla/chunk-figure2c-{lt,le}/paper:
//   O_t^(k) = q_tᵀ (E^(k−1) + R^{KQ,(k)}_{<t} P^{KV,(k−1)}) + [((A^(k) A^(k)) ⊙ L) V^(k)]_t,  A = L ⊙ Q Kᵀ.
//   R^{KQ,(k)}_{<t} = Σ_{i in chunk k, i<t} k_i q_iᵀ is the literal reading ("lt"); Σ_{i≤t} ("le") is the
//   other plausible one. Derivation (fast/chunked/ahla.hpp): the exact term is Σ_{i≤t}, so "le" equals
//   SPEC's ahla and "lt" misses (q_t·k_t) q_tᵀ P^{KV,(k−1)}:  figure2c-lt_t = ahla_t − (q_t·k_t) q_tᵀ P^{(k−1)}.
#pragma once

#include "fast/chunked/ahla.hpp"
#include "fast/chunked/hla2.hpp"

namespace hla::fast::chunked {

template <class T> Run<T> hla2_figure1c(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = Hla2State<T, true>;
  const Eigen::Index d = p.d(), dv = p.dv(), da = dv + 1;
  const ChunkPlan plan(p.n(), opt.chunk);
  const Decay<T> dec(T(1), plan.w);
  const St st0 = load_state<St>(init, d, dv);
  Mat<T> S = st0.S, C = join(st0.C, st0.m), G = join(st0.G, st0.h);
  Mat<T> Out(p.n(), da), Sb(d, d), Cb(d, da), Gb(d, da), H(d, da);
  Hla2Workspace<T> ws(plan.w, d, da);
  for (Eigen::Index k = 0; k < plan.count; ++k) {
    const Eigen::Index c = plan.begin(k), len = plan.len(k);
    auto out = Out.middleRows(c, len);
    // intra-chunk term [((L⊙QKᵀ)(L⊙QKᵀ)ᵀ ⊙ L) V] and the chunk's summary T^(k)
    hla2_chunk_local(p, c, len, dec, false, T(0), ws, out, Sb, Cb, Gb);
    // cross-chunk term as drawn: q_tᵀ (S^{(k−1)} C^{(k−1)} − G^{(k−1)})
    H.noalias() = S * C;
    H -= G;
    out.noalias() += p.Q.middleRows(c, len) * H;
    // S^(k) = S^(k−1) ⊕ T^(k) (eq. 4.1): G ← G + G_B + S_B C, then S, C
    G.noalias() += Sb * C;
    G += Gb;
    S += Sb;
    C += Cb;
  }
  St fin{S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)};
  return {Mat<T>(Out.leftCols(dv)), export_state<St, T>(fin)};
}

// inclusive = false: R_{<t} (literal); true: R_{≤t}.
template <class T>
Run<T> ahla_figure2c(const Problem<T>& p, const Options& opt, const NamedState<T>* init, bool inclusive) {
  using St = AhlaState<T>;
  const Eigen::Index d = p.d(), dv = p.dv(), da = dv + 1;
  const ChunkPlan plan(p.n(), opt.chunk);
  const Decay<T> dec(T(1), plan.w);
  const St st0 = load_state<St>(init, d, dv);
  Mat<T> P = join(st0.P, st0.m), E = join(st0.E, st0.n);
  Mat<T> Out(p.n(), da), Pb(d, da), Eb(d, da), R(d, d), Y(plan.w, da), Rt(plan.w, plan.w);
  AhlaWorkspace<T> ws(plan.w, da);
  for (Eigen::Index k = 0; k < plan.count; ++k) {
    const Eigen::Index c = plan.begin(k), len = plan.len(k);
    const auto Q = p.Q.middleRows(c, len);
    const auto K = p.K.middleRows(c, len);
    auto out = Out.middleRows(c, len);
    // intra-chunk term [((A A) ⊙ L) V] and the chunk's summary (P_B, E_B)
    ahla_chunk_local(p, c, len, dec, ws, out, Pb, Eb);
    // cross-chunk term as drawn: q_tᵀ E^(k−1) + q_tᵀ R_{<t} P^(k−1), row t of q_tᵀ R_{<t} being
    // Σ_{i<t} (q_t·k_i) q_iᵀ: (SL ⊙ Q Kᵀ) Q P  (or L ⊙ for the ≤ reading)
    auto y = Y.topRows(len);
    auto r = Rt.topLeftCorner(len, len);
    y.noalias() = Q * P;
    r.noalias() = Q * K.transpose();
    if (inclusive)
      r = r.template triangularView<Eigen::Lower>();
    else
      r = r.template triangularView<Eigen::StrictlyLower>();
    out.noalias() += Q * E;
    out.noalias() += r * y;
    // S^(k) = S^(k−1) ⊕_AHLA T^(k): E ← E + E_B + R_B P with R_B = Σ_chunk k_i q_iᵀ, P ← P + P_B
    R.noalias() = K.transpose() * Q;
    E.noalias() += R * P;
    E += Eb;
    P += Pb;
  }
  St fin{P.leftCols(dv), P.rightCols(1), E.leftCols(dv), E.rightCols(1)};
  return {Mat<T>(Out.leftCols(dv)), export_state<St, T>(fin)};
}

}  // namespace hla::fast::chunked
