// The fused pass (forms <op>/cuda-fused*): the same chunked gated first-order pass as pass.cu's cuBLAS one, in two
// kernels that keep each chunk's intermediates (W, A, the scaled operands) on the chip:
//   chunk_deltas   one block per chunk: the chunk's own state (diag(e^{p(l_last − l_b)}) Key_k)ᵀ Val_k; pass.cu's
//                  scan_chunks carries them across chunks (the states entering each chunk, X_k)
//   chunk_outputs  one block of 4 warps per chunk: A = Qry Keyᵀ, masked and decayed in shared memory, then
//                  O = A Val + diag(e^{p l_a}) Qry X_k; warp r owns the chunk's rows 16r .. 16r + 15
// Products: WMMA tensor-core tiles for bf16 (16×16×16) and TF32 (16×16×8) operands with fp32 accumulation, plain FMA
// in the scalar for ieee (fp32, fp64). Every operand is rounded once from the scalar (Key × its decay, Qry × its decay
// and the state each once), so a term passes through the same operand roundings as in the cuBLAS pass.
// Chunks are kFusedW = 64 tokens; Kp, Vp are multiples of 16.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <cstddef>
#include <type_traits>

#include "fast/cuda/device.hpp"

namespace hla::fast::cuda {
namespace {

constexpr int kFusedW = kFusedChunk;

// The operand type of the products: bf16, or the scalar itself (TF32 rounds float operands as they are loaded).
template <class T, Products P> struct OperandOf { using type = T; };
template <> struct OperandOf<float, Products::bf16> { using type = __nv_bfloat16; };

template <class Op> __device__ Op to_operand(double x) {
  if constexpr (std::is_same_v<Op, __nv_bfloat16>)
    return __float2bfloat16(static_cast<float>(x));
  else
    return static_cast<Op>(x);
}

// C (16 × N, row-major, ldc, in the scalar Acc) (+)= A (16 × K) · B (K × N) by one warp, from shared memory.
// A is row-major (lda) or, with TA, stored transposed (K × 16, lda); B is row-major (ldb) or, with TB, stored
// transposed (N × K, ldb). N, K multiples of 16.
template <class Acc, class Op, Products P, bool TA, bool TB>
__device__ void warp_gemm(const Op* A, int lda, const Op* B, int ldb, Acc* C, int ldc, int K, int N, bool accumulate) {
  const int lane = threadIdx.x & 31;
  if constexpr (P == Products::ieee) {
    for (int e = lane; e < 16 * N; e += 32) {
      const int r = e / N, c = e % N;
      Acc s = accumulate ? C[r * ldc + c] : Acc(0);
      for (int k = 0; k < K; ++k) {
        const Acc a = static_cast<Acc>(TA ? A[k * lda + r] : A[r * lda + k]);
        const Acc b = static_cast<Acc>(TB ? B[c * ldb + k] : B[k * ldb + c]);
        s += a * b;
      }
      C[r * ldc + c] = s;
    }
    __syncwarp();
  } else {
    using namespace nvcuda;
    constexpr int KS = P == Products::bf16 ? 16 : 8;
    using In = std::conditional_t<P == Products::bf16, __nv_bfloat16, wmma::precision::tf32>;
    using LA = std::conditional_t<TA, wmma::col_major, wmma::row_major>;
    using LB = std::conditional_t<TB, wmma::col_major, wmma::row_major>;
    for (int c0 = 0; c0 < N; c0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, KS, float> acc;
      if (accumulate)
        wmma::load_matrix_sync(acc, C + c0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < K; k0 += KS) {
        wmma::fragment<wmma::matrix_a, 16, 16, KS, In, LA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, KS, In, LB> fb;
        wmma::load_matrix_sync(fa, TA ? A + k0 * lda : A + k0, lda);
        wmma::load_matrix_sync(fb, TB ? B + c0 * ldb + k0 : B + k0 * ldb + c0, ldb);
        if constexpr (P == Products::tf32) {
          for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
          for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
        }
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(C + c0, acc, ldc, wmma::mem_row_major);
    }
    __syncwarp();
  }
}

// One block of 4 warps per chunk: the chunk's own state ΔX = (diag(e^{p(l_last − l_b)}) Key)ᵀ Val (Kp × Vp) into H
// ([S·M][Kp][Vp]); scan_chunks (pass.cu) then carries them across chunks. Warp r owns ΔX's rows 16r, 16r + 64, ...
// Shared: Kx (w × Kp), V (w × Vp) operands; ΔX (Kp × Vp, Acc).
template <class T, Products P>
__global__ void chunk_deltas(const T* key, const T* val, const T* kdec, T* H, int Kp, int Vp) {
  using Op = typename OperandOf<T, P>::type;
  using Acc = std::conditional_t<P == Products::ieee, T, float>;
  extern __shared__ __align__(32) unsigned char smem[];
  const int ldk = Kp + 8, ldv = Vp + 8, ldx = Vp + 4;
  Op* Ks = reinterpret_cast<Op*>(smem);
  Op* Vs = Ks + kFusedW * ldk;
  Acc* X = reinterpret_cast<Acc*>(Vs + kFusedW * ldv + 16);  // 32-byte aligned: every tile holds 16k items
  const long chunk = blockIdx.x, row0 = chunk * kFusedW;
  const int tid = threadIdx.x, warp = tid / 32, nthreads = blockDim.x;
  for (int e = tid; e < kFusedW * Kp; e += nthreads) {
    const int a = e / Kp, j = e % Kp;
    Ks[a * ldk + j] = to_operand<Op>(static_cast<double>(key[(row0 + a) * Kp + j] * kdec[row0 + a]));
  }
  for (int e = tid; e < kFusedW * Vp; e += nthreads) {
    const int a = e / Vp, c = e % Vp;
    Vs[a * ldv + c] = to_operand<Op>(static_cast<double>(val[(row0 + a) * Vp + c]));
  }
  __syncthreads();
  for (int r0 = warp * 16; r0 < Kp; r0 += 64) {  // ΔX rows r0 .. r0 + 15 = (Kx columns r0 ..)ᵀ V
    warp_gemm<Acc, Op, P, true, false>(Ks + r0, ldk, Vs, ldv, X + r0 * ldx, ldx, kFusedW, Vp, false);
    for (int e = tid % 32; e < 16 * Vp; e += 32) {
      const int r = r0 + e / Vp, c = e % Vp;
      H[chunk * Kp * Vp + static_cast<long>(r) * Vp + c] = static_cast<T>(X[r * ldx + c]);
    }
  }
}

template <class T, Products P> std::size_t chunk_deltas_smem(int Kp, int Vp) {
  using Op = typename OperandOf<T, P>::type;
  using Acc = std::conditional_t<P == Products::ieee, T, float>;
  return (static_cast<std::size_t>(kFusedW) * (Kp + 8 + Vp + 8) + 16) * sizeof(Op) +
         static_cast<std::size_t>(Kp) * (Vp + 4) * sizeof(Acc) + 32;
}

// One block of 4 warps per chunk (blockIdx.x over every chunk of every sequence): the chunk's outputs.
// Shared: Q, K (w × Kp), A (w × w, Acc), Ao (w × w), V (w × Vp), X (Kp × Vp) operands; O (w × Vp, Acc).
template <class T, Products P> __global__ void chunk_outputs(const T* qry, const T* key, const T* val, const T* H,
                                                             const double* lcum, const T* qdec, int p, T* out, int Kp,
                                                             int Vp) {
  using Op = typename OperandOf<T, P>::type;
  using Acc = std::conditional_t<P == Products::ieee, T, float>;
  extern __shared__ __align__(32) unsigned char smem[];
  const int ldk = Kp + 8, lda = kFusedW + 8, ldv = Vp + 8, ldo = Vp + 4, ldw = kFusedW + 4;
  Op* Qs = reinterpret_cast<Op*>(smem);
  Op* Ks = Qs + kFusedW * ldk;
  Op* Ao = Ks + kFusedW * ldk;
  Op* Vs = Ao + kFusedW * lda;
  Op* Xs = Vs + kFusedW * ldv;
  Acc* A = reinterpret_cast<Acc*>(Xs + Kp * ldv + 16);
  Acc* O = A + kFusedW * ldw;
  const long chunk = blockIdx.x, row0 = chunk * kFusedW;
  const int tid = threadIdx.x, warp = tid / 32, nthreads = blockDim.x;
  for (int e = tid; e < kFusedW * Kp; e += nthreads) {
    const int a = e / Kp, j = e % Kp;
    Qs[a * ldk + j] = to_operand<Op>(static_cast<double>(qry[(row0 + a) * Kp + j]));
    Ks[a * ldk + j] = to_operand<Op>(static_cast<double>(key[(row0 + a) * Kp + j]));
  }
  for (int e = tid; e < kFusedW * Vp; e += nthreads) {
    const int a = e / Vp, c = e % Vp;
    Vs[a * ldv + c] = to_operand<Op>(static_cast<double>(val[(row0 + a) * Vp + c]));
  }
  for (int e = tid; e < Kp * Vp; e += nthreads) {
    const int r = e / Vp, c = e % Vp;
    Xs[r * ldv + c] = to_operand<Op>(static_cast<double>(H[chunk * Kp * Vp + static_cast<long>(r) * Vp + c]));
  }
  __syncthreads();
  // A = Q Kᵀ for this warp's rows, then masked and decayed: [b ≤ a] e^{p(l_a − l_b)}.
  const int r0 = warp * 16;
  warp_gemm<Acc, Op, P, false, true>(Qs + r0 * ldk, ldk, Ks, ldk, A + r0 * ldw, ldw, Kp, kFusedW, false);
  const double* l = lcum + row0;
  for (int e = tid % 32; e < 16 * kFusedW; e += 32) {
    const int a = r0 + e / kFusedW, b = e % kFusedW;
    const T factor = static_cast<T>(exp(p * (l[a] - l[b])));  // rounded once, as pass.cu's decay_mask
    Ao[a * lda + b] = to_operand<Op>(b <= a ? static_cast<double>(static_cast<Acc>(A[a * ldw + b] * factor)) : 0.0);
  }
  // the carry's queries, each scaled by its decay from the chunk's start, rounded once (over this warp's rows of Q)
  for (int e = tid % 32; e < 16 * Kp; e += 32) {
    const int a = r0 + e / Kp, j = e % Kp;
    Qs[a * ldk + j] = to_operand<Op>(static_cast<double>(qry[(row0 + a) * Kp + j] * qdec[row0 + a]));
  }
  __syncwarp();
  warp_gemm<Acc, Op, P, false, false>(Ao + r0 * lda, lda, Vs, ldv, O + r0 * ldo, ldo, kFusedW, Vp, false);
  warp_gemm<Acc, Op, P, false, false>(Qs + r0 * ldk, ldk, Xs, ldv, O + r0 * ldo, ldo, Kp, Vp, true);
  for (int e = tid % 32; e < 16 * Vp; e += 32) {
    const int a = r0 + e / Vp, c = e % Vp;
    out[(row0 + a) * Vp + c] = static_cast<T>(O[a * ldo + c]);
  }
}

template <class T, Products P> std::size_t chunk_outputs_smem(int Kp, int Vp) {
  using Op = typename OperandOf<T, P>::type;
  using Acc = std::conditional_t<P == Products::ieee, T, float>;
  const std::size_t ops = 2 * kFusedW * (Kp + 8) + kFusedW * (kFusedW + 8) + (kFusedW + Kp) * (Vp + 8) + 16;
  return ops * sizeof(Op) + (static_cast<std::size_t>(kFusedW) * (kFusedW + 4) + kFusedW * (Vp + 4)) * sizeof(Acc) + 32;
}

}  // namespace
}  // namespace hla::fast::cuda
