// Masked third-order HLA (γ = 1), chunked matrix form — derived from SPEC's
// o_t = Σ_{u≤t} Σ_{i≤u} Σ_{j≤u} (q_t·k_i)(q_u·k_i)(q_u·k_j) v_j = q_tᵀ F_t,  F_t = Σ_{u≤t} S^K_u q_u (q_uᵀ P_u)
// (the corrected serial form's regrouping by the middle index u, fast/serial/hla3.hpp).
//
// Chunk starting at token c with entering state (S^K0, P0, F0) and A = L ⊙ W, W = Q Kᵀ (chunk rows):
//   q_tᵀ S^K_u q_u = (Q S^K0 Qᵀ)_{au} + (A Aᵀ)_{au}   (u ≤ t, local a ≥ u)
//   q_uᵀ P_u       = (Q P0 + A V)_u =: Y_u
// so O = Q F0 + (((Q S^K0 Qᵀ) + A Aᵀ) ⊙ L) Y, and after the chunk
//   S^K = S^K0 + Kᵀ K,  P = P0 + Kᵀ V,  F = F0 + S^K0 Qᵀ Y + Kᵀ (Aᵀ Y).
// m, η and the normalizer ride along as a column of ones in V. The paper's Algorithm 3 / eq. 7.5 differ
// from SPEC's hla3 (see the ledger), so this is variant "corrected".
#pragma once

#include "fast/chunked/common.hpp"
#include "fast/serial/hla3.hpp"

namespace hla::fast::chunked {

template <class T> Run<T> hla3_chunked(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = Hla3MinimalState<T>;
  const T eps = from_rational<T>(opt.eps);
  const Eigen::Index d = p.d(), dv = p.dv(), da = dv + 1;
  const ChunkPlan plan(p.n(), opt.chunk);
  const Eigen::Index M = plan.count, w = plan.w;
  const int threads = opt.threads;
  const Eigen::Index NG = group_chunks(M, threads);  // chunks per group (common.hpp)
  const std::vector<T> one(M, T(1));

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> SK = st0.SK, P = join(st0.P, st0.m), F = join(st0.F, st0.eta);
  Mat<T> SKb(d, NG * d), Pb(d, NG * da), Fb(d, NG * da), Out(p.n(), da);

  struct Ws {
    Mat<T> V, W, A, B, Y, U, X, Z;
  };
  auto make_ws = [&] {
    return Ws{Mat<T>(w, da), Mat<T>(w, w), Mat<T>(w, w),  Mat<T>(w, w),
              Mat<T>(w, da), Mat<T>(w, d), Mat<T>(w, da), Mat<T>(d, da)};
  };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Each chunk's own S^K_B, P_B.
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto K = p.K.middleRows(c, len);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      SKb.middleCols(kk * d, d).noalias() = K.transpose() * K;
      Pb.middleCols(kk * da, da).noalias() = K.transpose() * V;
    });
    carry(SKb, SK, one.data() + k0, cnt, false, threads);
    carry(Pb, P, one.data() + k0, cnt, false, threads);

    // 2. Per chunk from the entering S^K0, P0: the outputs without Q F0, and F's increment.
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      const auto K = p.K.middleRows(c, len);
      const auto SK0 = SKb.middleCols(kk * d, d);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto W = ws.W.topLeftCorner(len, len);
      auto A = ws.A.topLeftCorner(len, len);
      auto B = ws.B.topLeftCorner(len, len);
      auto Y = ws.Y.topRows(len);
      auto U = ws.U.topRows(len);
      auto X = ws.X.topRows(len);
      W.noalias() = Q * K.transpose();
      A = W.template triangularView<Eigen::Lower>();
      Y.noalias() = Q * Pb.middleCols(kk * da, da);
      Y.noalias() += A * V;
      U.noalias() = Q * SK0;
      W.noalias() = U * Q.transpose();
      W.noalias() += A * A.transpose();
      B = W.template triangularView<Eigen::Lower>();
      Out.middleRows(c, len).noalias() = B * Y;
      auto Fk = Fb.middleCols(kk * da, da);
      ws.Z.noalias() = Q.transpose() * Y;
      Fk.noalias() = SK0 * ws.Z;
      X.noalias() = A.transpose() * Y;
      Fk.noalias() += K.transpose() * X;
    });
    carry(Fb, F, one.data() + k0, cnt, false, threads);

    // 3. + Q F0.
    for_chunks(
        cnt, threads, [] { return 0; },
        [&](int, Eigen::Index kk) {
          const Eigen::Index k = k0 + kk;
          const Eigen::Index c = plan.begin(k), len = plan.len(k);
          Out.middleRows(c, len).noalias() += p.Q.middleRows(c, len) * Fb.middleCols(kk * da, da);
        });
  }
  St fin{SK, P.leftCols(dv), P.rightCols(1), F.leftCols(dv), F.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

}  // namespace hla::fast::chunked
