// The three scan drivers, generic over an operator (fast/scan/common.hpp describes the operator):
//
//   scan_fold      sequential left fold: I_t = I_{t−1} ⊕ T_t (I_{−1} = the initial prefix).
//   scan_blelloch  work-efficient exclusive Blelloch scan over [P₀, T_0, …, T_{n−1}] (P₀ = the initial
//                  state as a prefix segment), then local inclusion I_t = P_t ⊕ T_t (Remark 4.2).
//   scan_twolevel  chunks of width w: (1) per chunk, the chunk summary by the up-sweep of its tokens;
//                  (2) exclusive scan across [P₀, C_0, …, C_{B−1}] → carry-in P̂_c; (3) per chunk, exclusive
//                  scan of its tokens → P_t^loc and I_t = (P̂_c ⊕ P_t^loc) ⊕ T_t (§4 inter-chunk, Alg. 4).
//                  Chunks run on `opt.threads` OpenMP threads; each thread holds O(w) segment states,
//                  plus the O(n/w) chunk summaries (no O(n) array of states).
//
// The Blelloch scan is written level by level: the up-sweep builds level l+1 from pairs of level l (an
// odd last element is carried up unchanged, which handles every length, not only powers of two); the
// down-sweep hands each pair its prefix: left ← parent's prefix, right ← parent's prefix ⊕ left. That is
// n−1 combines up and fewer than n down, span O(log n). A prefix that is the identity (the leftmost
// of every level) is copied instead of combined.
//
// Determinism: the combine tree depends on (n, w) only; threads only decide who evaluates which node
// (static schedule, no reductions), so floating outputs are bitwise identical for any thread count.
// Outputs are read from the inclusive state by the serial form's own read-out (Op::read).
#pragma once

#include <algorithm>
#include <vector>

#include "fast/scan/common.hpp"

namespace hla::scan {

// Up-sweep: levels[0] = leaves, levels[l+1][j] = levels[l][2j] ⊕ levels[l][2j+1]; the top has one
// element, the total.
template <class Op, class Seg = typename Op::Seg>
std::vector<std::vector<Seg>> up_sweep(const Op& op, std::vector<Seg> leaves, int threads) {
  std::vector<std::vector<Seg>> levels;
  levels.push_back(std::move(leaves));
  while (levels.back().size() > 1) {
    const std::vector<Seg>& cur = levels.back();
    const Eigen::Index half = static_cast<Eigen::Index>(cur.size() / 2);
    std::vector<Seg> next(cur.size() - cur.size() / 2);
    parallel_for(half, threads, [&](Eigen::Index j) { next[j] = op.combine(cur[2 * j], cur[2 * j + 1]); });
    if (cur.size() % 2) next.back() = cur.back();
    levels.push_back(std::move(next));
  }
  return levels;
}

// Down-sweep in place: afterwards levels[0][i] is the exclusive prefix leaves[0] ⊕ … ⊕ leaves[i−1]
// (the identity for i = 0). Upper levels are released as soon as they are consumed.
template <class Op, class Seg = typename Op::Seg>
std::vector<Seg> down_sweep(const Op& op, std::vector<std::vector<Seg>> levels, const Seg& identity, int threads) {
  levels.back()[0] = identity;
  for (std::size_t l = levels.size() - 1; l-- > 0;) {
    std::vector<Seg>& cur = levels[l];
    const std::vector<Seg>& up = levels[l + 1];
    parallel_for(static_cast<Eigen::Index>(up.size()), threads, [&](Eigen::Index j) {
      const std::size_t left = 2 * static_cast<std::size_t>(j), right = left + 1;
      if (right < cur.size()) {
        Seg r = j == 0 ? cur[left] : op.combine(up[j], cur[left]);  // up[0] is the identity
        cur[right] = std::move(r);
      }
      cur[left] = up[j];
    });
    levels.pop_back();
  }
  return std::move(levels[0]);
}

template <class Op, class Seg = typename Op::Seg>
std::vector<Seg> exclusive_scan(const Op& op, std::vector<Seg> leaves, const Seg& identity, int threads) {
  return down_sweep(op, up_sweep(op, std::move(leaves), threads), identity, threads);
}

namespace detail {
template <class Op, class T>
typename Op::Seg initial_prefix(const Op& op, const Problem<T>& p, const NamedState<T>* init) {
  return op.prefix(load_state<typename Op::Serial>(init, p.d(), p.dv()));
}
template <class Op, class T> Run<T> finish(Mat<T> O, const typename Op::Seg& last) {
  return {std::move(O), export_state<typename Op::Serial, T>(last.st)};
}
template <class Op, class T>
std::vector<typename Op::Seg> tokens(const Op& op, const Problem<T>& p, Eigen::Index b, Eigen::Index e, int threads) {
  std::vector<typename Op::Seg> out(static_cast<std::size_t>(e - b));
  parallel_for(e - b, threads, [&](Eigen::Index i) { out[i] = op.token(TokenRows<T>(p, b + i)); });
  return out;
}
}  // namespace detail

template <class Op, class T> Run<T> scan_fold(const Op& op, const Problem<T>& p, const NamedState<T>* init) {
  typename Op::Seg I = detail::initial_prefix(op, p, init);
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    const TokenRows<T> x(p, t);
    I = op.combine(I, op.token(x));
    op.read(I, x, t, O.row(t));
  }
  return detail::finish<Op>(std::move(O), I);
}

template <class Op, class T>
Run<T> scan_blelloch(const Op& op, const Problem<T>& p, const NamedState<T>* init, int threads) {
  using Seg = typename Op::Seg;
  const Eigen::Index n = p.n();
  std::vector<Seg> leaves;
  leaves.reserve(static_cast<std::size_t>(n + 1));
  leaves.push_back(detail::initial_prefix(op, p, init));
  for (auto& s : detail::tokens(op, p, 0, n, threads)) leaves.push_back(std::move(s));
  std::vector<Seg> pre = exclusive_scan(op, leaves, op.identity(p.d(), p.dv()), threads);
  Mat<T> O(n, p.dv());
  Seg last;
  parallel_for(n, threads, [&](Eigen::Index t) {
    Seg I = op.combine(pre[t + 1], leaves[t + 1]);  // P_t ⊕ T_t, P_t = P₀ ⊕ T_0 ⊕ … ⊕ T_{t−1}
    op.read(I, TokenRows<T>(p, t), t, O.row(t));
    if (t == n - 1) last = std::move(I);
  });
  return detail::finish<Op>(std::move(O), last);
}

template <class Op, class T>
Run<T> scan_twolevel(const Op& op, const Problem<T>& p, const NamedState<T>* init, int chunk, int threads) {
  using Seg = typename Op::Seg;
  const Eigen::Index n = p.n();
  const Eigen::Index w = std::clamp<Eigen::Index>(chunk, 1, n);
  const Eigen::Index B = (n + w - 1) / w;
  const Seg id = op.identity(p.d(), p.dv());
  auto chunk_tokens = [&](Eigen::Index c) { return detail::tokens(op, p, c * w, std::min(n, (c + 1) * w), 1); };

  // (1) chunk summaries, one per chunk, from the up-sweep of the chunk's tokens.
  std::vector<Seg> summaries(static_cast<std::size_t>(B + 1));
  summaries[0] = detail::initial_prefix(op, p, init);
  parallel_for(B, threads, [&](Eigen::Index c) {
    auto levels = up_sweep(op, chunk_tokens(c), 1);
    summaries[c + 1] = std::move(levels.back()[0]);
  });
  // (2) carry-in of chunk c: P₀ ⊕ C_0 ⊕ … ⊕ C_{c−1}.
  const std::vector<Seg> carry = exclusive_scan(op, std::move(summaries), id, 1);
  // (3) within each chunk: local exclusive scan and inclusion.
  Mat<T> O(n, p.dv());
  Seg last;
  parallel_for(B, threads, [&](Eigen::Index c) {
    const std::vector<Seg> toks = chunk_tokens(c);
    const std::vector<Seg> local = exclusive_scan(op, toks, id, 1);
    const Seg& in = carry[c + 1];
    for (std::size_t i = 0; i < toks.size(); ++i) {
      const Eigen::Index t = c * w + static_cast<Eigen::Index>(i);
      Seg I = i == 0 ? op.combine(in, toks[0]) : op.combine(op.combine(in, local[i]), toks[i]);
      op.read(I, TokenRows<T>(p, t), t, O.row(t));
      if (t == n - 1) last = std::move(I);
    }
  });
  return detail::finish<Op>(std::move(O), last);
}

}  // namespace hla::scan
