// Masked second-order HLA, chunked matrix form with decay γ, ridge λ and normalization — derived from
// SPEC's definition o_t = Σ_{j≤t} Σ_{i≤j} γ^{(t−i)+(t−j)} (q_t·k_i)(q_j·k_i) v_j (+ λ Σ_{j≤t} γ^{t−j}(q_t·q_j) v_j).
//
// Chunk starting at token c, local positions a = t − c < len. The state entering it, at token c−1, is
// S0 = Σ_{i<c} γ^{c−1−i} k_i k_iᵀ, C0 = Σ_{j<c} γ^{c−1−j} q_j v_jᵀ, G0 = Σ_{j<i<c} γ^{2(c−1)−i−j} k_i k_iᵀ q_j v_jᵀ
// (the corrected serial state, fast/serial/hla2.hpp), so S0 C0 − G0 = Σ_{i≤j<c} γ^{2(c−1)−i−j} k_i k_iᵀ q_j v_jᵀ.
// Split the (i, j) pairs of o_t (i ≤ j ≤ t) by chunk membership:
//   i ≤ j < c          γ^{2(a+1)} q_tᵀ (S0 C0 − G0)
//   i < c ≤ j ≤ t      γ^{a+1} Σ_{b≤a} γ^{a−b} (q_tᵀ S0 q_b) v_b   = γ^{a+1} [((Q S0 Qᵀ) ⊙ D) V]_a
//   c ≤ i ≤ j ≤ t      [(((D ⊙ W)(L ⊙ W)ᵀ) ⊙ D) V]_a,  W = Q Kᵀ (chunk rows), D_{ab} = γ^{a−b}[b ≤ a]
//   (j < c ≤ i is excluded by i ≤ j: this is the cross term the figure's carry must not double count)
//   ridge              λ γ^{a+1} q_tᵀ C0 + λ [((Q Qᵀ) ⊙ D) V]_a
// The state after a chunk of length len (g = γ^len, x_b = γ^{len−1−b}):
//   S = g S0 + Kᵀ diag(x) K,  C = g C0 + Qᵀ diag(x) V,
//   G = g² G0 + g S_B C0 + G_B,  S_B = Kᵀ diag(x) K,  G_B = Kᵀ diag(x) (SL ⊙ Wᵀ) diag(x) V
// (SL strictly lower: pairs b < α inside the chunk). The vector parts m, h and the normalizer are the
// same sums with V → 1: they ride along as a column of ones appended to V.
// At γ = 1 the state update is the paper's semidirect product (eq. 4.1); for γ < 1 it is the corrected
// decayed one (G scales by γ², the paper's §4.3 by γ): hence variant "corrected".
#pragma once

#include "fast/chunked/common.hpp"
#include "fast/serial/hla2.hpp"

namespace hla::fast::chunked {

// Per-thread scratch of the hla2 chunk computations (sized for a full chunk of width w).
template <class T> struct Hla2Workspace {
  Mat<T> V, Vd, Kd, W, A, B, Mm, Y, U, H;
  ColVec<T> x;
  Hla2Workspace(Eigen::Index w, Eigen::Index d, Eigen::Index da)
      : V(w, da), Vd(w, da), Kd(w, d), W(w, w), A(w, w), B(w, w), Mm(w, w), Y(w, da), U(w, d), H(d, da), x(w) {}
};

// One chunk [c, c+len) from a zero incoming state: the intra-chunk outputs (augmented with the
// normalizer column) into `out`, and the chunk's contribution S_B, C_B = [C_B m_B], G_B = [G_B h_B].
template <class T, class Out, class SB, class CB, class GB>
void hla2_chunk_local(const Problem<T>& p, Eigen::Index c, Eigen::Index len, const Decay<T>& dec, bool ridge,
                      const T& lambda, Hla2Workspace<T>& ws, Out&& out, SB&& Sb, CB&& Cb, GB&& Gb) {
  const auto Q = p.Q.middleRows(c, len);
  const auto K = p.K.middleRows(c, len);
  auto V = ws.V.topRows(len);
  values_with_ones<T>(p.V.middleRows(c, len), V);
  const auto D = dec.D.topLeftCorner(len, len);
  auto W = ws.W.topLeftCorner(len, len);
  auto A = ws.A.topLeftCorner(len, len);
  auto B = ws.B.topLeftCorner(len, len);
  auto Mm = ws.Mm.topLeftCorner(len, len);
  // ((D ⊙ W)(L ⊙ W)ᵀ [+ λ Q Qᵀ]) ⊙ D, times [V 1]
  W.noalias() = Q * K.transpose();
  A = W.cwiseProduct(D);
  B = W.template triangularView<Eigen::Lower>();
  Mm.noalias() = A * B.transpose();
  if (ridge) Mm.noalias() += lambda * (Q * Q.transpose());
  Mm = Mm.cwiseProduct(D);
  out.noalias() = Mm * V;
  // S_B = Kᵀ diag(x) K, C_B = Qᵀ diag(x) V, G_B = Kᵀ diag(x) (SL ⊙ Wᵀ) diag(x) V, x_b = γ^{len−1−b}
  auto x = ws.x.head(len);
  dec.to_end(len, x);
  auto Vd = ws.Vd.topRows(len);
  auto Kd = ws.Kd.topRows(len);
  Vd = V;
  Kd = K;
  scale_rows<T>(Vd, x, dec.decays);
  scale_rows<T>(Kd, x, dec.decays);
  Sb.noalias() = Kd.transpose() * K;
  Cb.noalias() = Q.transpose() * Vd;
  B = W.transpose().template triangularView<Eigen::StrictlyLower>();
  auto Y = ws.Y.topRows(len);
  Y.noalias() = B * Vd;
  Gb.noalias() = Kd.transpose() * Y;
}

template <class T> Run<T> hla2_chunked(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = Hla2State<T, true>;
  const T gamma = from_rational<T>(opt.gamma), lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps);
  const bool ridge = opt.ridge != 0;
  const Eigen::Index d = p.d(), dv = p.dv(), da = dv + 1;
  const ChunkPlan plan(p.n(), opt.chunk);
  const Eigen::Index M = plan.count, w = plan.w;
  const Decay<T> dec(gamma, w);
  const bool decays = dec.decays;
  const int threads = opt.threads;
  const Eigen::Index NG = group_chunks(M, threads);  // chunks per group (common.hpp)

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> S = st0.S, C = join(st0.C, st0.m), G = join(st0.G, st0.h);
  Mat<T> Sb(d, NG * d), Cb(d, NG * da), Gb(d, NG * da), Out(p.n(), da);
  std::vector<T> g(M), g2(M);
  for (Eigen::Index k = 0; k < M; ++k) {
    g[k] = dec.chunk_factor(plan.len(k));
    g2[k] = g[k] * g[k];
  }

  auto make_ws = [&] { return Hla2Workspace<T>(w, d, da); };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Chunk-local: intra-chunk outputs and each chunk's contribution (S_B, C_B, G_B) from a zero state.
    for_chunks(cnt, threads, make_ws, [&](Hla2Workspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      hla2_chunk_local(p, c, len, dec, ridge, lambda, ws, Out.middleRows(c, len), Sb.middleCols(kk * d, d),
                       Cb.middleCols(kk * da, da), Gb.middleCols(kk * da, da));
    });

    // 2. Carry: C first (G's coupling term needs the C entering each chunk), then g S_B C0 into G_B, then
    //    S and G.
    carry(Cb, C, g.data() + k0, cnt, decays, threads);
    for_chunks(cnt, threads, [] { return 0; }, [&](int, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      auto Gk = Gb.middleCols(kk * da, da);
      if (decays) Gk.noalias() += g[k] * (Sb.middleCols(kk * d, d) * Cb.middleCols(kk * da, da));
      else Gk.noalias() += Sb.middleCols(kk * d, d) * Cb.middleCols(kk * da, da);
    });
    carry(Sb, S, g.data() + k0, cnt, decays, threads);
    carry(Gb, G, g2.data() + k0, cnt, decays, threads);

    // 3. Carry-dependent outputs: diag(γ^{a+1}) [ diag(γ^{a+1}) Q (S0 C0 − G0) + λ Q C0 + ((Q S0 Qᵀ) ⊙ D) V ].
    for_chunks(cnt, threads, make_ws, [&](Hla2Workspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      const auto S0 = Sb.middleCols(kk * d, d);
      const auto C0 = Cb.middleCols(kk * da, da);
      const auto G0 = Gb.middleCols(kk * da, da);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto x = ws.x.head(len);
      dec.after_start(len, 1, x);
      ws.H.noalias() = S0 * C0;
      ws.H -= G0;
      auto Y = ws.Y.topRows(len);
      Y.noalias() = Q * ws.H;
      scale_rows<T>(Y, x, decays);
      if (ridge) Y.noalias() += lambda * (Q * C0);
      auto U = ws.U.topRows(len);
      auto Mm = ws.Mm.topLeftCorner(len, len);
      U.noalias() = Q * S0;
      Mm.noalias() = U * Q.transpose();
      Mm = Mm.cwiseProduct(dec.D.topLeftCorner(len, len));
      Y.noalias() += Mm * V;
      scale_rows<T>(Y, x, decays);
      Out.middleRows(c, len) += Y;
    });

  }
  St fin{S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)};
  return {finish_outputs<T>(Out, opt.normalized, eps), export_state<St, T>(fin)};
}

}  // namespace hla::fast::chunked
