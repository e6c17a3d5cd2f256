// hla2's u-form (fast/chunked/hla2.hpp: linear attention over the keys u_j = S_j q_j with decay γ²), computed
// chunk by chunk in one pass — form "chunked-fused". Same algebra, same state; what
// changes is how the work is laid out (and C, which hla2/chunked sums over the whole sequence after the
// last chunk for the exported state, is carried chunk by chunk: one more product per chunk, on data in cache):
//
//   - One OpenMP region per call. Chunks are claimed in order; the two carried states a chunk needs from
//     its predecessor (S entering it for U, C' entering it for the outputs) are published by the thread
//     that computed them and awaited point to point, so there are no barriers. With several threads a
//     chunk's contributions to the states (Kᵀx K, [V 1]ᵀx² U, [V 1]ᵀx Q) are products into its own buffers,
//     made before it waits; what runs between a wait and its publish is only X1 = γ^L X0 + ΔX, so the
//     chain that threads must take in turn is d² + 2·va·d additions per chunk, not five of its products.
//     The states live in a ring of three slots (slot k mod 3 holds the state entering chunk k): a chunk
//     reads its entering state after publishing the next one, and writes a slot only once the chunk that
//     entered with it (three back) has released it. With one thread the states are updated in place by
//     β = 1 products and the waits are never taken.
//   - C is read by a chunk only with ridge. Without it, and with several threads, C is not handed from
//     chunk to chunk (one state fewer crossing between cores per chunk, one addition pass fewer in the
//     chain): each thread sums its own chunks' ΔC, decayed to the end of its last chunk, and the sums are
//     added after the region. The outputs are unchanged; in floating point the exported C (and G) are
//     rounded in an order that depends on which thread took which chunk.
//   - Each chunk's rows of Q, K, V are copied once into contiguous w-row buffers (the n-row column-major
//     inputs have a leading dimension of n: read in place, a power-of-two n puts every column of a chunk in
//     the same cache set), and the two transposed operands LIBXSMM cannot take as Aᵀ (Kᵀ for S, [V 1]ᵀ for
//     C') are made from them, with the decay weights folded into the copies. Every product then reads
//     these buffers directly (fast/gemm/small_gemm.hpp): LIBXSMM for float/double, no packing, β = 0 for
//     a fresh result (no zeroed destination) and β = 1 to accumulate into the carried state itself.
//   - C' is kept transposed (C'ᵀ, va×d), so that both of its products are A·B or A·Bᵀ.
//   - Normalization divides while the chunk's outputs are written out (no second pass, no extra column).
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
#include <thread>
#include <type_traits>

#include "fast/chunked/hla2.hpp"
#include "fast/gemm/small_gemm.hpp"

namespace hla::fast::chunked {

namespace fused_detail {

// Waits until `published` reaches `k` (acquire: what the publisher wrote before its release is visible).
inline void await(const std::atomic<Eigen::Index>& published, Eigen::Index k) {
  for (int spins = 0; published.load(std::memory_order_acquire) < k; ++spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spins > 4096) std::this_thread::yield();  // the other thread may be descheduled (shared machine)
  }
}

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

// Asks the cache for rows [c, c+L) of Q, K, V (the next chunk's, while this one computes): each column's
// segment is contiguous, but the segments of one chunk lie n numbers apart, more streams than the hardware
// prefetcher follows. float/double only (a no-op for the exact scalars).
template <class T> void prefetch_rows(const Problem<T>& p, Eigen::Index c, Eigen::Index L) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    constexpr Eigen::Index line = 64 / sizeof(T);
    for (const Mat<T>* X : {&p.Q, &p.K, &p.V})
      for (Eigen::Index i = 0; i < X->cols(); ++i) {
        const T* col = X->data() + i * X->rows() + c;
        for (Eigen::Index a = 0; a < L; a += line) __builtin_prefetch(col + a);
        __builtin_prefetch(col + L - 1);
      }
  }
}

// The nine (with ridge eleven) products of a chunk of L rows, dispatched once per call for each chunk length.
template <class T> struct ChunkProducts {
  gemm::Product<T> W, U, U_carry, S_next, P, Y, Y_carry, Cp_next, C_next;
  // into_state: S_next, Cp_next and C_next accumulate into the carried state (β = 1, one thread); else they
  // write the chunk's own contribution ΔX (β = 0, same shape), added to the state when it is its turn.
  // c_summed: C_next accumulates into the thread's own sum of ΔC instead (several threads, C not chained).
  ChunkProducts(Eigen::Index L, Eigen::Index w, Eigen::Index d, Eigen::Index va, bool into_state, bool c_summed)
      : W({L, L, d, w, w, w, true, false}),            // Q Kᵀ                   (L×d · (L×d)ᵀ)
        U({L, d, L, w, w, w, false, false}),           // W K                    (L×L · L×d)
        U_carry({L, d, d, w, d, w, false, true}),      // += diag(γ^{a+1}) Q S0  (L×d · d×d)
        S_next({d, d, L, d, w, d, false, into_state}), // S1 += Kᵀx K            (d×L · L×d)
        P({L, L, d, w, w, w, true, false}),            // Q Uᵀ, and Q Qᵀ (ridge)
        Y({L, va, L, w, w, w, false, false}),          // P [V 1]                (L×L · L×va)
        Y_carry({L, va, d, w, va, w, true, true}),     // += Q C'0 (C'0ᵀ stored va×d), and λ Q C0 (ridge)
        Cp_next({va, d, L, va, w, va, false, into_state}),   // C'1ᵀ += [V 1]ᵀx² U     (va×L · L×d)
        C_next({va, d, L, va, w, va, false, into_state || c_summed}) {}  // C1ᵀ += [V 1]ᵀx Q
};

// Per-thread buffers of one chunk (w rows), allocated once per thread per call.
template <class T> struct Buffers {
  Mat<T> Q, K, V, Kt, Vt2, Vt1, Q1, Q2, Qr, W, P, R, U, Y;
  Mat<T> dS, dCpT, dMp, dCT;  // the chunk's contributions to the states (several threads only; ΔC when C is chained)
  explicit Buffers(Eigen::Index w, Eigen::Index d, Eigen::Index va, bool decays, bool ridge, bool deltas, bool c_delta)
      : Q(w, d), K(w, d), V(w, va), Kt(d, w), Vt2(va, w), Vt1(decays ? va : 0, w), Q1(decays ? w : 0, d),
        Q2(decays ? w : 0, d), Qr(ridge ? w : 0, d), W(w, w), P(w, w), R(ridge ? w : 0, w), U(w, d), Y(w, va),
        dS(deltas ? d : 0, d), dCpT(deltas ? va : 0, d), dMp(deltas ? d : 0, 1), dCT(c_delta ? va : 0, d) {}
};

}  // namespace fused_detail

template <class T> Run<T> hla2_chunked_fused(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using namespace fused_detail;
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  const ChunkPlan plan(n, opt.chunk);
  const Eigen::Index M = plan.count, w = plan.w;
  const T gamma = from_rational<T>(opt.gamma), eps = from_rational<T>(opt.eps), lambda = from_rational<T>(opt.ridge);
  const bool decays = gamma != T(1), ridge = opt.ridge != 0, aug = opt.normalized;
  const Eigen::Index va = aug ? dv + 1 : dv;  // the values, with the normalizer's column of ones when normalized
  const Decay<T> dec(gamma, w), dec2(T(gamma * gamma), w);

  const Hla2UStart<T> start(init, d, dv);
  const int threads = static_cast<int>(std::min<Eigen::Index>(std::max(opt.threads, 1), M));
  const bool pipelined = threads > 1;
  const bool c_chained = !pipelined || ridge;  // else each thread sums its chunks' ΔC (header comment)
  // The carried states: one slot updated in place with one thread; with several a ring of three, slot
  // k mod 3 holding the state entering chunk k (see the header comment for who may write which slot when).
  constexpr int ring = 3;
  const int slots = pipelined ? ring : 1;
  auto slot = [&](Eigen::Index k) { return int(k % slots); };
  Mat<T> S[ring] = {start.S, Mat<T>(pipelined ? d : 0, d), Mat<T>(pipelined ? d : 0, d)};
  Mat<T> CpT[ring] = {start.Cp.leftCols(va).transpose(), Mat<T>(pipelined ? va : 0, d), Mat<T>(pipelined ? va : 0, d)};
  Mat<T> Mp[ring] = {aug ? Mat<T>() : Mat<T>(start.Cp.rightCols(1)), Mat<T>(aug || !pipelined ? 0 : d, 1),
                     Mat<T>(aug || !pipelined ? 0 : d, 1)};
  Mat<T> CT[ring] = {start.C.leftCols(va).transpose(), Mat<T>(pipelined && c_chained ? va : 0, d),
                     Mat<T>(pipelined && c_chained ? va : 0, d)};
  std::atomic<Eigen::Index> s_ready{0}, cp_ready{0}, next_chunk{0};
  // released[r] = k + 1 once chunk k (slot(k) = r) has read its entering states for the last time.
  std::atomic<Eigen::Index> released[ring] = {0, 0, 0};
  // X[out] = g·X[in] + ΔX (several threads: X[in] stays readable) or X[in] *= g (one thread, before the
  // chunk's β = 1 product adds ΔX in place).
  auto advance = [&](Mat<T>* X, int in, int out, const T& g, const Mat<T>& delta) {
    if (!pipelined) {
      if (decays) X[in] *= g;
    } else if (decays) {
      X[out].noalias() = g * X[in] + delta;
    } else {
      X[out].noalias() = X[in] + delta;
    }
  };

  const ChunkProducts<T> full(w, w, d, va, !pipelined, !c_chained);
  const Eigen::Index tail = plan.len(M - 1);
  const ChunkProducts<T> last = tail == w ? full : ChunkProducts<T>(tail, w, d, va, !pipelined, !c_chained);
  // Without the C chain: thread t's sum Σ γ^{e_t − e_k} ΔC_k over its chunks k (e_k: the end of chunk k,
  // e_t that of its last one; e_t = 0 while it has none).
  std::vector<Mat<T>> c_sum(c_chained ? 0 : threads);
  std::vector<Eigen::Index> c_end(c_chained ? 0 : threads, 0);

  Mat<T> O(n, dv);
  std::atomic<Eigen::Index> zero_den{n};  // first token whose normalizer vanished (n: none)

#pragma omp parallel num_threads(threads) if (pipelined)
  {
    omp_set_num_threads(1);  // the chunks are the parallelism: no nested GEMM threads (the Eigen path)
    Buffers<T> b(w, d, va, decays, ridge, pipelined, pipelined && c_chained);
    const int tid = omp_get_thread_num();
    if (!c_chained) c_sum[tid] = Mat<T>::Zero(va, d);
    for (Eigen::Index k; (k = next_chunk.fetch_add(1, std::memory_order_relaxed)) < M;) {
      const Eigen::Index c = plan.begin(k), L = plan.len(k);
      const ChunkProducts<T>& mm = L == w ? full : last;
      const T g = dec.chunk_factor(L), g2 = g * g;
      const int in = slot(k), out = slot(k + 1);
      if (k + 1 < M) prefetch_rows(p, plan.begin(k + 1), plan.len(k + 1));
      // Copies: the chunk's rows of Q, K, [V 1]; Kᵀ weighted by γ^{L−1−b}, [V 1]ᵀ by γ^{2(L−1−b)} (and by
      // γ^{L−1−b} for C); Q weighted by γ^{a+1}, γ^{2(a+1)} (and λγ^{a+1} with ridge).
      b.Q.topRows(L) = p.Q.middleRows(c, L);
      b.K.topRows(L) = p.K.middleRows(c, L);
      b.V.topLeftCorner(L, dv) = p.V.middleRows(c, L);
      if (aug) b.V.col(dv).head(L).setOnes();
      for (Eigen::Index j = 0; j < L; ++j) {
        const T x = dec.pw(L - 1 - j), x2 = dec2.pw(L - 1 - j);
        if (decays) {
          b.Kt.col(j) = x * b.K.row(j).transpose();
          b.Vt2.col(j) = x2 * b.V.row(j).transpose();
        } else {
          b.Kt.col(j) = b.K.row(j).transpose();
          b.Vt2.col(j) = b.V.row(j).transpose();
        }
        if (decays) b.Vt1.col(j) = x * b.V.row(j).transpose();
      }
      const T* Q1 = b.Q.data();  // diag(γ^{a+1}) Q
      const T* Q2 = b.Q.data();  // diag(γ^{2(a+1)}) Q
      if (decays) {
        for (Eigen::Index a = 0; a < L; ++a) {
          b.Q1.row(a) = dec.pw(a + 1) * b.Q.row(a);
          b.Q2.row(a) = dec2.pw(a + 1) * b.Q.row(a);
        }
        Q1 = b.Q1.data();
        Q2 = b.Q2.data();
      }
      if (ridge)
        for (Eigen::Index a = 0; a < L; ++a) b.Qr.row(a) = (lambda * dec.pw(a + 1)) * b.Q.row(a);
      const T* Vt1 = decays ? b.Vt1.data() : b.Vt2.data();

      // U = ((Q Kᵀ) ⊙ D_γ) K: no carry needed; nor the chunk's ΔS = Kᵀx K (several threads).
      mm.W(b.Q.data(), b.K.data(), b.W.data());
      causal_mask(b.W.data(), w, L, dec.pw, decays);
      mm.U(b.W.data(), b.K.data(), b.U.data());
      if (pipelined) mm.S_next(b.Kt.data(), b.K.data(), b.dS.data());

      // S entering this chunk: U += diag(γ^{a+1}) Q S0, S1 = γ^L S0 + Kᵀx K, published. With several threads
      // S1 is published first and S0 read after (it stays in its slot until this chunk releases it).
      await(s_ready, k);
      if (pipelined) {
        await(released[out], k + 2 - ring);  // the chunk that entered with slot `out` is done with it
        advance(S, in, out, g, b.dS);
        s_ready.store(k + 1, std::memory_order_release);
        mm.U_carry(Q1, S[in].data(), b.U.data());
      } else {
        mm.U_carry(Q1, S[in].data(), b.U.data());
        advance(S, in, out, g, b.dS);
        mm.S_next(b.Kt.data(), b.K.data(), S[out].data());
        s_ready.store(k + 1, std::memory_order_release);
      }

      // m' (unnormalized) gains Uᵀ x², x²_b = γ^{2(L−1−b)}: m'1 = γ^{2L} m'0 + Uᵀ x².
      auto add_m_prime_gain = [&](Mat<T>& m) {
        if (decays) m.noalias() += b.U.topRows(L).transpose() * dec2.pw.segment(0, L).reverse();
        else m += b.U.topRows(L).colwise().sum().transpose();
      };
      // The chunk's contributions to C', m' and C (several threads: into its buffers, before it waits).
      if (pipelined) {
        mm.Cp_next(b.Vt2.data(), b.U.data(), b.dCpT.data());
        if (!aug) {
          b.dMp.setZero();
          add_m_prime_gain(b.dMp);
        }
        if (c_chained) {
          mm.C_next(Vt1, b.Q.data(), b.dCT.data());
        } else {
          if (decays && c_end[tid] > 0) c_sum[tid] *= power(gamma, c + L - c_end[tid]);
          mm.C_next(Vt1, b.Q.data(), c_sum[tid].data());
          c_end[tid] = c + L;
        }
      }

      // P = (Q Uᵀ) ⊙ D_γ² [+ λ (Q Qᵀ) ⊙ D_γ];  Y = P [V 1].
      mm.P(b.Q.data(), b.U.data(), b.P.data());
      causal_mask(b.P.data(), w, L, dec2.pw, decays);
      if (ridge) {
        mm.P(b.Q.data(), b.Q.data(), b.R.data());
        causal_mask(b.R.data(), w, L, dec.pw, decays);
        b.P.topLeftCorner(L, L) += lambda * b.R.topLeftCorner(L, L);
      }
      mm.Y(b.P.data(), b.V.data(), b.Y.data());

      // C' entering this chunk: Y += diag(γ^{2(a+1)}) Q C'0 [+ λ diag(γ^{a+1}) Q C0]; C'1, m'1 (and C1),
      // published (several threads: published first, the entering states read after, then released).
      await(cp_ready, k);
      auto read_entering = [&] {
        mm.Y_carry(Q2, CpT[in].data(), b.Y.data());
        if (ridge) mm.Y_carry(b.Qr.data(), CT[in].data(), b.Y.data());
      };
      if (!pipelined) read_entering();
      advance(CpT, in, out, g2, b.dCpT);
      if (!aug) advance(Mp, in, out, g2, b.dMp);
      if (c_chained) advance(CT, in, out, g, b.dCT);
      if (pipelined) {
        cp_ready.store(k + 1, std::memory_order_release);
        read_entering();
        released[in].store(k + 1, std::memory_order_release);
      } else {
        mm.Cp_next(b.Vt2.data(), b.U.data(), CpT[out].data());
        if (!aug) add_m_prime_gain(Mp[out]);
        mm.C_next(Vt1, b.Q.data(), CT[out].data());
        cp_ready.store(k + 1, std::memory_order_release);
      }

      // The chunk's outputs, divided by their normalizer when normalized.
      if (aug) {
        for (Eigen::Index a = 0; a < L; ++a) {
          const T den = b.Y(a, dv) + eps;
          if (den == T(0)) {
            for (Eigen::Index t = zero_den.load(); c + a < t && !zero_den.compare_exchange_weak(t, c + a);) {}
            continue;
          }
          b.Y.row(a).head(dv) /= den;
        }
      }
      O.middleRows(c, L) = b.Y.topLeftCorner(L, dv);
    }
  }
  if (zero_den.load() < n) divide_by_normalizer(O.row(zero_den.load()).head(dv), T(0), zero_den.load());  // throws

  const int fin = slot(M);
  const Mat<T> Cp_final = CpT[fin].transpose();
  const Mat<T> Cp_full = aug ? Cp_final : join(Cp_final, Mp[fin]);
  if (!c_chained) {  // C = γ^n C0 + Σ_t γ^{n − e_t} (thread t's sum)
    CT[fin] = power(gamma, n) * CT[0];
    for (int t = 0; t < threads; ++t)
      if (c_end[t] > 0) CT[fin] += power(gamma, n - c_end[t]) * c_sum[t];
  }
  const Mat<T> C_carried = CT[fin].transpose();
  return {std::move(O), hla2_u_final_state<T>(p.Q, p.V, S[fin], start.C, &C_carried, Cp_full, gamma, opt.threads)};
}

}  // namespace hla::fast::chunked
