// First-order linear attention (baseline), chunked matrix form with decay γ and normalization:
// o_t = Σ_{j≤t} γ^{t−j} (q_t·k_j) v_j splits at a chunk starting at token c into
//   j < c:   γ^{a+1} q_tᵀ S0,   S0 = Σ_{j<c} γ^{c−1−j} k_j v_jᵀ
//   j ≥ c:   [((Q Kᵀ) ⊙ D) V]_a
// and S = γ^len S0 + Kᵀ diag(γ^{len−1−b}) V; z and the normalizer ride along as a column of ones in V.
#pragma once

#include "fast/chunked/common.hpp"
#include "fast/serial/linear.hpp"

namespace hla::fast::chunked {

template <class T> Run<T> linear_chunked(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = LinearState<T>;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> S = join(st0.S, st0.z);
  Mat<T> Sb(d, NG * da), Out(p.n(), da);

  struct Ws {
    Mat<T> V, W, Y;
    ColVec<T> x;
  };
  auto make_ws = [&] { return Ws{Mat<T>(w, da), Mat<T>(w, w), Mat<T>(w, da), ColVec<T>(w)}; };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Chunk-local: ((Q Kᵀ) ⊙ D) V and the chunk's own S_B; 2. carry; 3. + diag(γ^{a+1}) Q S0.
    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto W = ws.W.topLeftCorner(len, len);
      W.noalias() = p.Q.middleRows(c, len) * p.K.middleRows(c, len).transpose();
      W = W.cwiseProduct(dec.D.topLeftCorner(len, len));
      Out.middleRows(c, len).noalias() = W * V;
      auto x = ws.x.head(len);
      dec.to_end(len, x);
      scale_rows<T>(V, x, decays);
      Sb.middleCols(kk * da, da).noalias() = p.K.middleRows(c, len).transpose() * V;
    });

    carry(Sb, S, g.data() + k0, cnt, decays, threads);

    for_chunks(cnt, threads, make_ws, [&](Ws& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      auto Y = ws.Y.topRows(len);
      Y.noalias() = p.Q.middleRows(c, len) * Sb.middleCols(kk * da, da);
      auto x = ws.x.head(len);
      dec.after_start(len, 1, x);
      scale_rows<T>(Y, x, decays);
      Out.middleRows(c, len) += Y;
    });
  }
  St fin{S.leftCols(dv), S.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

}  // namespace hla::fast::chunked
