// hla2's u-form (fast/chunked/hla2.hpp: linear attention over the keys u_j = S_j q_j with decay γ²), computed
// chunk by chunk in one pass — form "chunked-fused". Same algebra, same state; what changes is how the work
// is laid out (and C, which hla2/chunked sums over the whole sequence after the last chunk for the exported
// state, is carried chunk by chunk: one more product per chunk, on data in cache).
//
// Within a thread, chunks run in order and add their own sums to the carried states: the per-chunk fusion
// below. Across P threads, the paper's two-level scan (§5.2), one OpenMP region, two
// barriers, no hand-off from chunk to chunk between threads:
//   (A) block t is a contiguous range of chunks (tokens [r_t, r_{t+1})), one per thread; its ΔS_t =
//       Kᵀ diag(γ^{r_{t+1}−1−j}) K is one product over the block (the last block's is never needed), which
//       all P threads share (each sums 1/P of the block's rows). One thread then scans the P summaries:
//       S entering block t+1 = γ^{len_t} S_t + ΔS_t.
//   (B) each thread runs the fused chunk loop over its block from the true S (so U = S q is final) and
//       from C' = m' = C = 0 (block 0: the initial state), writing its rows' unnormalized outputs.
//       One thread scans the blocks' C', m', C the same way (decay γ^{2 len_t}, γ^{len_t}).
//   (C) each block t > 0 gains what its zero start left out — the carry of the C' (and, with ridge, C)
//       entering it to every row i of the block: γ^{2(i+1)} q_iᵀ C'_t [+ λ γ^{i+1} q_iᵀ C_t] — one product
//       over the block's rows, in tiles, again shared by all P threads; then its rows are normalized.
// The outputs are linear in C' and C given U, so (B) + (C) is exact, not an approximation: the tests hold
// every thread count to the serial form in rationals and the prime field. Per token, (A) and (C) add one
// product each to the chunk loop's nine (eleven with ridge) over all rows but one block's: (P − 1)/P of the
// rows each, spread over all P threads, so no thread waits while another does them (before 2026-12-04 each
// block's thread did its own, and at P = 2 one thread idled through (A) and the other through (C);
// experiments/model/).
//
// Per chunk, in the loop:
//   - Each chunk's rows of Q, K, V are copied once into contiguous w-row buffers (the n-row column-major
//     inputs have a leading dimension of n: read in place, a power-of-two n puts every column of a chunk in
//     the same cache set), and the two transposed operands LIBXSMM cannot take as Aᵀ (Kᵀ for S, [V 1]ᵀ for
//     C') are made from them, with the decay weights folded into the copies. Every product then reads
//     these buffers directly (fast/gemm/small_gemm.hpp): LIBXSMM for float/double, no packing, β = 0 for
//     a fresh result (no zeroed destination), including each chunk's sums of the carried states, which are then
//     added to them (a β = 1 product into the carried state itself summed every token into it one by one: a
//     sequence-deep sum, float error growing like √n).
//   - C' is kept transposed (C'ᵀ, va×d), so that both of its products are A·B or A·Bᵀ.
//   - Block 0 normalizes while the chunk's outputs are written out (no second pass, no extra column read).
//
// Per chunk (local positions a, b < L; D_γ, D_γ² the decay-weighted causal masks; S0, C'0, C0 entering):
//   W = (Q Kᵀ) ⊙ D_γ;  U = W K + diag(γ^{a+1}) Q S0;  S1 = γ^L S0 + (Kᵀ diag(γ^{L−1−b})) K
//   P = (Q Uᵀ) ⊙ D_γ² [+ λ (Q Qᵀ) ⊙ D_γ];  Y = P [V 1] + diag(γ^{2(a+1)}) Q C'0 [+ λ diag(γ^{a+1}) Q C0]
//   C'1ᵀ = γ^{2L} C'0ᵀ + ([V 1]ᵀ diag(γ^{2(L−1−b)})) U   [m'1 = γ^{2L} m'0 + Uᵀ γ^{2(L−1−b)} unnormalized]
//   C1ᵀ = γ^L C0ᵀ + ([V 1]ᵀ diag(γ^{L−1−b})) Q          (read by the outputs with ridge; always carried,
//                                                      for the exported state: cheaper here, in cache, than
//                                                      one n-long product after the last chunk)
// Exact in rationals and the prime field (the products go through Eigen there): the registry's tests hold it
// to the reference, the serial form's state and split-and-carry like every chunked form.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "fast/chunked/gated.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/gemm/small_gemm.hpp"
#include "fast/gemm/transpose.hpp"

namespace hla::fast::chunked {

namespace fused_detail {

// M ← M ⊙ D over the L×L top-left corner, where D_{ab} = pw(a−b) for b ≤ a and 0 above the diagonal
// (at γ = 1 only the upper triangle is cleared). Column-major, leading dimension ld.
template <class T> void causal_mask(T* M, Eigen::Index ld, Eigen::Index L, const ColVec<T>& pw, bool decays) {
  for (Eigen::Index b = 0; b < L; ++b) {
    T* col = M + b * ld;
    for (Eigen::Index a = 0; a < b; ++a) col[a] = T(0);
    if (decays)
      for (Eigen::Index a = b; a < L; ++a) col[a] *= pw(a - b);
  }
}

// One cache line at p into L2 (PREFETCHT1: L2 on Intel and AMD alike), not L1. Written as an asm statement on
// x86-64 because GCC 12 deleted the __builtin_prefetch loops of prefetch_rows below: in this function template
// they compiled to nothing (objdump showed no prefetch instruction in FusedPass<float>::run, from the first version
// of this form to 2026-12-05; a plain function with the same loop kept them), so the next chunk was never asked for.
inline void prefetch_into_l2(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}

// Rows [r, r+L) of the `cols` columns of a column-major matrix (leading dimension ld) into L2: each cache line a
// column's segment spans, once.
template <class T>
void prefetch_segments(const T* base, Eigen::Index ld, Eigen::Index cols, Eigen::Index r, Eigen::Index L) {
  constexpr std::uintptr_t line = 64;
  for (Eigen::Index i = 0; i < cols; ++i) {
    const T* col = base + i * ld + r;
    const std::uintptr_t last = reinterpret_cast<std::uintptr_t>(col + L - 1);
    for (std::uintptr_t a = reinterpret_cast<std::uintptr_t>(col) & ~(line - 1); a <= last; a += line)
      prefetch_into_l2(reinterpret_cast<const void*>(a));
  }
}

// Asks the cache for the next chunk's rows — [c, c+L) of Q, K, V, and rows [y, y+L) of the outputs Y it will write —
// while this one computes: each column's segment is contiguous, but the segments of one chunk lie n numbers apart (at
// power-of-two n each in its own 4 KiB page), more streams than the hardware prefetcher follows. float/double only (a
// no-op for the exact scalars).
//
// Into L2, not L1: the next chunk's rows are 3·d column segments, 36 KiB at w = 48, d = dv = 64 in float (72 in
// double), more than a 32-48 KiB L1 holds beside the chunk's own buffers and states (S, C'ᵀ, Cᵀ: 48 KiB in
// float), so prefetched into L1 they evict the data the chunk's products are reading. Measured on an AMD Zen 4
// (hla_bench, n = 65536, d = dv = 64, one thread, medians of 5, twice): float 51.3 ms with no prefetch (what ran
// before, see above), 53.2 into L1, 46.2 into L2; double 94.3, 96.5, 91.5.
//
// Each cache line a segment spans is asked for once (before 2026-12-06 the segment's last line was asked for a second
// time whenever the segment ended in a line already asked for: at w = 16 in float, every segment's only line twice).
// Measured, Zen 4, one thread, two interleaved rounds: w = 16 float 38.9 → 37.9 ms (an earlier A/B of the same change
// 38.1 → 36.8); double, and w = 32 and 48, unchanged within the noise.
//
// The outputs' lines too (since 2026-12-06): a chunk's rows of Y lie in one line per column as well, which the store
// of its outputs first had to read from memory. Measured, Zen 4, outputs only, n = 65536, d = dv = 64, ms, without →
// with: two interleaved rounds of this code against the build before it, w = 16 float 1T 37.9 → 36.7, double 1T
// 65.7 → 63.6, 2T within 1-2%; w = 32 1-1.5% (three rounds of an earlier switchable build: w = 16 float 38.1 → 35.9,
// double 65.9 → 63.5). PREFETCHW (for writing) gained nothing.
template <class T>
void prefetch_rows(const Problem<T>& p, Eigen::Index c, Eigen::Index L, const Mat<T>& Y, Eigen::Index y) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    for (const Mat<T>* X : {&p.Q, &p.K, &p.V}) prefetch_segments(X->data(), X->rows(), X->cols(), c, L);
    prefetch_segments(Y.data(), Y.rows(), Y.cols(), y, L);
  }
}

// The nine (with ridge eleven) products of a chunk of L rows, dispatched once per call for each chunk length.
// The state products (S_next, Cp_next, C_next) write the chunk's own sum (β = 0), which is then added to the carried
// state: a β = 1 product adds each token's term to the carried state one at a time inside the kernel, a sum as deep
// as the sequence, and the float error grew like √n where hla2/chunked's stayed flat (issue 49); the chunk's sum
// first keeps it w + n/w deep, like hla2/chunked's carry, for d² + 2·va·d additions per chunk.
template <class T> struct ChunkProducts {
  gemm::Product<T> W, U, U_carry, S_next, P, Y, Y_carry, Cp_next, C_next;
  ChunkProducts(Eigen::Index L, Eigen::Index w, Eigen::Index d, Eigen::Index va)
      : W({L, L, d, w, w, w, true, false}),             // Q Kᵀ                   (L×d · (L×d)ᵀ)
        U({L, d, L, w, w, w, false, false}),            // W K                    (L×L · L×d)
        U_carry({L, d, d, w, d, w, false, true}),       // += diag(γ^{a+1}) Q S0  (L×d · d×d)
        S_next({d, d, L, d, w, d, false, false}),       // ΔS = Kᵀx K             (d×L · L×d)
        P({L, L, d, w, w, w, true, false}),             // Q Uᵀ, and Q Qᵀ (ridge)
        Y({L, va, L, w, w, w, false, false}),           // P [V 1]                (L×L · L×va)
        Y_carry({L, va, d, w, va, w, true, true}),      // += Q C'0 (C'0ᵀ stored va×d), and λ Q C0 (ridge)
        Cp_next({va, d, L, va, w, va, false, false}),   // ΔC'ᵀ = [V 1]ᵀx² U      (va×L · L×d)
        C_next({va, d, L, va, w, va, false, false}) {}  // ΔCᵀ = [V 1]ᵀx Q
};

// Per-thread buffers of one chunk (w rows), allocated once per thread per call.
template <class T> struct Buffers {
  Mat<T> Q, K, V, Kt, Vt2, Vt1, Q1, Q2, Qr, W, P, R, U, Y, F, dS, dCpT, dCT;  // dX: the chunk's sum of X
  explicit Buffers(Eigen::Index w, Eigen::Index d, Eigen::Index va, bool decays, bool ridge, bool gated)
      : Q(w, d),
        K(w, d),
        V(w, va),
        Kt(d, w),
        Vt2(va, w),
        Vt1(decays ? va : 0, w),
        Q1(decays ? w : 0, d),
        Q2(decays ? w : 0, d),
        Qr(ridge ? w : 0, d),
        W(w, w),
        P(w, w),
        R(ridge ? w : 0, w),
        U(w, d),
        Y(w, va),
        F(gated ? w : 0, gated ? w : 0),
        dS(d, d),
        dCpT(va, d),
        dCT(va, d) {}
};

// The states carried through a block of chunks: S, C'ᵀ (va×d), m' (d×1, unnormalized only; normalized it is
// C'ᵀ's last row) and Cᵀ (va×d).
template <class T> struct Carried { Mat<T> S, CpT, Mp, CT; };

// Contiguous blocks of chunks, one per thread: block t is chunks [first[t], first[t+1]), tokens
// [rows[t], rows[t+1]).
struct BlockPlan {
  std::vector<Eigen::Index> first, rows;
  BlockPlan(const ChunkPlan& plan, int blocks) : first(blocks + 1), rows(blocks + 1) {
    for (int t = 0; t <= blocks; ++t) {
      first[t] = plan.count * t / blocks;
      rows[t] = std::min(plan.n, plan.begin(first[t]));
    }
  }
};

// x(i) = base^{i + offset}, i < count, each by repeated squaring (no error accumulating along a block). Floating
// powers below the smallest normal number are 0, as in gate_products and hla2_u_final_state: a block's weights
// γ^{len−1−j} pass through the subnormal range (γ = 0.9, double: about 370 of 32768 rows), and a product over rows
// scaled by subnormals runs on the CPU's slow path (measured: hla2/chunked-fused, double, γ = 0.9, 2 threads, slower
// than 1 thread before this) for terms that carry no significant digit.
template <class T> ColVec<T> powers(const T& base, Eigen::Index count, Eigen::Index offset) {
  ColVec<T> x(count);
  for (Eigen::Index i = 0; i < count; ++i) { flush_subnormal(x(i) = power(base, i + offset)); }
  return x;
}

// The S entering a block after a block that decays a carried state by `rho` (γ^len, or the product of its
// gates: FusedPass::block_factor) entered with S and summed ΔS: ρ S + ΔS.
template <class T> Mat<T> s_after(const Mat<T>& S, const Mat<T>& dS, const T& rho) {
  Mat<T> out = dS;
  if (rho != T(1))
    out.noalias() += rho * S;
  else
    out += S;
  return out;
}

// M ← M ⊙ F (s = 1) or M ⊙ F ⊙ F (s = 2) over the L×L top-left corner: the gated causal masks, F the chunk's
// Γ(c+a, c+b) (zero above the diagonal, ChunkGates::decay_mask).
template <class T> void gate_mask(Mat<T>& M, const Mat<T>& F, Eigen::Index L, int s) {
  auto m = M.topLeftCorner(L, L);
  const auto f = F.topLeftCorner(L, L);
  if (s == 1)
    m = m.cwiseProduct(f);
  else
    m = m.cwiseProduct(f).cwiseProduct(f);
}

// x(i) = Γ(r0+i, r0−1) (forward) or x(j) = Γ(r1−1, r0+j) (backward) over rows [r0, r1) of the gates: running
// products of gates ≤ 1 (no quotient). Floating products below the smallest normal number are 0, as in
// hla2_u_final_state: those weights carry no significant digit, and subnormal arithmetic is the CPU's slow path.
template <class T> ColVec<T> gate_products(const ColVec<T>& gamma, Eigen::Index r0, Eigen::Index r1, bool forward) {
  const Eigen::Index len = r1 - r0;
  ColVec<T> x(len);
  if (len == 0) return x;
  if (forward) {
    x(0) = gamma(r0);
    for (Eigen::Index i = 1; i < len; ++i) flush_subnormal(x(i) = x(i - 1) * gamma(r0 + i));
  } else {
    x(len - 1) = T(1);
    for (Eigen::Index j = len - 1; j > 0; --j) flush_subnormal(x(j - 1) = x(j) * gamma(r0 + j));
  }
  return x;
}

// Rows of Y gain the carry of a state entering their block: Y.row(i) += w(i) · q_iᵀ M for the rows q_i of Q (M: d × va,
// or an expression of it), in tiles of rows, so that each product stays in cache and no rows × va temporary is made
// (a block's rows are most of a thread's or a rank's: a fresh temporary that size costs its page faults). w(i) is the
// row's weight, or nullopt for 1.
template <class T, class YRows, class QRows, class State, class Weight>
void add_carry_rows(YRows Y, const QRows& Q, const State& M, Weight&& w) {
  constexpr Eigen::Index tile = 256;
  Mat<T> Z;
  for (Eigen::Index a = 0; a < Q.rows(); a += tile) {
    const Eigen::Index m = std::min(tile, Q.rows() - a);
    Z.noalias() = Q.middleRows(a, m) * M;
    for (Eigen::Index i = 0; i < m; ++i)
      if (const std::optional<T> wi = w(a + i)) Z.row(i) *= *wi;
    Y.middleRows(a, m) += Z;
  }
}

// The two products over a block's rows that the block schedule adds to the chunk loop — (A)'s ΔS and (C)'s carry —
// for float and double, as LIBXSMM products over contiguous copies of tiles of rows (the chunk loop's kernels),
// where Eigen made diag(w) Q or diag(x) K whole first and then multiplied. Their share of a thread's time grows with
// P (each is (P − 1)/P of the rows, over P threads). Measured per thread at 2 threads (Zen 4, n = 65536, d = dv = 64,
// phases timed inside the call, three interleaved rounds; the chunk loop (B) is 23-24 ms in float, 47-48 in double):
//   (C), Eigen → tiles: float 2.7-3.2 → 2.2-2.5 ms, γ = 0.9 7.9 → 3.5, gates 6.2 → 2.6;
//                       double 5.9-6.1 → 4.8-5.5, γ = 0.9 13.7 → 8.0, gates 12.7 → 6.1;
//   (A) with weights:   float γ = 0.9 4.0 → 3.1, gates 3.1 → 2.4; double 7.1 → 6.4, 6.5 → 5.3.
// (A) without weights is by tiles too since 2026-12-06 (FusedPass::s_summary).
constexpr Eigen::Index kRowTile = 256;

// S += Kᵀ diag(x) K over the m rows of K (column-major, leading dimension ld; x empty: no weights). Each tile is
// copied once, as it is and as its weighted transpose (LIBXSMM 1.17 takes no transposed A; the transpose in register
// tiles, fast/gemm/transpose.hpp, then the weights), and one product accumulates into S. Read in place the tile's
// columns lie ld numbers apart — all in the same cache sets when ld is a power of two, as in the chunk loop (the
// copies' comment there) — which measured slower than Eigen's packing.
template <class T>
void add_gram_by_tiles(Mat<T>& S, const T* K, Eigen::Index ld, Eigen::Index m, Eigen::Index d, const ColVec<T>& x) {
  using Stride = Eigen::OuterStride<>;
  Mat<T> Kc(kRowTile, d), Kt(d, kRowTile);
  const gemm::Product<T> full({d, d, kRowTile, d, kRowTile, d, false, true});
  for (Eigen::Index a = 0; a < m; a += kRowTile) {
    const Eigen::Index r = std::min(kRowTile, m - a);
    if (a + r < m) prefetch_segments(K, ld, d, a + r, std::min(kRowTile, m - a - r));
    Kc.topRows(r) = Eigen::Map<const Mat<T>, 0, Stride>(K + a, r, d, Stride(ld));
    gemm::transpose(Kc.data(), kRowTile, r, d, Kt.data(), d);
    if (x.size())
      for (Eigen::Index j = 0; j < r; ++j) Kt.col(j) *= x(a + j);
    if (r == kRowTile)
      full(Kt.data(), Kc.data(), S.data());
    else
      gemm::Product<T>({d, d, r, d, kRowTile, d, false, true})(Kt.data(), Kc.data(), S.data());
  }
}

// Y += diag(w) Q Mᵀ over the m rows of Q (leading dimension ldq) and of Y (ldy), M stored va×d (C'ᵀ, Cᵀ): the carry
// of a state entering a block (w empty: no weights). Per tile: Q's rows copied (weighted) into a contiguous tile, one
// product accumulating into Y's rows in place (β = 1, leading dimension ldy). Until 2026-12-06 the product went into
// a contiguous tile that was then added to Y column by column; in place measured the same in float and 5% faster
// in double (phase/hla2/chunked-fused/carry, Zen 4, three interleaved rounds: 7.5-7.8 ms both ways in float,
// 15.5-16.0 → 14.5-15.0 in double). Both functions ask for the next tile's rows while a tile computes (its columns
// are ld numbers apart, as the chunk's: prefetch_segments): measured, three interleaved rounds, medians of 5, (A)
// float 6.5-6.9 → 6.4-6.7 ms, double 14.4-15.1 → 13.3-13.9; (C) float 7.6-8.5 → 7.2-7.8, double 14.6-16.0 → 14.1-14.8.
template <class T> void add_carry_by_tiles(T* Y, Eigen::Index ldy, const T* Q, Eigen::Index ldq, Eigen::Index m,
                                           const Mat<T>& M, const ColVec<T>& w) {
  using Stride = Eigen::OuterStride<>;
  const Eigen::Index d = M.cols(), va = M.rows();
  Mat<T> Qc(kRowTile, d);
  const gemm::Product<T> full({kRowTile, va, d, kRowTile, va, ldy, true, true});
  for (Eigen::Index a = 0; a < m; a += kRowTile) {
    const Eigen::Index r = std::min(kRowTile, m - a);
    if (a + r < m) {  // the next tile's rows of Q and Y into L2 while this one computes
      const Eigen::Index next = std::min(kRowTile, m - a - r);
      prefetch_segments(Q, ldq, d, a + r, next);
      prefetch_segments(Y, ldy, va, a + r, next);
    }
    const Eigen::Map<const Mat<T>, 0, Stride> Qa(Q + a, r, d, Stride(ldq));
    if (w.size())
      Qc.topRows(r) = w.segment(a, r).asDiagonal() * Qa;
    else
      Qc.topRows(r) = Qa;
    if (r == kRowTile)
      full(Qc.data(), M.data(), Y + a);
    else
      gemm::Product<T>({r, va, d, kRowTile, va, ldy, true, true})(Qc.data(), M.data(), Y + a);
  }
}

// A block that ran from zero C', m', C: its states become the true ones, given the true states `before` it and
// the block's decay ρ (C' and m' decay with ρ², C with ρ). S is left alone (the block ran from the true S).
template <class T> void join_after(Carried<T>& block, const Carried<T>& before, const T& rho) {
  const T g = rho, g2 = g * g;
  block.CpT.noalias() += g2 * before.CpT;
  if (block.Mp.size()) block.Mp.noalias() += g2 * before.Mp;
  block.CT.noalias() += g * before.CT;
}

}  // namespace fused_detail

// The pieces of the fused form over one problem (a whole sequence, or one rank's block of it): the chunk loop
// over a block of chunks, the block summaries and the scan step that joins blocks, and the carry a block
// started from zero is missing. hla2_chunked_fused runs them over threads; fast/distributed over ranks.
template <class T> class FusedPass {
 public:
  using Carried = fused_detail::Carried<T>;
  // augment: carry the normalizer's column ([V 1], so C has m and C' has m') even unnormalized — a rank's
  // block needs the true C and m entering it for the final state.
  //
  // With per-token gates (p.gates non-empty; Options::gamma must then be 1) every γ-power above becomes the Γ of
  // the same ages, as in gated_hla2_chunked (fast/chunked/gated.hpp): per chunk, ChunkGates' st, en, g and the
  // mask F (log-domain differences in floating point, products of gates in the exact scalars); across blocks,
  // running products of the block's gates. With the final state wanted the pass then carries [V 1] (C's normalizer
  // column is carried, not summed with γ-powers at the end); outputs only, gated or not, it does not (the products
  // stay dv wide: hla2_chunked_heads' comment).
  //
  // row0, rows: the pass covers rows [row0, row0 + rows) of p (rows < 0: to the end), read in place — a rank's block
  // of a sequence-parallel run, without a copy of its rows; row indices below are the block's.
  FusedPass(const Problem<T>& p, const Options& opt, bool augment = false, Eigen::Index row0 = 0,
            Eigen::Index rows = -1)
      : p_(p),
        row0_(row0),
        block_gates_(p.gates.size() != 0 ? ColVec<T>(p.gates.segment(row0, rows < 0 ? p.n() - row0 : rows))
                                         : ColVec<T>()),
        plan_(rows < 0 ? p.n() - row0 : rows, opt.chunk),
        d_(p.d()),
        dv_(p.dv()),
        gamma_(from_rational<T>(opt.gamma)),
        gamma2_(gamma_ * gamma_),
        eps_(from_rational<T>(opt.eps)),
        lambda_(from_rational<T>(opt.ridge)),
        gated_(p.gates.size() != 0),
        decays_(gamma_ != T(1) || gated_),
        ridge_(opt.ridge != 0),
        state_(opt.state),
        carry_c_(ridge_ || opt.state),
        divide_(opt.normalized),
        aug_(divide_ || augment || (gated_ && state_)),
        va_(aug_ ? dv_ + 1 : dv_),
        dec_(gamma_, plan_.w),
        dec2_(gamma2_, plan_.w),
        full_(plan_.w, plan_.w, d_, va_),
        last_(plan_.len(plan_.count - 1), plan_.w, d_, va_) {
    if (gated_) {
      reference::require_no_scalar_decay(opt);
      gates_.emplace(block_gates_, plan_, stable_gate_factors<T>(), opt.threads);
    }
  }
  FusedPass(const FusedPass&) = delete;  // gates_ refers to plan_ and to the problem's gates
  FusedPass& operator=(const FusedPass&) = delete;

  const ChunkPlan& plan() const { return plan_; }
  Eigen::Index va() const { return va_; }  // the columns of the outputs before normalizing ([V 1] when normalized)

  // The states entering the sequence (from the initial state), and zero (what a later block starts from).
  Carried initial(const Hla2UStart<T>& start) const {
    return {start.S, start.Cp.leftCols(va_).transpose(), aug_ ? Mat<T>() : Mat<T>(start.Cp.rightCols(1)),
            start.C.leftCols(va_).transpose()};
  }
  Carried zero() const {
    return {Mat<T>::Zero(d_, d_), Mat<T>::Zero(va_, d_), Mat<T>::Zero(aug_ ? 0 : d_, 1), Mat<T>::Zero(va_, d_)};
  }

  // (A) ΔS of rows [r0, r1): Kᵀ diag(Γ(r1−1, j)) K (γ^{r1−1−j} without gates), one product — or its part over rows
  // [a0, a1) ⊆ [r0, r1), with the same weights (so that several threads can share one block's ΔS).
  Mat<T> s_summary(Eigen::Index r0, Eigen::Index r1) const { return s_summary(r0, r1, r0, r1); }
  Mat<T> s_summary(Eigen::Index r0, Eigen::Index r1, Eigen::Index a0, Eigen::Index a1) const {
    (void)r0;
    const auto Kb = rows_of(p_.K, a0, a1 - a0);
    ColVec<T> x;  // empty: no weights
    if (gated_)
      x = fused_detail::gate_products(block_gates_, a0, r1, false).head(a1 - a0);  // Γ(r1−1, j), from r1 back
    else if (decays_)
      x = fused_detail::powers(gamma_, a1 - a0, r1 - a1).reverse();  // γ^{r1−1−j}
    // In float and double by tiles (add_gram_by_tiles), weighted or not. Unweighted, Eigen's one product over the
    // rows (which reads K in place) was faster until the tiles' transpose ran in register tiles (2026-12-06):
    // phase/hla2/chunked-fused/summary, Zen 4, two interleaved rounds, Eigen → tiles: float 8.3-8.6 → 6.3-6.7 ms,
    // double 15.6-16.4 → 14.2-14.4.
    if constexpr (std::is_floating_point_v<T>) {
      Mat<T> S = Mat<T>::Zero(d_, d_);
      fused_detail::add_gram_by_tiles<T>(S, Kb.data(), p_.K.rows(), a1 - a0, d_, x);
      return S;
    }
    return weighted_gram<T>(Kb, x, Kb, 1);
  }
  // What rows [r0, r1) do to a state carried through them: γ^{r1−r0}, or the product of their gates.
  T block_factor(Eigen::Index r0, Eigen::Index r1) const { return segment_decay(block_gates_, gamma_, r0, r1); }

  // (B) The fused chunk loop over chunks [k0, k1), from the states X (updated in place to the states leaving
  // the block); the block's rows of Y (n × va) get its outputs, divided by their normalizer when `final_rows`
  // (X holds the true entering C', C) and normalized.
  void run(Eigen::Index k0, Eigen::Index k1, Carried& X, Mat<T>& Y, bool final_rows,
           std::atomic<Eigen::Index>& zero_den) const;

  // The products alone of `chunks` full chunks of the loop above, for outputs only without ridge (the eight that
  // run() calls then, in its order, with its kernels): on one chunk's buffers and states, in cache, with no copy,
  // mask, prefetch or output written — the least the loop can take with these kernels at this width, against
  // which its time is read (hla_bench's phase/hla2/chunked-fused/products entries, experiments/bench_targets.py).
  // Timing only: the values are those of constant inputs. products_only_flops: the flops it executes.
  void products_only(Eigen::Index chunks) const;
  double products_only_flops(Eigen::Index chunks) const {
    const double w = double(plan_.w), d = double(d_), va = double(va_);
    // W, U, P: w·w·d each; U_carry, S_next: w·d·d; Y: w·w·va; Y_carry, Cp_next: w·va·d
    return 2.0 * double(chunks) * (3 * w * w * d + 2 * w * d * d + w * w * va + 2 * w * va * d);
  }

  // (C) Rows [a0, a1) of Y, in a block starting at row r0 that ran from zero C' (and C), gain the carry of the
  // entering ones, x_i² Q C'ᵀ [+ λ x_i Q Cᵀ] for row i of the block, x_i = γ^{i+1} (Γ(r0+i, r0−1) with gates); then
  // normalized if `normalize_rows`. Any split of a block's rows gives the same rows.
  void add_entering_carry(Eigen::Index r0, Eigen::Index a0, Eigen::Index a1, const Carried& entering, Mat<T>& Y,
                          bool normalize_rows, std::atomic<Eigen::Index>& zero_den) const {
    const Eigen::Index nt = a1 - a0;
    const ColVec<T> x =
        gated_ ? ColVec<T>(fused_detail::gate_products(block_gates_, r0, a1, true).tail(nt)) : ColVec<T>();
    // Row i's weight, scale · x_i^s (gates) or scale · γ^{s(i+1)}, for the rows [a0, a1); empty when every one is 1.
    // The gates' squares are flushed like their products (gate_products): x_i ≥ the smallest normal number, but x_i²
    // falls below it wherever x_i < its square root, and a product over rows scaled by subnormal weights runs on the
    // CPU's slow path. Measured on the 16-core H100 host before this (results/cpu16/): hla2/chunked-fused gated took
    // 1.4-1.7x its γ = 0.9 sibling's time at 8 and 16 threads, about 1x at one (where no block adds this carry).
    auto weights = [&](const T& scale, int s) -> ColVec<T> {
      if (gated_) {
        ColVec<T> w = scale * (s == 2 ? ColVec<T>(x.cwiseProduct(x)) : x);
        for (Eigen::Index i = 0; i < w.size(); ++i) flush_subnormal(w(i));
        return w;
      }
      if (decays_) return scale * fused_detail::powers(s == 2 ? gamma2_ : gamma_, nt, a0 - r0 + 1);
      if (scale != T(1)) return ColVec<T>::Constant(nt, scale);
      return ColVec<T>();
    };
    auto add = [&](const Mat<T>& MT, const ColVec<T>& w) {  // MT: the state stored va×d (C'ᵀ, Cᵀ)
      if constexpr (std::is_floating_point_v<T>) {
        fused_detail::add_carry_by_tiles<T>(Y.data() + a0, Y.rows(), p_.Q.data() + row0_ + a0, p_.Q.rows(), nt, MT, w);
      } else {
        fused_detail::add_carry_rows<T>(Y.middleRows(a0, nt), rows_of(p_.Q, a0, nt), MT.transpose(),
                                        [&w](Eigen::Index i) -> std::optional<T> {
                                          if (w.size() == 0) return std::nullopt;
                                          return w(i);
                                        });
      }
    };
    add(entering.CpT, weights(T(1), 2));
    if (ridge_) add(entering.CT, weights(lambda_, 1));
    if (normalize_rows) normalize(Y.middleRows(a0, nt), a0, zero_den);
  }

  // The outputs from Y (n × va, normalized rows): a vanished normalizer raised, the normalizer's column dropped.
  Mat<T> outputs(Mat<T>&& Y, Eigen::Index row0, const std::atomic<Eigen::Index>& zero_den) const {
    const Eigen::Index z = zero_den.load();
    if (z < Y.rows()) divide_by_normalizer(Y.row(z).head(dv_), T(0), row0 + z);  // throws
    if (aug_) Y.conservativeResize(Eigen::NoChange, dv_);  // column-major: drops the normalizer in place
    return std::move(Y);
  }

  // The final state in the serial form's terms, from the states leaving the last block.
  NamedState<T> final_state(const Carried& fin, const Hla2UStart<T>& start, int threads) const {
    const Mat<T> Cp_final = fin.CpT.transpose();
    const Mat<T> Cp_full = aug_ ? Cp_final : join(Cp_final, fin.Mp);
    const Mat<T> C_carried = fin.CT.transpose();
    return hla2_u_final_state<T>(rows_of(p_.Q, 0, plan_.n), rows_of(p_.V, 0, plan_.n), fin.S, start.C, &C_carried,
                                 Cp_full, gamma_, threads);
  }

 private:
  // Divides rows of Y (the first one row0) by their normalizer plus ε; records the first that vanished.
  template <class Rows> void normalize(Rows rows, Eigen::Index row0, std::atomic<Eigen::Index>& zero_den) const {
    if (!divide_) return;
    for (Eigen::Index a = 0; a < rows.rows(); ++a) {
      const T den = rows(a, dv_) + eps_;
      if (den == T(0)) {
        for (Eigen::Index t = zero_den.load(); row0 + a < t && !zero_den.compare_exchange_weak(t, row0 + a);) {}
        continue;
      }
      rows.row(a).head(dv_) /= den;
    }
  }

  // Rows [r, r + len) of the block, in p's rows.
  auto rows_of(const Mat<T>& M, Eigen::Index r, Eigen::Index len) const { return M.middleRows(row0_ + r, len); }

  const Problem<T>& p_;
  Eigen::Index row0_;      // the block's first row in p
  ColVec<T> block_gates_;  // the block's gates (empty without)
  ChunkPlan plan_;
  Eigen::Index d_, dv_;
  T gamma_, gamma2_, eps_, lambda_;
  // gated_: per-token gates; decays_: any decay (γ < 1 or gates); state_: the final state is wanted
  // (Options::state); carry_c_: C is carried (read by the outputs with ridge, else only the state's);
  // divide_: normalized; aug_: [V 1] carried (normalized, augment, or gated with the state)
  bool gated_, decays_, ridge_, state_, carry_c_, divide_, aug_;
  Eigen::Index va_;
  Decay<T> dec_, dec2_;
  fused_detail::ChunkProducts<T> full_, last_;
  std::optional<ChunkGates<T>> gates_;  // per-chunk gate factors, with gates
};

template <class T> void FusedPass<T>::run(Eigen::Index k0, Eigen::Index k1, Carried& X, Mat<T>& Y, bool final_rows,
                                          std::atomic<Eigen::Index>& zero_den) const {
  using namespace fused_detail;
  const Problem<T>& p = p_;
  const Eigen::Index w = plan_.w, M = plan_.count, d = d_, dv = dv_, va = va_;
  const bool decays = decays_, ridge = ridge_, aug = aug_, carry_c = carry_c_;
  const bool carry_mp = !aug && state_;  // m' on the side (unnormalized): read by the state only
  const Decay<T>&dec = dec_, &dec2 = dec2_;
  const T& lambda = lambda_;
  const ChunkGates<T>* gates = gated_ ? &*gates_ : nullptr;
  Buffers<T> b(w, d, va, decays, ridge, gates != nullptr);
  // The chunk's weights: en(j) = Γ(c+L−1, c+j) (γ^{L−1−j}) and st(a) = Γ(c+a, c−1) (γ^{a+1}), squared for C'.
  auto en = [&](Eigen::Index c, Eigen::Index L, Eigen::Index j, int s) -> T {
    if (!gates) return (s == 1 ? dec : dec2).pw(L - 1 - j);
    const T& x = gates->en(c + j);
    return s == 1 ? x : T(x * x);
  };
  auto st = [&](Eigen::Index c, Eigen::Index a, int s) -> T {
    if (!gates) return (s == 1 ? dec : dec2).pw(a + 1);
    const T& x = gates->st(c + a);
    return s == 1 ? x : T(x * x);
  };
  for (Eigen::Index k = k0; k < k1; ++k) {
    const Eigen::Index c = plan_.begin(k), L = plan_.len(k);
    const ChunkProducts<T>& mm = L == w ? full_ : last_;
    const T g = gates ? gates->g[k] : dec.chunk_factor(L), g2 = g * g;
    if (k + 1 < M) prefetch_rows(p, row0_ + plan_.begin(k + 1), plan_.len(k + 1), Y, plan_.begin(k + 1));
    if (gates) gates->decay_mask(k, b.F.topLeftCorner(L, L));
    // Copies: the chunk's rows of Q, K, [V 1]; Kᵀ weighted by γ^{L−1−b}, [V 1]ᵀ by γ^{2(L−1−b)} (and by
    // γ^{L−1−b} for C); Q weighted by γ^{a+1}, γ^{2(a+1)} (and λγ^{a+1} with ridge).
    b.Q.topRows(L) = rows_of(p.Q, c, L);
    b.K.topRows(L) = rows_of(p.K, c, L);
    b.V.topLeftCorner(L, dv) = rows_of(p.V, c, L);
    if (aug) b.V.col(dv).head(L).setOnes();
    // The transposes in register tiles (fast/gemm/transpose.hpp), then the weights column by column.
    gemm::transpose(b.K.data(), w, L, d, b.Kt.data(), d);
    gemm::transpose(b.V.data(), w, L, va, b.Vt2.data(), va);
    if (decays)
      for (Eigen::Index j = 0; j < L; ++j) {
        const T x = en(c, L, j, 1);
        if (carry_c) b.Vt1.col(j) = x * b.Vt2.col(j);
        b.Kt.col(j) *= x;
        b.Vt2.col(j) *= en(c, L, j, 2);
      }
    const T* Q1 = b.Q.data();  // diag(γ^{a+1}) Q
    const T* Q2 = b.Q.data();  // diag(γ^{2(a+1)}) Q
    if (decays) {
      for (Eigen::Index a = 0; a < L; ++a) {
        b.Q1.row(a) = st(c, a, 1) * b.Q.row(a);
        b.Q2.row(a) = st(c, a, 2) * b.Q.row(a);
      }
      Q1 = b.Q1.data();
      Q2 = b.Q2.data();
    }
    if (ridge)
      for (Eigen::Index a = 0; a < L; ++a) b.Qr.row(a) = (lambda * st(c, a, 1)) * b.Q.row(a);
    const T* Vt1 = decays ? b.Vt1.data() : b.Vt2.data();

    // U = ((Q Kᵀ) ⊙ D_γ) K + diag(γ^{a+1}) Q S0;  S1 = γ^L S0 + Kᵀx K.
    mm.W(b.Q.data(), b.K.data(), b.W.data());
    if (gates)
      gate_mask(b.W, b.F, L, 1);
    else
      causal_mask(b.W.data(), w, L, dec.pw, decays);
    mm.U(b.W.data(), b.K.data(), b.U.data());
    mm.U_carry(Q1, X.S.data(), b.U.data());
    if (decays) X.S *= g;
    mm.S_next(b.Kt.data(), b.K.data(), b.dS.data());
    X.S += b.dS;

    // P = (Q Uᵀ) ⊙ D_γ² [+ λ (Q Qᵀ) ⊙ D_γ];  Y = P [V 1] + diag(γ^{2(a+1)}) Q C'0 [+ λ diag(γ^{a+1}) Q C0].
    mm.P(b.Q.data(), b.U.data(), b.P.data());
    if (gates)
      gate_mask(b.P, b.F, L, 2);
    else
      causal_mask(b.P.data(), w, L, dec2.pw, decays);
    if (ridge) {
      mm.P(b.Q.data(), b.Q.data(), b.R.data());
      if (gates)
        gate_mask(b.R, b.F, L, 1);
      else
        causal_mask(b.R.data(), w, L, dec.pw, decays);
      b.P.topLeftCorner(L, L) += lambda * b.R.topLeftCorner(L, L);
    }
    mm.Y(b.P.data(), b.V.data(), b.Y.data());
    mm.Y_carry(Q2, X.CpT.data(), b.Y.data());
    if (ridge) mm.Y_carry(b.Qr.data(), X.CT.data(), b.Y.data());

    // C'1ᵀ = γ^{2L} C'0ᵀ + [V 1]ᵀx² U;  m'1 = γ^{2L} m'0 + Uᵀ x² (unnormalized);  C1ᵀ = γ^L C0ᵀ + [V 1]ᵀx Q.
    // m' and C only when something reads them (the state; C also the outputs with ridge): without, one product
    // of the chunk's nine is saved (measured, Zen 4, one thread, n = 65536, d = dv = 64: float 46.5 → 41.8 ms,
    // double 91 → 82).
    if (decays) {
      X.CpT *= g2;
      if (carry_mp) X.Mp *= g2;
      if (carry_c) X.CT *= g;
    }
    mm.Cp_next(b.Vt2.data(), b.U.data(), b.dCpT.data());
    X.CpT += b.dCpT;
    if (carry_mp) {
      if (decays)
        X.Mp.noalias() += b.U.topRows(L).transpose() * dec2.pw.segment(0, L).reverse();
      else
        X.Mp += b.U.topRows(L).colwise().sum().transpose();
    }
    if (carry_c) {
      mm.C_next(Vt1, b.Q.data(), b.dCT.data());
      X.CT += b.dCT;
    }

    // Outputs from the true entering states are final: normalized here (no second pass).
    if (final_rows) normalize(b.Y.topRows(L), c, zero_den);
    Y.middleRows(c, L) = b.Y.topRows(L);
  }
}

template <class T> void FusedPass<T>::products_only(Eigen::Index chunks) const {
  const Eigen::Index w = plan_.w, d = d_, va = va_;
  fused_detail::Buffers<T> b(w, d, va, false, false, false);
  for (Mat<T>* m : {&b.Q, &b.K, &b.V, &b.Kt, &b.Vt2}) m->setConstant(T(1) / T(static_cast<int>(d)));
  fused_detail::Carried<T> X = zero();
  const fused_detail::ChunkProducts<T>& mm = full_;
  for (Eigen::Index k = 0; k < chunks; ++k) {
    mm.W(b.Q.data(), b.K.data(), b.W.data());
    mm.U(b.W.data(), b.K.data(), b.U.data());
    mm.U_carry(b.Q.data(), X.S.data(), b.U.data());
    mm.S_next(b.Kt.data(), b.K.data(), b.dS.data());
    X.S += b.dS;
    mm.P(b.Q.data(), b.U.data(), b.P.data());
    mm.Y(b.P.data(), b.V.data(), b.Y.data());
    mm.Y_carry(b.Q.data(), X.CpT.data(), b.Y.data());
    mm.Cp_next(b.Vt2.data(), b.U.data(), b.dCpT.data());
    X.CpT += b.dCpT;
  }
}

// The two-level block schedule (header comment) over `threads` threads, from the entering states X: S true;
// C', m', C true when `final_rows`, else zero (a rank's block, its carry added by the caller). Returns Y (n × va;
// normalized rows when `final_rows`) and leaves in X the states after the last token (C', m', C relative to X's).
template <class T> Mat<T> fused_blocks(const FusedPass<T>& pass, fused_detail::Carried<T>& X, int threads,
                                       bool final_rows, std::atomic<Eigen::Index>& zero_den) {
  using Carried = fused_detail::Carried<T>;
  const ChunkPlan& plan = pass.plan();
  threads = static_cast<int>(std::min<Eigen::Index>(std::max(threads, 1), plan.count));
  // One block per thread, statically: more blocks would add (A) and (C) work (every block but the last and
  // the first does them) without shortening the span on dedicated cores.
  const int nb = threads;
  const fused_detail::BlockPlan blocks(plan, nb);
  // cur[t]: the states entering block t, then (after its chunk loop) leaving it — from a zero C', m', C for
  // t > 0 until the scan after (B) joins them; entry[t]: the states entering block t > 0 after that scan.
  std::vector<Carried> cur(nb), entry(nb);
  cur[0] = std::move(X);
  for (int t = 1; t < nb; ++t) cur[t] = pass.zero();
  std::vector<Mat<T>> dS(static_cast<std::size_t>(std::max(nb - 1, 0) * threads));
  Mat<T> Y(plan.n, pass.va());
  // Part s of block t's rows: [a0, a1) of [r0, r1).
  struct Span {
    Eigen::Index r0, r1, a0, a1;
  };
  auto part = [&](int t, int s) {
    const Eigen::Index r0 = blocks.rows[t], r1 = blocks.rows[t + 1];
    return Span{r0, r1, r0 + (r1 - r0) * s / threads, r0 + (r1 - r0) * (s + 1) / threads};
  };

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    omp_set_num_threads(1);  // the blocks are the parallelism: no nested GEMM threads (the Eigen path)
    // (A) ΔS of every block but the last, then (one thread) S entering every block. Each block's ΔS is split into
    // `threads` row ranges, so that all threads share (A) instead of the last block's thread waiting for it; the
    // parts are added in order.
#pragma omp for schedule(static)
    for (int i = 0; i < (nb - 1) * threads; ++i) {
      const Span sp = part(i / threads, i % threads);
      dS[i] = pass.s_summary(sp.r0, sp.r1, sp.a0, sp.a1);
    }
#pragma omp single
    for (int t = 0; t + 1 < nb; ++t) {
      Mat<T> sum = std::move(dS[t * threads]);
      for (int s = 1; s < threads; ++s) sum += dS[t * threads + s];
      cur[t + 1].S = fused_detail::s_after(cur[t].S, sum, pass.block_factor(blocks.rows[t], blocks.rows[t + 1]));
    }
    // (B) the chunk loop over each block; then (one thread) the scan over the blocks' C', m', C.
#pragma omp for schedule(static, 1)
    for (int t = 0; t < nb; ++t)
      pass.run(blocks.first[t], blocks.first[t + 1], cur[t], Y, final_rows && t == 0, zero_den);
#pragma omp single
    for (int t = 1; t < nb; ++t) {
      entry[t] = cur[t - 1];
      fused_detail::join_after(cur[t], entry[t], pass.block_factor(blocks.rows[t], blocks.rows[t + 1]));
    }
    // (C) the carry every block but the first missed, split like (A): every thread takes a share of every later
    // block's rows.
#pragma omp for schedule(static)
    for (int i = threads; i < nb * threads; ++i) {
      const Span sp = part(i / threads, i % threads);
      pass.add_entering_carry(sp.r0, sp.a0, sp.a1, entry[i / threads], Y, final_rows, zero_den);
    }
  }
  X = std::move(cur[nb - 1]);
  return Y;
}

template <class T> Run<T> hla2_chunked_fused(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const FusedPass<T> pass(p, opt);
  const Hla2UStart<T> start(init, p.d(), p.dv());
  fused_detail::Carried<T> X = pass.initial(start);
  std::atomic<Eigen::Index> zero_den{p.n()};  // first token whose normalizer vanished (n: none)
  Mat<T> Y = fused_blocks(pass, X, opt.threads, true, zero_den);
  Mat<T> O = pass.outputs(std::move(Y), 0, zero_den);
  return {std::move(O), opt.state ? pass.final_state(X, start, opt.threads) : NamedState<T>{}};
}

}  // namespace hla::fast::chunked

// FusedPass is compiled once per scalar, in generated/register_chunked_<scalar>.cpp (the kind's hook in
// fast/chunked/register.hpp, CMakeLists.txt); the sequence-parallel forms (fast/distributed/), which run the same
// pieces over ranks, call that copy instead of compiling their own: docs/build.md "Sixth pass".
#define HLA_FUSED_PASS(EXTERN, T) EXTERN template class FusedPass<T>;
namespace hla::fast::chunked {
HLA_FUSED_PASS(extern, rational)
HLA_FUSED_PASS(extern, fp61)
HLA_FUSED_PASS(extern, mpfr256)
HLA_FUSED_PASS(extern, double)
HLA_FUSED_PASS(extern, float)
}  // namespace hla::fast::chunked
