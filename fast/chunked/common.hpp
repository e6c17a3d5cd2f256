// Shared machinery of the chunked (matrix) forms: the chunk plan, decay-weight matrices, the
// two-level parallel schedule and the carry across chunks.
//
// Every chunked form runs the same two-level scheme (SPEC "chunked"; paper §5.2 "two-level" chunking):
//   1. chunk-local work, in parallel over chunks: intra-chunk outputs with matrix–matrix products and
//      each chunk's own contribution T^(k) to the state (from a zero incoming state);
//   2. the carry: S^(k) = S^(k−1) ⊕ T^(k) as a prefix over chunks. Every part of every state here is an
//      affine recurrence x_k = g_k x_{k−1} + b_k once the products that couple parts (S_B C_A, ...) are
//      formed in parallel beforehand, so the prefix runs in parallel over the *entries* of the state;
//   3. carry-dependent outputs, in parallel over chunks, from the state entering each chunk.
// Work per chunk is matrix–matrix (Eigen GEMMs into per-thread workspaces allocated once per call, not
// per chunk). The same template runs in exact rationals (tests decide the algebra) and in float/double
// (the fast path that is benchmarked).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/state.hpp"

namespace hla::fast::chunked {

// Chunks [k·w, k·w + len(k)) of a sequence of n tokens; the last one may be shorter.
struct ChunkPlan {
  Eigen::Index n, w, count;
  ChunkPlan(Eigen::Index n_, int chunk) : n(n_), w(std::min<Eigen::Index>(chunk, n_)), count((n_ + w - 1) / w) {}
  Eigen::Index begin(Eigen::Index k) const { return k * w; }
  Eigen::Index len(Eigen::Index k) const { return std::min(w, n - k * w); }
};

// Powers of γ and the decay-weighted causal mask of one chunk. For local positions a (output) and b
// (source) in a chunk: D_{ab} = γ^{a−b} for b ≤ a, else 0 (at γ = 1, D = L). Everything a chunk of length
// len needs is a prefix/segment of these (D depends on a − b only, so a short chunk uses its top-left
// corner).
template <class T> struct Decay {
  T gamma;
  bool decays;
  ColVec<T> pw;  // pw(i) = γ^i, i = 0 .. 2w + 2
  Mat<T> D;      // w×w
  Decay(const T& g, Eigen::Index w) : gamma(g), decays(g != T(1)), pw(2 * w + 3), D(Mat<T>::Zero(w, w)) {
    pw(0) = T(1);
    for (Eigen::Index i = 1; i < pw.size(); ++i) pw(i) = pw(i - 1) * gamma;
    for (Eigen::Index a = 0; a < w; ++a)
      for (Eigen::Index b = 0; b <= a; ++b) D(a, b) = pw(a - b);
  }
  // γ^{len}: what a whole chunk does to the incoming state.
  T chunk_factor(Eigen::Index len) const { return pw(len); }
  // x(a) = γ^{s·(a+1)} for a < len (s = 1: incoming state seen from local position a; s = 2: squared).
  template <class V> void after_start(Eigen::Index len, int s, V&& x) const {
    for (Eigen::Index a = 0; a < len; ++a) x(a) = pw(s * (a + 1));
  }
  // x(b) = γ^{len−1−b}: token b of the chunk seen from the chunk's last position.
  template <class V> void to_end(Eigen::Index len, V&& x) const {
    for (Eigen::Index b = 0; b < len; ++b) x(b) = pw(len - 1 - b);
  }
};

// A decay weight below the smallest normal number, set to 0 (floating scalars; the exact ones keep it): such weights
// carry no significant digit (a term scaled by one is below the smallest normal times its factors, far under u of a
// weight-1 term), and products over rows scaled by subnormals run on the CPU's slow path. Returns v.
template <class T> T& flush_subnormal(T& v) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::abs(v) < std::numeric_limits<T>::min()) v = T(0);
  return v;
}

// Rows of X times the weights x (X ← diag(x) X), skipped when there is no decay.
template <class T, class X, class W> void scale_rows(X&& m, const W& x, bool decays) {
  if (decays) m.array().colwise() *= x.array();
}

// body(k) for every chunk, over `threads` OpenMP threads. `make_workspace()` runs once per thread; the
// body receives it, so nothing is allocated per chunk.
template <class MakeWs, class Body>
void for_chunks(Eigen::Index count, int threads, MakeWs&& make_workspace, Body&& body) {
  const int th = static_cast<int>(std::min<Eigen::Index>(threads, count));
#pragma omp parallel num_threads(th) if (th > 1)
  {
    // The chunks are the parallelism: Eigen's own OpenMP GEMM threading stays off inside (this sets the
    // region's task ICV only; a global Eigen::setNbThreads would still win).
    omp_set_num_threads(1);
    auto ws = make_workspace();
#pragma omp for schedule(static)
    for (Eigen::Index k = 0; k < count; ++k) body(ws, k);
  }
}

// Chunks are processed in groups: the per-chunk state blocks of one group stay in cache, and the
// carried state flows from one group to the next. Each phase of a group runs in parallel and ends in a
// barrier, so with several threads a group is larger (64 chunks for 2 threads: measured at n = 65536,
// d = 64, w = 64, the second thread then gives 1.9–2.0× instead of 1.6–1.75× with 16, where the threads
// spent ~14% of their time waiting at barriers); one thread keeps the smaller, more cache-resident group.
inline Eigen::Index group_chunks(Eigen::Index count, int threads) {
  return std::min<Eigen::Index>(count, threads > 1 ? 32 * threads : 16);
}

// What every chunked form fixes before its first chunk: the sizes, the chunk plan and its groups, the
// decay weights, and g[k] = γ^{len(k)} (what a whole chunk does to a carried state). Forms unpack it with
// one HLA_CHUNK_SETUP_NAMES (below).
template <class T> struct ChunkSetup {
  Eigen::Index n, d, dv, da;  // da = dv + 1: the values with the normalizer's column of ones, [V 1]
  ChunkPlan plan;
  Eigen::Index M, w, NG;  // chunks, chunk width, chunks per group
  int threads;
  T gamma, eps;
  Decay<T> dec;
  bool decays;
  std::vector<T> g;
  ChunkSetup(Eigen::Index n_, Eigen::Index d_, Eigen::Index dv_, const Options& opt)
      : n(n_),
        d(d_),
        dv(dv_),
        da(dv_ + 1),
        plan(n_, opt.chunk),
        M(plan.count),
        w(plan.w),
        NG(group_chunks(M, opt.threads)),
        threads(opt.threads),
        gamma(from_rational<T>(opt.gamma)),
        eps(from_rational<T>(opt.eps)),
        dec(gamma, w),
        decays(dec.decays),
        g(M) {
    for (Eigen::Index k = 0; k < M; ++k) g[k] = dec.chunk_factor(plan.len(k));
  }
  explicit ChunkSetup(const Problem<T>& p, const Options& opt) : ChunkSetup(p.n(), p.d(), p.dv(), opt) {}
  // g[k]² = γ^{2·len(k)}: what a whole chunk does to a state decaying with γ² (hla2's C' and G parts).
  std::vector<T> squared_factors() const {
    std::vector<T> g2(g.size());
    for (std::size_t k = 0; k < g.size(); ++k) g2[k] = g[k] * g[k];
    return g2;
  }
};

// ChunkSetup's fields as local names in a form's body. Declarations, not a structured binding: clang (the
// fuzz and tsan builds) cannot capture a structured binding in an OpenMP region.
#define HLA_CHUNK_SETUP_NAMES(setup)                                                                                 \
  [[maybe_unused]] const Eigen::Index n = (setup).n, d = (setup).d, dv = (setup).dv, da = (setup).da, M = (setup).M, \
                                      w = (setup).w, NG = (setup).NG;                                                \
  [[maybe_unused]] const ChunkPlan& plan = (setup).plan;                                                             \
  [[maybe_unused]] const int threads = (setup).threads;                                                              \
  [[maybe_unused]] const auto& gamma = (setup).gamma;                                                                \
  [[maybe_unused]] const auto& eps = (setup).eps;                                                                    \
  [[maybe_unused]] const auto& dec = (setup).dec;                                                                    \
  [[maybe_unused]] const bool decays = (setup).decays;                                                               \
  [[maybe_unused]] const auto& g = (setup).g

// The carry across `count` chunks for one state part X (rows×cols). On entry, block k of `blocks`
// (columns [k·cols, (k+1)·cols)) holds chunk k's contribution b_k and `state` the state entering chunk 0;
// on return block k holds the state entering chunk k and `state` the state after the last one, where
// x_k = factor[k]·x_{k−1} + b_k. Entries are independent, so the columns run in parallel.
template <class T>
void carry(Mat<T>& blocks, Mat<T>& state, const T* factor, Eigen::Index count, bool decays, int threads) {
  const Eigen::Index cols = state.cols();
  const int th = static_cast<int>(std::min<Eigen::Index>(threads, cols));
#pragma omp parallel num_threads(th) if (th > 1)
  {
    ColVec<T> x(state.rows()), b(state.rows());
#pragma omp for schedule(static)
    for (Eigen::Index c = 0; c < cols; ++c) {
      x = state.col(c);
      for (Eigen::Index k = 0; k < count; ++k) {
        auto blk = blocks.col(k * cols + c);
        b = blk;
        blk = x;
        if (decays) x *= factor[k];
        x += b;
      }
      state.col(c) = x;
    }
  }
}

// Aᵀ diag(x) B over the rows of A (n×p) and B (n×q) — x empty means no weights — as `threads` partial
// sums over contiguous row ranges, each one large matrix product, added in a fixed order.
template <class T, class XA, class XB> Mat<T> weighted_gram(const XA& A, const ColVec<T>& x, const XB& B, int threads) {
  const Eigen::Index n = A.rows();
  const int parts = static_cast<int>(std::max<Eigen::Index>(1, std::min<Eigen::Index>(threads, n)));
  std::vector<Mat<T>> partial(parts, Mat<T>::Zero(A.cols(), B.cols()));
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
  for (int s = 0; s < parts; ++s) {
    const Eigen::Index b = n * s / parts, e = n * (s + 1) / parts;
    if (x.size())
      partial[s].noalias() =
          A.middleRows(b, e - b).transpose() * (x.segment(b, e - b).asDiagonal() * B.middleRows(b, e - b));
    else
      partial[s].noalias() = A.middleRows(b, e - b).transpose() * B.middleRows(b, e - b);
  }
  for (int s = 1; s < parts; ++s) partial[0] += partial[s];
  return partial[0];
}

// [V 1]: the values with a column of ones appended, so that one product yields the numerator and
// (last column) the normalizer's sum with v_j → 1, and the state's vector parts (m, h, z, ...) ride
// along as the last column of the matrix parts.
template <class T, class Src, class Dst> void values_with_ones(const Src& V, Dst&& out) {
  out.leftCols(V.cols()) = V;
  out.col(V.cols()).setOnes();
}

// Output rows from the augmented result: num = first dv columns, den = last; divides when normalized.
// Column-major, so the first dv columns are a prefix of the storage: dropping the last column shrinks the
// allocation in place instead of copying n×dv numbers into a second one.
template <class T> Mat<T> finish_outputs(Mat<T>&& aug, bool normalized, const T& eps) {
  const Eigen::Index dv = aug.cols() - 1;
  if (normalized)
    for (Eigen::Index t = 0; t < aug.rows(); ++t) divide_by_normalizer(aug.row(t).head(dv), T(aug(t, dv) + eps), t);
  aug.conservativeResize(Eigen::NoChange, dv);
  return std::move(aug);
}

// Joins a matrix part and its vector part ([C m], [G h], ...) and splits them back.
template <class T> Mat<T> join(const Mat<T>& M, const Mat<T>& v) {
  Mat<T> out(M.rows(), M.cols() + 1);
  out << M, v;
  return out;
}

}  // namespace hla::fast::chunked
