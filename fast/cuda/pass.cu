// The GPU forms (fast/cuda/device.hpp): every operator composed of chunked gated first-order passes, each pass's
// matrix products batched over all chunks of all sequences with cuBLAS (the first step the GPU issue allows; a fused
// kernel is the next), the rest in small kernels of our own.
//
// One pass over chunks of w tokens (local positions a, b < w; l_a the within-chunk cumulative log-gate, computed in
// double from the chunk's first token; Γ(c+a, c+b) = e^{l_a − l_b}, Γ(c+a, c−1) = e^{l_a}, ρ = e^{l_{w−1}}):
//   W  = Qry Keyᵀ                                    (w × w per chunk, batched)
//   A  = W ⊙ [b ≤ a] e^{p(l_a − l_b)}                 (decay_mask)
//   O  = A Val                                        intra-chunk outputs
//   ΔX = (diag(e^{p(l_{w−1} − l_b)}) Key)ᵀ Val        the chunk's own state contribution
//   X_k entering chunk k: X_0 = X_in, X_{k+1} = ρ_k^p X_k + ΔX_k   (scan_chunks, one thread per state entry)
//   O += diag(e^{p l_a}) Qry X_k                      the carry
// Sequences are padded to a whole number of chunks with zero rows (which add nothing to any sum and whose outputs
// are dropped) and gates 1; feature columns to multiples of 8 with zeros (tensor-core operands want 16 bytes).
// Gate factors are computed once in double and rounded once to the scalar: each is within one rounding of exact.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "fast/cuda/fused.cuh"
#include "fast/cuda/library.hpp"

namespace hla::fast::cuda {
namespace {

using bf16 = __nv_bfloat16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS ") + what + ": " + cublasGetStatusString(s));
}

// What the forms allocated on the device since the last reset (Timing::device_bytes).
std::size_t g_allocated = 0;

template <class T> class Dev {
 public:
  Dev() = default;
  explicit Dev(std::size_t n) : n_(n) {
    if (n == 0) return;
    check(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)), "cudaMalloc");
    g_allocated += n * sizeof(T);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Dev& operator=(Dev&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~Dev() {
    if (p_) cudaFree(p_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// One cuBLAS handle and stream for the process; the GPU forms run one at a time (a mutex), as the device would.
struct Context {
  cublasHandle_t blas{};
  cudaStream_t stream{};
  std::mutex lock;
  Context() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    check(cublasCreate(&blas), "create");
    check(cublasSetStream(blas, stream), "set stream");
  }
};
// Never destroyed: a CUDA call from a static destructor runs after the driver has shut down.
Context& context() {
  static Context* c = new Context();
  return *c;
}

constexpr int kThreads = 256;
long blocks_for(long n) { return (n + kThreads - 1) / kThreads; }
// Feature widths are padded to multiples of 16 with zeros: tensor-core tiles (the fused kernels' 16 × 16) and cuBLAS's
// fast paths want them.
int round16(int x) { return (x + 15) / 16 * 16; }

// ---- kernels --------------------------------------------------------------------------------------------------

// One thread per chunk: l_a (double) for its tokens, and for p = 1, 2 the factors to the chunk's start (e^{p l_a}), to
// its end (e^{p(l_last − l_a)}) and across it (ρ^p). Padded tokens have gate 1.
template <class T> __global__ void gate_factors(const double* gates, double log_gamma, int seqs, int T_len, int w,
                                                int M, double* lcum, T* qdec, T* kdec, T* rho) {
  const long c = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  const long chunks = static_cast<long>(seqs) * M;
  if (c >= chunks) return;
  const long s = c / M, k = c % M, base = c * w, tokens = chunks * w;
  double l = 0;
  for (int a = 0; a < w; ++a) {
    const long t = k * w + a;
    l += t < T_len ? (gates ? log(gates[s * T_len + t]) : log_gamma) : 0.0;
    lcum[base + a] = l;
  }
  for (int p = 1; p <= 2; ++p) {
    for (int a = 0; a < w; ++a) {
      qdec[(p - 1) * tokens + base + a] = static_cast<T>(exp(p * lcum[base + a]));
      kdec[(p - 1) * tokens + base + a] = static_cast<T>(exp(p * (l - lcum[base + a])));
    }
    rho[(p - 1) * chunks + c] = static_cast<T>(exp(p * l));
  }
}

// A = W ⊙ [b ≤ a] e^{p(l_a − l_b)}, in place; a bf16 copy when asked.
template <class T> __global__ void decay_mask(T* W, const double* lcum, int w, long n, int p, bf16* W16) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long c = i / (static_cast<long>(w) * w);
  const int a = static_cast<int>((i / w) % w), b = static_cast<int>(i % w);
  T x = 0;
  if (b <= a) x = W[i] * static_cast<T>(exp(p * (lcum[c * w + a] - lcum[c * w + b])));
  W[i] = x;
  if (W16) W16[i] = __float2bfloat16(static_cast<float>(x));
}

// Y = diag(f) X over rows of `ld` entries; a bf16 copy when asked.
template <class T> __global__ void scale_rows(const T* X, const T* f, T* Y, long n, int ld, bf16* Y16) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const T y = X[i] * f[i / ld];
  Y[i] = y;
  if (Y16) Y16[i] = __float2bfloat16(static_cast<float>(y));
}

template <class T> __global__ void to_bf16(const T* X, bf16* Y, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) Y[i] = __float2bfloat16(static_cast<float>(X[i]));
}

// The carry across chunks, one thread per state entry: H[k] ← the state entering chunk k (it held ΔX_k).
template <class T> __global__ void scan_chunks(T* H, const T* rho, const T* x_in, T* x_out, int M, long KV) {
  const long e = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  const long s = blockIdx.y;
  if (e >= KV) return;
  T run = x_in ? x_in[s * KV + e] : T(0);
  for (int k = 0; k < M; ++k) {
    T* h = H + (s * M + k) * KV + e;
    const T delta = *h;
    *h = run;
    run = rho[s * M + k] * run + delta;
  }
  if (x_out) x_out[s * KV + e] = run;
}

// [seqs][T][c] → [seqs][Tp][ld], zeros around, and a ones column at c when asked.
template <class T> __global__ void pad_rows(const T* X, T* Y, int T_len, int Tp, int c, int ld, bool ones, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long j = i % ld, row = i / ld, t = row % Tp, s = row / Tp;
  T x = 0;
  if (t < T_len) {
    if (j < c)
      x = X[(s * T_len + t) * c + j];
    else if (ones && j == c)
      x = 1;
  }
  Y[i] = x;
}

// o = num (+ λ r) on the value columns, divided by the ones column's (+ λ r's) + ε when normalized; a normalizer that
// is exactly 0 raises the flag (the host throws, as every form does).
template <class T> __global__ void finish(const T* num, const T* ridge, T lambda, int T_len, int Tp, int Vp, int dv,
                                          bool normalized, T eps, T* out, int* zero_den, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long c = i % dv, row = i / dv, t = row % T_len, s = row / T_len;
  const long at = (s * Tp + t) * Vp;
  T x = num[at + c];
  if (ridge) x += lambda * ridge[at + c];
  if (normalized) {
    T den = num[at + dv];
    if (ridge) den += lambda * ridge[at + dv];
    den += eps;
    if (den == T(0)) atomicExch(zero_den, 1);
    x /= den;
  }
  out[i] = x;
}

// Deterministic inputs made on the device for timing: a hash of (seed, index) to a uniform in [lo, hi).
template <class T> __global__ void fill_uniform(T* X, long n, std::uint64_t seed, double lo, double hi) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  X[i] = static_cast<T>(lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53);
}

// ---- matrix products ------------------------------------------------------------------------------------------

// Row-major C (m × n, ldc) = op(A) op(B) + beta C for `batch` matrices strided by sA, sB, sC. op(A) is m × k: A is
// stored m × k (lda) or, transposed, k × m. cuBLAS is column-major: it computes Cᵀ = op(B)ᵀ op(A)ᵀ on the same memory.
template <class T> void gemm(Products prec, bool ta, bool tb, int m, int n, int k, const void* A, long lda, long sA,
                             const void* B, long ldb, long sB, T* C, long ldc, long sC, long batch, T beta) {
  Context& ctx = context();
  const bool narrow = prec == Products::bf16;
  cudaDataType_t tin, tout;
  cublasComputeType_t compute;
  if constexpr (std::is_same_v<T, double>) {
    tin = tout = CUDA_R_64F;
    compute = CUBLAS_COMPUTE_64F_PEDANTIC;
  } else {
    tout = CUDA_R_32F;
    tin = narrow ? CUDA_R_16BF : CUDA_R_32F;
    compute = prec == Products::tf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
              : prec == Products::bf16 ? CUBLAS_COMPUTE_32F
                                       : CUBLAS_COMPUTE_32F_PEDANTIC;
  }
  const std::size_t esize = narrow ? sizeof(bf16) : sizeof(T);
  const T alpha = 1;
  // cuBLAS takes batches up to 65535 in one launch grid dimension on older versions: pieces of at most that.
  constexpr long kMaxBatch = 65535;
  for (long b0 = 0; b0 < batch; b0 += kMaxBatch) {
    const long cnt = std::min(kMaxBatch, batch - b0);
    check(cublasGemmStridedBatchedEx(ctx.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                     &alpha, static_cast<const char*>(B) + b0 * sB * esize, tin, static_cast<int>(ldb),
                                     sB, static_cast<const char*>(A) + b0 * sA * esize, tin, static_cast<int>(lda), sA,
                                     &beta, C + b0 * sC, tout, static_cast<int>(ldc), sC, static_cast<int>(cnt),
                                     compute, CUBLAS_GEMM_DEFAULT),
          "gemm");
  }
}

// ---- one pass -------------------------------------------------------------------------------------------------

struct Geometry {
  int seqs, T_len, w, M, Tp, Kp;  // M chunks, Tp = M w padded tokens per sequence; Kp padded key width
  long chunks() const { return static_cast<long>(seqs) * M; }
  long tokens() const { return static_cast<long>(seqs) * Tp; }
};
Geometry geometry(int seqs, int T_len, int w, int d) {
  const int M = (T_len + w - 1) / w;
  return {seqs, T_len, w, M, M * w, round16(d)};
}

// Workspace shared by the passes of one call, sized for the widest value width Vmax.
template <class T> struct Work {
  Dev<double> lcum;
  Dev<T> qdec, kdec, rho, W, Kx, Qs, H;
  Dev<bf16> q16, k16, v16, a16, kx16, qs16, h16;
  // The fused pass keeps W, the scaled operands and their bf16 copies on the chip: only the gate factors and H here.
  Work(const Geometry& g, int Vmax, bool narrow, bool fused)
      : lcum(g.tokens()),
        qdec(2 * g.tokens()),
        kdec(2 * g.tokens()),
        rho(2 * g.chunks()),
        H(g.chunks() * g.Kp * static_cast<long>(Vmax)) {
    if (fused) return;
    W = Dev<T>(g.chunks() * g.w * g.w);
    Kx = Dev<T>(g.tokens() * g.Kp);
    Qs = Dev<T>(g.tokens() * g.Kp);
    if (!narrow) return;
    const long kv = g.tokens() * std::max(g.Kp, Vmax);
    q16 = Dev<bf16>(kv);
    k16 = Dev<bf16>(kv);
    v16 = Dev<bf16>(kv);
    a16 = Dev<bf16>(W.size());
    kx16 = Dev<bf16>(Kx.size());
    qs16 = Dev<bf16>(Qs.size());
    h16 = Dev<bf16>(H.size());
  }
};

template <class T> const void* as_operand(const T* x, long n, bf16* shadow, bool narrow, cudaStream_t st) {
  if (!narrow) return x;
  to_bf16<T><<<blocks_for(n), kThreads, 0, st>>>(x, shadow, n);
  return shadow;
}

// out (Tp × Vp per sequence, or null: the state alone) and x_out (Kp × Vp per sequence, or null) of the pass above
// with power p, from x_in (null: zero). qry, key: Tp × Kp; val: Tp × Vp.
template <class T> void cublas_pass(const Geometry& g, Products prec, int p, const T* qry, const T* key, const T* val,
                                    int Vp, const T* x_in, T* out, T* x_out, Work<T>& ws) {
  cudaStream_t st = context().stream;
  const bool narrow = prec == Products::bf16 && std::is_same_v<T, float>;
  const long chunks = g.chunks(), w = g.w, Kp = g.Kp;
  const long sQ = w * Kp, sV = w * Vp, sW = w * w, sH = Kp * Vp;
  const long nQ = g.tokens() * Kp, nV = g.tokens() * Vp;
  const T* qd = ws.qdec.get() + (p - 1) * g.tokens();
  const T* kd = ws.kdec.get() + (p - 1) * g.tokens();
  const T* rh = ws.rho.get() + (p - 1) * chunks;
  const void* V_op = as_operand(val, nV, ws.v16.get(), narrow, st);
  if (out) {
    const void* Q_op = as_operand(qry, nQ, ws.q16.get(), narrow, st);
    const void* K_op = as_operand(key, nQ, ws.k16.get(), narrow, st);
    gemm<T>(prec, false, true, g.w, g.w, g.Kp, Q_op, Kp, sQ, K_op, Kp, sQ, ws.W.get(), w, sW, chunks, T(0));
    decay_mask<T><<<blocks_for(chunks * sW), kThreads, 0, st>>>(ws.W.get(), ws.lcum.get(), g.w, chunks * sW, p,
                                                                narrow ? ws.a16.get() : nullptr);
    const void* A_op = narrow ? static_cast<const void*>(ws.a16.get()) : ws.W.get();
    gemm<T>(prec, false, false, g.w, Vp, g.w, A_op, w, sW, V_op, Vp, sV, out, Vp, sV, chunks, T(0));
  }
  scale_rows<T><<<blocks_for(nQ), kThreads, 0, st>>>(key, kd, ws.Kx.get(), nQ, g.Kp, narrow ? ws.kx16.get() : nullptr);
  const void* Kx_op = narrow ? static_cast<const void*>(ws.kx16.get()) : ws.Kx.get();
  gemm<T>(prec, true, false, g.Kp, Vp, g.w, Kx_op, Kp, sQ, V_op, Vp, sV, ws.H.get(), Vp, sH, chunks, T(0));
  scan_chunks<T><<<dim3(static_cast<unsigned>(blocks_for(sH)), static_cast<unsigned>(g.seqs)), kThreads, 0, st>>>(
      ws.H.get(), rh, x_in, x_out, g.M, sH);
  if (out) {
    scale_rows<T>
        <<<blocks_for(nQ), kThreads, 0, st>>>(qry, qd, ws.Qs.get(), nQ, g.Kp, narrow ? ws.qs16.get() : nullptr);
    const void* Qs_op = narrow ? static_cast<const void*>(ws.qs16.get()) : ws.Qs.get();
    const void* H_op = as_operand(ws.H.get(), chunks * sH, ws.h16.get(), narrow, st);
    gemm<T>(prec, false, false, g.w, Vp, g.Kp, Qs_op, Kp, sQ, H_op, Vp, sH, out, Vp, sV, chunks, T(1));
  }
  check(cudaGetLastError(), "pass kernels");
}

// The same pass with the fused kernels (fused.cuh): each chunk's own state, the scan across chunks, each chunk's
// outputs. Chunks of kFusedChunk tokens.
template <class T, Products P, class K> void allow_smem(K kernel, std::size_t bytes) {
  int dev = 0, limit = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "shared memory limit");
  if (bytes > static_cast<std::size_t>(limit))
    throw std::invalid_argument("GPU fused forms: d or dv too large for one block's shared memory (" +
                                std::to_string(bytes) + " bytes, the card allows " + std::to_string(limit) + ")");
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), "smem");
}

template <class T, Products P> void fused_pass_in(const Geometry& g, int p, const T* qry, const T* key, const T* val,
                                                  int Vp, const T* x_in, T* out, T* x_out, Work<T>& ws) {
  cudaStream_t st = context().stream;
  const long chunks = g.chunks();
  const T* qd = ws.qdec.get() + (p - 1) * g.tokens();
  const T* kd = ws.kdec.get() + (p - 1) * g.tokens();
  const T* rh = ws.rho.get() + (p - 1) * chunks;
  const std::size_t sd = chunk_deltas_smem<T, P>(g.Kp, Vp);
  allow_smem<T, P>(chunk_deltas<T, P>, sd);
  chunk_deltas<T, P><<<static_cast<unsigned>(chunks), 128, sd, st>>>(key, val, kd, ws.H.get(), g.Kp, Vp);
  const long sH = static_cast<long>(g.Kp) * Vp;
  scan_chunks<T><<<dim3(static_cast<unsigned>(blocks_for(sH)), static_cast<unsigned>(g.seqs)), kThreads, 0, st>>>(
      ws.H.get(), rh, x_in, x_out, g.M, sH);
  if (out) {
    const std::size_t so = chunk_outputs_smem<T, P>(g.Kp, Vp);
    allow_smem<T, P>(chunk_outputs<T, P>, so);
    chunk_outputs<T, P><<<static_cast<unsigned>(chunks), 128, so, st>>>(qry, key, val, ws.H.get(), ws.lcum.get(), qd, p,
                                                                        out, g.Kp, Vp);
  }
  check(cudaGetLastError(), "fused pass kernels");
}

template <class T> void fused_pass(const Geometry& g, Products prec, int p, const T* qry, const T* key, const T* val,
                                   int Vp, const T* x_in, T* out, T* x_out, Work<T>& ws) {
  if constexpr (std::is_same_v<T, double>) {
    fused_pass_in<T, Products::ieee>(g, p, qry, key, val, Vp, x_in, out, x_out, ws);
  } else {
    switch (prec) {
      case Products::ieee:
        return fused_pass_in<T, Products::ieee>(g, p, qry, key, val, Vp, x_in, out, x_out, ws);
      case Products::tf32:
        return fused_pass_in<T, Products::tf32>(g, p, qry, key, val, Vp, x_in, out, x_out, ws);
      case Products::bf16:
        return fused_pass_in<T, Products::bf16>(g, p, qry, key, val, Vp, x_in, out, x_out, ws);
    }
  }
}

// The pass in the form's own products: the fused kernels or the cuBLAS ones.
template <class T> void any_pass(const ForwardOptions& o, const Geometry& g, int p, const T* qry, const T* key,
                                 const T* val, int Vp, const T* x_in, T* out, T* x_out, Work<T>& ws) {
  if (o.fused)
    fused_pass<T>(g, o.products, p, qry, key, val, Vp, x_in, out, x_out, ws);
  else
    cublas_pass<T>(g, o.products, p, qry, key, val, Vp, x_in, out, x_out, ws);
}

// ---- one forward call: device inputs, the passes of the operator, the outputs ------------------------------------

template <class T> struct Forward {
  GpuOp op;
  ForwardOptions o;
  int d, dv, Vp;
  Geometry g;
  Dev<T> Q, K, Va, U, Num, R, O;
  Dev<double> gates;
  double log_gamma = 0;
  Dev<T> x_in[3], x_out[3];
  Dev<int> flag;
  Work<T> ws;

  Forward(GpuOp op_, int seqs, int T_len, int d_, int dv_, const ForwardOptions& o_, bool gated)
      : op(op_),
        o(o_),
        d(d_),
        dv(dv_),
        Vp(round16(dv_ + 1)),
        g(geometry(seqs, T_len, o_.chunk, d_)),
        ws(g, std::max(round16(d_ + 1), round16(dv_ + 1)), o_.products == Products::bf16 && std::is_same_v<T, float>,
           o_.fused) {
    const long tok = g.tokens();
    Q = Dev<T>(tok * g.Kp);
    K = Dev<T>(tok * g.Kp);
    Va = Dev<T>(tok * Vp);
    if (op != GpuOp::linear) U = Dev<T>(tok * std::max(g.Kp, Vp));
    Num = Dev<T>(tok * Vp);
    if (op == GpuOp::hla2 && o.ridge != 0) R = Dev<T>(tok * Vp);
    O = Dev<T>(static_cast<long>(seqs) * T_len * dv);
    if (gated) gates = Dev<double>(static_cast<long>(seqs) * T_len);
    flag = Dev<int>(1);
    const auto shapes = pass_state_shapes(op, d, dv);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      x_in[i] = Dev<T>(static_cast<long>(seqs) * g.Kp * width(i));
      x_out[i] = Dev<T>(static_cast<long>(seqs) * g.Kp * width(i));
    }
  }
  // The padded width of pass state i: hla2's S is Kp × Kp, every other Kp × Vp.
  int width(std::size_t i) const { return op == GpuOp::hla2 && i == 0 ? g.Kp : Vp; }

  // Inputs already on the device in [seqs][T][·] layout (or host pointers: `upload`).
  void load(const T* q, const T* k, const T* v, bool from_host) {
    cudaStream_t st = context().stream;
    const long n_qk = static_cast<long>(g.seqs) * g.T_len * d, n_v = static_cast<long>(g.seqs) * g.T_len * dv;
    auto place = [&](const T* src, long n, int c, Dev<T>& dst, int ld, bool ones) {
      Dev<T> staging;
      const T* from = src;
      if (from_host) {
        staging = Dev<T>(n);
        check(cudaMemcpyAsync(staging.get(), src, n * sizeof(T), cudaMemcpyHostToDevice, st), "upload");
        from = staging.get();
      }
      pad_rows<T><<<blocks_for(g.tokens() * ld), kThreads, 0, st>>>(from, dst.get(), g.T_len, g.Tp, c, ld, ones,
                                                                    g.tokens() * ld);
      check(cudaStreamSynchronize(st), "pad inputs");
    };
    place(q, n_qk, d, Q, g.Kp, false);
    place(k, n_qk, d, K, g.Kp, false);
    place(v, n_v, dv, Va, Vp, true);
  }

  // A host batch: its inputs, and its gates or its fixed γ.
  void upload(const Batch<T>& in) {
    load(in.q, in.k, in.v, true);
    if (in.gates)
      check(cudaMemcpyAsync(gates.get(), in.gates, gates.size() * sizeof(double), cudaMemcpyHostToDevice,
                            context().stream),
            "gates");
    else
      log_gamma = std::log(in.gamma);
  }

  void run(const T* state_in_device[3], bool have_state_in) {
    cudaStream_t st = context().stream;
    const long chunks = g.chunks();
    gate_factors<T><<<blocks_for(chunks), kThreads, 0, st>>>(gates.size() ? gates.get() : nullptr, log_gamma, g.seqs,
                                                             g.T_len, g.w, g.M, ws.lcum.get(), ws.qdec.get(),
                                                             ws.kdec.get(), ws.rho.get());
    auto xin = [&](int i) -> const T* { return have_state_in ? state_in_device[i] : nullptr; };
    auto pass = [&](int p, const T* qry, const T* key, const T* val, int vp, const T* x_in, T* out, T* x_out) {
      any_pass<T>(o, g, p, qry, key, val, vp, x_in, out, x_out, ws);
    };
    auto xout = [&](int i) -> T* { return o.state ? x_out[i].get() : nullptr; };
    switch (op) {
      case GpuOp::linear:
        pass(1, Q.get(), K.get(), Va.get(), Vp, xin(0), Num.get(), xout(0));
        break;
      case GpuOp::hla2:
        pass(1, Q.get(), K.get(), K.get(), g.Kp, xin(0), U.get(), xout(0));
        pass(2, Q.get(), U.get(), Va.get(), Vp, xin(1), Num.get(), xout(1));
        if (o.ridge != 0 || o.state)
          pass(1, Q.get(), Q.get(), Va.get(), Vp, xin(2), o.ridge != 0 ? R.get() : nullptr, xout(2));
        break;
      case GpuOp::ahla:
        pass(1, Q.get(), K.get(), Va.get(), Vp, xin(0), U.get(), xout(0));
        pass(1, Q.get(), K.get(), U.get(), Vp, xin(1), Num.get(), xout(1));
        break;
    }
    check(cudaMemsetAsync(flag.get(), 0, sizeof(int), st), "flag");
    const long n = static_cast<long>(g.seqs) * g.T_len * dv;
    finish<T><<<blocks_for(n), kThreads, 0, st>>>(Num.get(), R.size() ? R.get() : nullptr, static_cast<T>(o.ridge),
                                                  g.T_len, g.Tp, Vp, dv, o.normalized, static_cast<T>(o.eps), O.get(),
                                                  flag.get(), n);
    check(cudaGetLastError(), "finish");
  }

  bool normalizer_vanished() {
    int h = 0;
    check(cudaMemcpyAsync(&h, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, context().stream), "flag");
    check(cudaStreamSynchronize(context().stream), "forward");
    return h != 0;
  }
};

// ---- backward: every operator's gradients from the same pass, run forward and backward in time ---------------------
//
// One pass out_t = Σ_{j≤t} Γ(t,j)^p (a_t·b_j) c_j (from the zero state), loss L = Σ_t ⟨g_t, out_t⟩ for an upstream g:
//   ∂L/∂a_t = Σ_{j≤t} Γ(t,j)^p (g_t·c_j) b_j     the pass (qry g, key c, val b), forward in time
//   ∂L/∂b_j = Σ_{t≥j} Γ(t,j)^p (c_j·g_t) a_t     the pass (qry c, key g, val a), backward in time
//   ∂L/∂c_j = Σ_{t≥j} Γ(t,j)^p (b_j·a_t) g_t     the pass (qry b, key a, val g), backward in time
// and, with L_t = Σ_{r≤t} log γ_r (Γ(t,j) = e^{L_t − L_j}), ∂L/∂L_t = p (g_t·out_t − b_t·∂L/∂b_t): the pair (t, j)
// reaches L_t as its later index and L_j as its earlier one. Then ∂L/∂γ_r = (Σ_{t≥r} ∂L/∂L_t) / γ_r.
// A pass backward in time is the same pass on the sequence reversed: reversed token r' = Tp − 1 − r has the gate
// γ'_{r'} = γ_{r+1} (the product Γ(t, j) runs over (j, t], which reversal turns into [j, t)), and γ'_0 = 1.
// The operators chain passes (device.hpp), so their gradients chain these, last pass first:
//   linear  (1; q, k, [v 1])                    hla2  (2; q, u, [v 1]) then (1; q, k, k) with ∂L/∂u as upstream,
//   ahla    (1; q, k, r) then (1; q, k, [v 1])        ridge (1; q, q, [v 1]) with λ g
// and normalized outputs o = N/(D + ε) are the unnormalized operator on [v 1] read with the upstream
// (dO/(D + ε), −⟨dO, o⟩/(D + ε)).

// Y[s][r][·] = X[s][Tp − 1 − r][·]: each sequence's padded rows in reverse order.
template <class T> __global__ void reverse_rows(const T* X, T* Y, int Tp, int ld, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long j = i % ld, row = i / ld, r = row % Tp, s = row / Tp;
  Y[i] = X[(s * Tp + (Tp - 1 - r)) * ld + j];
}

// The gates of the reversed sequences (above): γ'_r = γ_{Tp − r}, 1 at r = 0 and past the last real token.
__global__ void reversed_gates(const double* gates, double gamma, int T_len, int Tp, double* out, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long r = i % Tp, s = i / Tp, t = Tp - r;
  out[i] = (r == 0 || t >= T_len) ? 1.0 : gates ? gates[s * T_len + t] : gamma;
}

template <class T> __global__ void add_to(T* acc, const T* x, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

template <class T> __global__ void scale_by(T* x, T s, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

// dL[row] += p (g_row·out_row − b_row·db_row), per padded token, in double.
template <class T> __global__ void gate_terms(double* dL, int p, const T* g, const T* out, int ld_v, const T* b,
                                              const T* db, int ld_k, long rows) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  double x = 0;
  for (int j = 0; j < ld_v; ++j) x += static_cast<double>(g[i * ld_v + j]) * static_cast<double>(out[i * ld_v + j]);
  for (int j = 0; j < ld_k; ++j) x -= static_cast<double>(b[i * ld_k + j]) * static_cast<double>(db[i * ld_k + j]);
  dL[i] += p * x;
}

// The upstream of the passes' [values, ones] columns from dO (n × dv per sequence): (dO, 0), or normalized
// (dO/(D + ε), −⟨dO, o⟩/(D + ε)) with N, D the numerator and ones columns of num + λ ridge.
template <class T> __global__ void upstream(const T* dO, const T* num, const T* ridge, T lambda, int T_len, int Tp,
                                            int Vp, int dv, bool normalized, T eps, T* G, long rows) {
  const long row = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  const long t = row % Tp, s = row / Tp;
  T* g = G + row * Vp;
  for (int j = 0; j < Vp; ++j) g[j] = 0;
  if (t >= T_len) return;
  const T* d = dO + (s * T_len + t) * dv;
  auto N = [&](int j) { return num[row * Vp + j] + (ridge ? lambda * ridge[row * Vp + j] : T(0)); };
  if (!normalized) {
    for (int j = 0; j < dv; ++j) g[j] = d[j];
    return;
  }
  const T den = N(dv) + eps;
  T dot = 0;
  for (int j = 0; j < dv; ++j) {
    g[j] = d[j] / den;
    dot += d[j] * (N(j) / den);
  }
  g[dv] = -dot / den;
}

// ∂L/∂γ from ∂L/∂L (per padded token): suffix sums within each chunk (one thread per chunk, in place), the chunks'
// totals as exclusive suffix sums per sequence, then each real token's sum divided by its gate.
__global__ void suffix_in_chunks(double* dL, double* total, int w, long chunks) {
  const long c = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (c >= chunks) return;
  double s = 0;
  for (int a = w - 1; a >= 0; --a) dL[c * w + a] = s += dL[c * w + a];
  total[c] = s;
}
__global__ void suffix_of_chunks(double* total, int M, int seqs) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= seqs) return;
  double run = 0;
  for (int k = M - 1; k >= 0; --k) {
    const double x = total[static_cast<long>(s) * M + k];
    total[static_cast<long>(s) * M + k] = run;
    run += x;
  }
}
template <class T> __global__ void gate_gradients(const double* dL, const double* total, const double* gates, int T_len,
                                                  int Tp, int w, int M, T* dgamma, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long t = i % T_len, s = i / T_len;
  dgamma[i] = static_cast<T>((dL[s * Tp + t] + total[s * M + t / w]) / gates[i]);
}

// [seqs][Tp][ld] → [seqs][T][c], the first c columns of the real tokens.
template <class T> __global__ void unpad_rows(const T* X, T* Y, int T_len, int Tp, int c, int ld, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long j = i % c, row = i / c, t = row % T_len, s = row / T_len;
  Y[i] = X[(s * Tp + t) * ld + j];
}

template <class T> struct Backward {
  Forward<T>& f;
  Geometry g;      // f's, with the widest operand width as Kp (the workspaces')
  int Kp, Vp;      // the forward's key and value widths
  Work<T> wf, wr;  // forward in time and backward in time (the reversed gates' factors)
  Dev<double> rgates, dL, total;
  Dev<T> G, dQ, dK, dVa, dU, t1, t2, ar, br, cr, gr, o1, o2;

  explicit Backward(Forward<T>& fw)
      : f(fw),
        g(wider(fw.g, std::max(fw.g.Kp, fw.Vp))),
        Kp(fw.g.Kp),
        Vp(fw.Vp),
        wf(g, g.Kp, fw.o.products == Products::bf16 && std::is_same_v<T, float>, fw.o.fused),
        wr(g, g.Kp, fw.o.products == Products::bf16 && std::is_same_v<T, float>, fw.o.fused) {
    const long tok = g.tokens(), wide = tok * g.Kp;
    rgates = Dev<double>(tok);
    dL = Dev<double>(tok);
    total = Dev<double>(g.chunks());
    G = Dev<T>(tok * Vp);
    dQ = Dev<T>(tok * Kp);
    dK = Dev<T>(tok * Kp);
    dVa = Dev<T>(tok * Vp);
    dU = Dev<T>(wide);
    for (Dev<T>* b : {&t1, &t2, &ar, &br, &cr, &gr, &o1, &o2}) *b = Dev<T>(wide);
  }
  static Geometry wider(Geometry x, int width) {
    x.Kp = width;
    return x;
  }

  // The gate factors of both directions.
  void gate_factors_both() {
    cudaStream_t st = context().stream;
    const double* gates = f.gates.size() ? f.gates.get() : nullptr;
    gate_factors<T><<<blocks_for(g.chunks()), kThreads, 0, st>>>(
        gates, f.log_gamma, g.seqs, g.T_len, g.w, g.M, wf.lcum.get(), wf.qdec.get(), wf.kdec.get(), wf.rho.get());
    reversed_gates<<<blocks_for(g.tokens()), kThreads, 0, st>>>(gates, std::exp(f.log_gamma), g.T_len, g.Tp,
                                                                rgates.get(), g.tokens());
    gate_factors<T><<<blocks_for(g.chunks()), kThreads, 0, st>>>(
        rgates.get(), 0.0, g.seqs, g.Tp, g.w, g.M, wr.lcum.get(), wr.qdec.get(), wr.kdec.get(), wr.rho.get());
    check(cudaGetLastError(), "backward gate factors");
  }

  void reverse(const T* x, T* y, int ld) {
    reverse_rows<T><<<blocks_for(g.tokens() * ld), kThreads, 0, context().stream>>>(x, y, g.Tp, ld, g.tokens() * ld);
  }
  void accumulate(T* acc, const T* x, int ld) {
    add_to<T><<<blocks_for(g.tokens() * ld), kThreads, 0, context().stream>>>(acc, x, g.tokens() * ld);
  }
  void pass(Work<T>& ws, int width, int p, const T* qry, const T* key, const T* val, int vw, T* out) {
    any_pass<T>(f.o, wider(g, width), p, qry, key, val, vw, nullptr, out, nullptr, ws);
  }

  // The pass out = (p; a, b, c) (a, b of width wk, c, gup and out of width wv), upstream gup: its gradients added to
  // da, db, dc and to dL.
  void pass_backward(int p, const T* a, const T* b, int wk, const T* c, int wv, const T* gup, const T* out, T* da,
                     T* db, T* dc) {
    cudaStream_t st = context().stream;
    pass(wf, wv, p, gup, c, b, wk, t1.get());  // ∂L/∂a
    accumulate(da, t1.get(), wk);
    reverse(a, ar.get(), wk);
    reverse(b, br.get(), wk);
    reverse(c, cr.get(), wv);
    reverse(gup, gr.get(), wv);
    pass(wr, wv, p, cr.get(), gr.get(), ar.get(), wk, o1.get());  // ∂L/∂b, reversed
    reverse(o1.get(), t2.get(), wk);
    accumulate(db, t2.get(), wk);
    gate_terms<T><<<blocks_for(g.tokens()), kThreads, 0, st>>>(dL.get(), p, gup, out, wv, b, t2.get(), wk, g.tokens());
    pass(wr, wk, p, br.get(), ar.get(), gr.get(), wv, o2.get());  // ∂L/∂c, reversed
    reverse(o2.get(), t1.get(), wv);
    accumulate(dc, t1.get(), wv);
    check(cudaGetLastError(), "pass backward");
  }

  // After f.run: the gradients of L = Σ ⟨dO, o⟩ (dO on the device, [seqs][T][dv]) into dq, dk, dv (device, unpadded)
  // and dgamma (device [seqs][T], gated only; null: not wanted).
  void run(const T* dO, T* dq, T* dk, T* dv, T* dgamma) {
    cudaStream_t st = context().stream;
    gate_factors_both();
    for (Dev<T>* b : {&dQ, &dK, &dVa, &dU})
      check(cudaMemsetAsync(b->get(), 0, b->size() * sizeof(T), st), "zero gradients");
    check(cudaMemsetAsync(dL.get(), 0, dL.size() * sizeof(double), st), "zero gradients");
    const T lambda = static_cast<T>(f.o.ridge);
    const T* ridge = f.R.size() ? f.R.get() : nullptr;
    upstream<T><<<blocks_for(g.tokens()), kThreads, 0, st>>>(dO, f.Num.get(), ridge, lambda, g.T_len, g.Tp, Vp, f.dv,
                                                             f.o.normalized, static_cast<T>(f.o.eps), G.get(),
                                                             g.tokens());
    const T *Q = f.Q.get(), *K = f.K.get(), *Va = f.Va.get(), *U = f.U.get(), *Num = f.Num.get();
    switch (f.op) {
      case GpuOp::linear:
        pass_backward(1, Q, K, Kp, Va, Vp, G.get(), Num, dQ.get(), dK.get(), dVa.get());
        break;
      case GpuOp::hla2:
        pass_backward(2, Q, U, Kp, Va, Vp, G.get(), Num, dQ.get(), dU.get(), dVa.get());
        if (ridge) {
          scale_by<T><<<blocks_for(G.size()), kThreads, 0, st>>>(G.get(), lambda, G.size());
          pass_backward(1, Q, Q, Kp, Va, Vp, G.get(), ridge, dQ.get(), dQ.get(), dVa.get());
        }
        pass_backward(1, Q, K, Kp, K, Kp, dU.get(), U, dQ.get(), dK.get(), dK.get());
        break;
      case GpuOp::ahla:
        pass_backward(1, Q, K, Kp, U, Vp, G.get(), Num, dQ.get(), dK.get(), dU.get());
        pass_backward(1, Q, K, Kp, Va, Vp, dU.get(), U, dQ.get(), dK.get(), dVa.get());
        break;
    }
    const long nk = static_cast<long>(g.seqs) * g.T_len * f.d, nv = static_cast<long>(g.seqs) * g.T_len * f.dv;
    unpad_rows<T><<<blocks_for(nk), kThreads, 0, st>>>(dQ.get(), dq, g.T_len, g.Tp, f.d, Kp, nk);
    unpad_rows<T><<<blocks_for(nk), kThreads, 0, st>>>(dK.get(), dk, g.T_len, g.Tp, f.d, Kp, nk);
    unpad_rows<T><<<blocks_for(nv), kThreads, 0, st>>>(dVa.get(), dv, g.T_len, g.Tp, f.dv, Vp, nv);
    if (dgamma && f.gates.size()) {
      suffix_in_chunks<<<blocks_for(g.chunks()), kThreads, 0, st>>>(dL.get(), total.get(), g.w, g.chunks());
      suffix_of_chunks<<<blocks_for(g.seqs), kThreads, 0, st>>>(total.get(), g.M, g.seqs);
      const long n = static_cast<long>(g.seqs) * g.T_len;
      gate_gradients<T><<<blocks_for(n), kThreads, 0, st>>>(dL.get(), total.get(), f.gates.get(), g.T_len, g.Tp, g.w,
                                                            g.M, dgamma, n);
    }
    check(cudaGetLastError(), "backward");
  }
};

template <class T> void validate(const ForwardOptions& o, int seqs, int T_len, int d, int dv) {
  if (o.chunk < 1 || o.chunk > 1024) throw std::invalid_argument("GPU forms: chunk width must lie in [1, 1024]");
  if (o.fused && o.chunk != kFusedChunk)
    throw std::invalid_argument("GPU fused forms: chunks of " + std::to_string(kFusedChunk) + " tokens");
  if (seqs < 1 || seqs > 65535 || T_len < 1 || d < 1 || dv < 1)
    throw std::invalid_argument("GPU forms: 1 to 65535 sequences of at least one token, d, dv >= 1");
  if (std::is_same_v<T, double> && o.products != Products::ieee)
    throw std::invalid_argument("GPU forms: fp64 forms multiply in fp64 (products ieee)");
}

bool device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string describe_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  int driver = 0, runtime = 0, blas = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cublasGetVersion(context().blas, &blas);
  char text[512];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %.1f GiB, %d SMs), driver %d.%d, runtime %d.%d, cuBLAS %d", prop.name,
                prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem) / (1u << 30), prop.multiProcessorCount,
                driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, blas);
  return text;
}

template <class T> void run_forward(GpuOp op, const Batch<T>& in, const ForwardOptions& o,
                                    const PassStates<T>* state_in, T* out, PassStates<T>* state_out) {
  validate<T>(o, in.seqs, in.T_len, in.d, in.dv);
  Context& ctx = context();
  std::lock_guard<std::mutex> hold(ctx.lock);
  cudaStream_t st = ctx.stream;
  Forward<T> f(op, in.seqs, in.T_len, in.d, in.dv, o, in.gates != nullptr);
  f.upload(in);
  const auto shapes = pass_state_shapes(op, in.d, in.dv);
  const T* xin[3] = {nullptr, nullptr, nullptr};
  if (state_in) {
    if (state_in->parts.size() != shapes.size()) throw std::invalid_argument("GPU forms: wrong number of state parts");
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto [rows, cols] = shapes[i];
      const int ld = f.width(i);
      std::vector<T> padded(static_cast<std::size_t>(in.seqs) * f.g.Kp * ld, T(0));
      for (int s = 0; s < in.seqs; ++s)
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            padded[(static_cast<std::size_t>(s) * f.g.Kp + r) * ld + c] =
                state_in->parts[i][(static_cast<std::size_t>(s) * rows + r) * cols + c];
      check(cudaMemcpyAsync(f.x_in[i].get(), padded.data(), padded.size() * sizeof(T), cudaMemcpyHostToDevice, st),
            "state in");
      check(cudaStreamSynchronize(st), "state in");
      xin[i] = f.x_in[i].get();
    }
  }
  f.run(xin, state_in != nullptr);
  if (f.normalizer_vanished()) throw NormalizerError("normalizer den_t + eps is exactly zero (GPU form)");
  check(cudaMemcpyAsync(out, f.O.get(), f.O.size() * sizeof(T), cudaMemcpyDeviceToHost, st), "outputs");
  if (state_out && o.state) {
    state_out->parts.clear();
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto [rows, cols] = shapes[i];
      const int ld = f.width(i);
      std::vector<T> padded(f.x_out[i].size());
      check(cudaMemcpyAsync(padded.data(), f.x_out[i].get(), padded.size() * sizeof(T), cudaMemcpyDeviceToHost, st),
            "state out");
      check(cudaStreamSynchronize(st), "state out");
      std::vector<T> part(static_cast<std::size_t>(in.seqs) * rows * cols);
      for (int s = 0; s < in.seqs; ++s)
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            part[(static_cast<std::size_t>(s) * rows + r) * cols + c] =
                padded[(static_cast<std::size_t>(s) * f.g.Kp + r) * ld + c];
      state_out->parts.push_back(std::move(part));
    }
  }
  check(cudaStreamSynchronize(st), "forward");
}

template <class T> void run_backward(GpuOp op, const Batch<T>& in, const ForwardOptions& opts, const T* dO, T* dq,
                                     T* dk, T* dv, T* dgamma) {
  ForwardOptions o = opts;
  o.state = false;  // from the zero state, for the outputs' gradients: no final state to carry
  validate<T>(o, in.seqs, in.T_len, in.d, in.dv);
  Context& ctx = context();
  std::lock_guard<std::mutex> hold(ctx.lock);
  cudaStream_t st = ctx.stream;
  Forward<T> f(op, in.seqs, in.T_len, in.d, in.dv, o, in.gates != nullptr);
  f.upload(in);
  const T* none[3] = {nullptr, nullptr, nullptr};
  f.run(none, false);
  if (f.normalizer_vanished()) throw NormalizerError("normalizer den_t + eps is exactly zero (GPU form)");
  const long nk = static_cast<long>(in.seqs) * in.T_len * in.d, nv = static_cast<long>(in.seqs) * in.T_len * in.dv;
  const long ng = static_cast<long>(in.seqs) * in.T_len;
  Dev<T> dO_d(nv), dq_d(nk), dk_d(nk), dv_d(nv), dg_d(in.gates ? ng : 0);
  check(cudaMemcpyAsync(dO_d.get(), dO, nv * sizeof(T), cudaMemcpyHostToDevice, st), "upstream");
  Backward<T> b(f);
  b.run(dO_d.get(), dq_d.get(), dk_d.get(), dv_d.get(), in.gates ? dg_d.get() : nullptr);
  check(cudaMemcpyAsync(dq, dq_d.get(), nk * sizeof(T), cudaMemcpyDeviceToHost, st), "dq");
  check(cudaMemcpyAsync(dk, dk_d.get(), nk * sizeof(T), cudaMemcpyDeviceToHost, st), "dk");
  check(cudaMemcpyAsync(dv, dv_d.get(), nv * sizeof(T), cudaMemcpyDeviceToHost, st), "dv");
  if (in.gates && dgamma)
    check(cudaMemcpyAsync(dgamma, dg_d.get(), ng * sizeof(T), cudaMemcpyDeviceToHost, st), "dgamma");
  check(cudaStreamSynchronize(st), "backward");
}

template <class T> Timing run_timed(GpuOp op, int seqs, int T_len, int d, int dv, double gate_lo, double gamma,
                                    const ForwardOptions& opts, int reps, std::uint64_t seed, bool backward) {
  ForwardOptions o = opts;
  if (backward) o.state = false;
  validate<T>(o, seqs, T_len, d, dv);
  Context& ctx = context();
  std::lock_guard<std::mutex> hold(ctx.lock);
  cudaStream_t st = ctx.stream;
  check(cudaDeviceSynchronize(), "sync");
  std::size_t free0 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "memory");
  g_allocated = 0;
  Timing out;
  {
    const bool gated = gate_lo > 0;
    Forward<T> f(op, seqs, T_len, d, dv, o, gated);
    const long n_qk = static_cast<long>(seqs) * T_len * d, n_v = static_cast<long>(seqs) * T_len * dv;
    Dev<T> q(n_qk), k(n_qk), v(n_v);
    const double a = std::sqrt(3.0 / d);  // unit-variance entries scaled by d^-1/2
    fill_uniform<T><<<blocks_for(n_qk), kThreads, 0, st>>>(q.get(), n_qk, seed, -a, a);
    fill_uniform<T><<<blocks_for(n_qk), kThreads, 0, st>>>(k.get(), n_qk, seed + 1, -a, a);
    fill_uniform<T><<<blocks_for(n_v), kThreads, 0, st>>>(v.get(), n_v, seed + 2, -std::sqrt(3.0), std::sqrt(3.0));
    if (gated)
      fill_uniform<double>
          <<<blocks_for(f.gates.size()), kThreads, 0, st>>>(f.gates.get(), f.gates.size(), seed + 3, gate_lo, 1.0);
    else
      f.log_gamma = std::log(gamma);
    check(cudaStreamSynchronize(st), "inputs");
    f.load(q.get(), k.get(), v.get(), false);
    const T* none[3] = {nullptr, nullptr, nullptr};
    // forward + backward: the upstream dO unit normal-sized, the gradients into buffers of their own
    std::optional<Backward<T>> b;
    Dev<T> dO, dq, dk, dvv, dg;
    if (backward) {
      b.emplace(f);
      dO = Dev<T>(n_v);
      dq = Dev<T>(n_qk);
      dk = Dev<T>(n_qk);
      dvv = Dev<T>(n_v);
      if (gated) dg = Dev<T>(static_cast<long>(seqs) * T_len);
      fill_uniform<T><<<blocks_for(n_v), kThreads, 0, st>>>(dO.get(), n_v, seed + 4, -std::sqrt(3.0), std::sqrt(3.0));
    }
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    for (int r = -1; r < reps; ++r) {  // r = -1: the warm-up (cuBLAS's heuristics, the first launches)
      check(cudaEventRecord(e0, st), "event");
      f.run(none, false);
      if (b) b->run(dO.get(), dq.get(), dk.get(), dvv.get(), gated ? dg.get() : nullptr);
      check(cudaEventRecord(e1, st), "event");
      check(cudaEventSynchronize(e1), "run");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (r >= 0) out.ms.push_back(ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::size_t free1 = 0;
    check(cudaMemGetInfo(&free1, &total), "memory");
    out.peak_bytes_used = static_cast<double>(free0 > free1 ? free0 - free1 : 0);
    out.device_bytes = static_cast<double>(g_allocated);
  }
  return out;
}

}  // namespace

}  // namespace hla::fast::cuda

extern "C" __attribute__((visibility("default"))) const hla::fast::cuda::LibraryApi* hla_cuda_library() {
  using namespace hla::fast::cuda;
  static const LibraryApi api{kLibraryVersion,      device_present,      describe_device,
                              run_forward<float>,   run_forward<double>, run_backward<float>,
                              run_backward<double>, run_timed<float>,    run_timed<double>};
  return &api;
}
