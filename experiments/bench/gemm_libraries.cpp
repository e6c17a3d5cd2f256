// The machine's limits, measured in the same run as the forms (issue 14):
//
//   roofline/<library>/<scalar>/threads:<t>     the 1024² matrix product C = A·B in each GEMM library Debian
//                                               offers (eigen, openblas, blis, libxsmm), with the library's own
//                                               threads (t: each of HLA_BENCH_THREADS, default 1 and 2:
//                                               bench_threads in bench_main.cpp); the targets read the best of them
//   gemm/<library>/<scalar>/w:<w>/m:<m>/n:<n>/k:<k>[/nt]/threads:1
//                                               the chunk form's own products at d = dv = 64, w = 32..128, one
//                                               thread, operands contiguous (ld = rows) as the fused form lays
//                                               them out: the ceiling of a chunk form, and which library to call
//   peak/fma/<scalar>/threads:<t>               independent FMA chains in registers of the widest vector the
//                                               build targets: the machine's peak FMA rate (t as above)
//   peak/clock/threads:1                        a chain of dependent integer adds (one per cycle): the core clock
//   bandwidth/<scalar>/bytes:<B>/threads:1      y ← g·y + x over a B-byte buffer, repeated: the read+write rate
//                                               of the cache a decoding kernel's state of B bytes lives in
// Counters: gflops (2mnk, or 2 per FMA lane), ghz, bytes_per_s (read + written).
//
// Each library runs its own threads for the roofline (OpenBLAS: openblas_set_num_threads — Debian's default
// build is the pthread one; BLIS: bli_thread_set_num_threads, OpenMP build; Eigen: setNbThreads; LIBXSMM:
// its OpenMP GEMM libxsmm_?gemm_omp in OpenMP's thread count) and is set back to one thread after the entry,
// so no library's threads run beside a form's. OpenBLAS and BLIS both export the BLAS/CBLAS symbols: OpenBLAS
// is linked first and called through cblas_?gemm, BLIS through its own bli_?gemm API.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/core.h>
#include <libxsmm.h>
#include <omp.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include "core/eigen.hpp"

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include "core/names.hpp"
#include "core/types.hpp"
#include "fast/gemm/small_gemm.hpp"

// Last: blis.h brings f2c's function-like macros (bit_test, bit_set, ...), which would rewrite Boost's headers.
#include <blis.h>
#undef bit_test
#undef bit_set
#undef bit_clear

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

using namespace hla;

namespace {

enum class Library { eigen, openblas, blis, libxsmm };
constexpr NameTable<Library, 4> name_table(Library) {
  return {"GEMM library",
          {{{Library::eigen, "eigen"},
            {Library::openblas, "openblas"},
            {Library::blis, "blis"},
            {Library::libxsmm, "libxsmm"}}}};
}

void set_threads(Library lib, int t) {
  switch (lib) {
    case Library::eigen:
      Eigen::setNbThreads(t);
      break;
    case Library::openblas:
      openblas_set_num_threads(t);
      break;
    case Library::blis:
      bli_thread_set_num_threads(t);
      break;
    case Library::libxsmm:
      omp_set_num_threads(t);
      break;
  }
}

// C (m×n) = A (m×k) · op(B), column-major, contiguous, one call of the library's general entry point.
template <class T> struct Call {
  Library lib;
  Eigen::Index m, n, k;
  bool trans_b;
  gemm::Product<T> small;  // LIBXSMM: the kernel dispatched once for the shape (the way the fused form calls it)

  Call(Library l, Eigen::Index m_, Eigen::Index n_, Eigen::Index k_, bool tb, bool large)
      : lib(l), m(m_), n(n_), k(k_), trans_b(tb) {
    if (lib == Library::libxsmm && !large) small = gemm::Product<T>({m, n, k, m, tb ? n : k, m, tb, false});
  }

  void operator()(const T* A, const T* B, T* C, bool large) const {
    const Eigen::Index ldb = trans_b ? n : k;
    switch (lib) {
      case Library::eigen: {
        using Map = Eigen::Map<const Mat<T>>;
        Eigen::Map<Mat<T>> c(C, m, n);
        if (trans_b)
          c.noalias() = Map(A, m, k) * Map(B, n, k).transpose();
        else
          c.noalias() = Map(A, m, k) * Map(B, k, n);
        break;
      }
      case Library::openblas:
        if constexpr (std::is_same_v<T, double>)
          cblas_dgemm(CblasColMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0, A, m, B, ldb, 0.0,
                      C, m);
        else
          cblas_sgemm(CblasColMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, A, m, B, ldb,
                      0.0f, C, m);
        break;
      case Library::blis: {
        T one = 1, zero = 0;
        // B as stored (ldb) read with transposed strides when trans_b: BLIS takes general strides.
        const inc_t rsb = trans_b ? ldb : 1, csb = trans_b ? 1 : ldb;
        if constexpr (std::is_same_v<T, double>)
          bli_dgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<T*>(A), 1, m, const_cast<T*>(B),
                    rsb, csb, &zero, C, 1, m);
        else
          bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<T*>(A), 1, m, const_cast<T*>(B),
                    rsb, csb, &zero, C, 1, m);
        break;
      }
      case Library::libxsmm:
        if (!large) {
          small(A, B, C);
        } else {
          const libxsmm_blasint mm = m, nn = n, kk = k, lda = m, lb = ldb, ldc = m;
          const char ta = 'N', tb = trans_b ? 'T' : 'N';
          const T one = 1, zero = 0;
          if constexpr (std::is_same_v<T, double>)
            libxsmm_dgemm_omp(&ta, &tb, &mm, &nn, &kk, &one, A, &lda, B, &lb, &zero, C, &ldc);
          else
            libxsmm_sgemm_omp(&ta, &tb, &mm, &nn, &kk, &one, A, &lda, B, &lb, &zero, C, &ldc);
        }
        break;
    }
  }
};

template <class T> void bench_product(benchmark::State& state, Library lib, Eigen::Index m, Eigen::Index n,
                                      Eigen::Index k, bool trans_b, int threads, bool large) {
  const Mat<T> A = Mat<T>::Random(m, k), B = trans_b ? Mat<T>::Random(n, k) : Mat<T>::Random(k, n);
  Mat<T> C(m, n);
  const Call<T> call(lib, m, n, k, trans_b, large);
  set_threads(lib, threads);
  for (auto _ : state) {
    call(A.data(), B.data(), C.data(), large);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  set_threads(lib, 1);
  // The result is checked once against Eigen, so an entry can never time a library that computes nothing.
  Mat<T> ref(m, n);
  ref.noalias() = trans_b ? Mat<T>(A * B.transpose()) : Mat<T>(A * B);
  const double err = (C - ref).cwiseAbs().maxCoeff() / std::max<double>(1e-30, ref.cwiseAbs().maxCoeff());
  if (!(err < (std::is_same_v<T, double> ? 1e-10 : 1e-3)))
    state.SkipWithError(fmt::format("{} differs from Eigen by {:.2e}", name_of(lib), err).c_str());
  state.counters["gflops"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The chunk form's products at width w (d = dv = 64; fast/chunked/hla2_fused.hpp): W, P = Q·Kᵀ, Q·Uᵀ
// (w×w, k = d, A·Bᵀ); U, Y = W·K, P·V (w×d, k = w); U, Y carries Q·S0, Q·C'0 (w×d, k = d); S, C' updates
// Kᵀ·K, Vᵀ·U (d×d, k = w).
struct ChunkShape {
  Eigen::Index m, n, k;
  bool trans_b;
};
std::vector<ChunkShape> chunk_shapes(Eigen::Index w, Eigen::Index d) {
  return {{w, w, d, true}, {w, d, w, false}, {w, d, d, false}, {d, d, w, false}};
}

// Independent FMA chains: kChains accumulators of the widest vector, each a ← a·b + c per step.
constexpr int kChains = 16;
template <class T> void bench_peak(benchmark::State& state, int threads) {
  constexpr long kSteps = 1 << 16;
#if defined(__AVX512F__)
  constexpr int lanes = 64 / sizeof(T);
#elif defined(__FMA__)
  constexpr int lanes = 32 / sizeof(T);
#else
  constexpr int lanes = 1;
#endif
  auto run = [] {
    double sink = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, double>) {
      __m512d a[kChains], b = _mm512_set1_pd(0.999999), c = _mm512_set1_pd(1e-7);
      for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_pd(1.0 + i);
      for (long s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_pd(a[i], b, c);
      for (int i = 0; i < kChains; ++i) sink += _mm512_reduce_add_pd(a[i]);
    } else {
      __m512 a[kChains], b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
      for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + i);
      for (long s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
      for (int i = 0; i < kChains; ++i) sink += _mm512_reduce_add_ps(a[i]);
    }
#elif defined(__FMA__)
    if constexpr (std::is_same_v<T, double>) {
      __m256d a[kChains], b = _mm256_set1_pd(0.999999), c = _mm256_set1_pd(1e-7);
      for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_pd(1.0 + i);
      for (long s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_pd(a[i], b, c);
      double out[4];
      for (int i = 0; i < kChains; ++i) {
        _mm256_storeu_pd(out, a[i]);
        sink += out[0] + out[1] + out[2] + out[3];
      }
    } else {
      __m256 a[kChains], b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
      for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + i);
      for (long s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
      float out[8];
      for (int i = 0; i < kChains; ++i) {
        _mm256_storeu_ps(out, a[i]);
        for (float x : out) sink += x;
      }
    }
#else
    T a[kChains];
    for (int i = 0; i < kChains; ++i) a[i] = T(1 + i);
    for (long s = 0; s < kSteps; ++s)
      for (int i = 0; i < kChains; ++i) a[i] = std::fma(a[i], T(0.999999), T(1e-7));
    for (int i = 0; i < kChains; ++i) sink += a[i];
#endif
    return sink;
  };
  for (auto _ : state) {
    double sink = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : sink) if (threads > 1)
    for (int t = 0; t < threads; ++t) sink += run();
    benchmark::DoNotOptimize(sink);
  }
  state.counters["gflops"] =
      benchmark::Counter(2.0 * lanes * kChains * kSteps * threads / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["lanes"] = lanes;
}

// A chain of dependent register–register adds retires one per cycle: adds per second is the core clock.
// (Not add-immediate: recent Intel cores fold chains of immediate adds at rename, several per cycle.)
void bench_clock(benchmark::State& state) {
  constexpr long kAdds = 1 << 24;
  for (auto _ : state) {
    long x = 0, one = 1;
#if defined(__x86_64__)
    for (long i = 0; i < kAdds / 8; ++i)
      asm volatile(
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
          : "+r"(x)
          : "r"(one));
#endif
    benchmark::DoNotOptimize(x);
  }
  // The loop's own increment and branch run beside the chain on other ports; 8 adds per iteration.
  state.counters["ghz"] = benchmark::Counter(double(kAdds) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// y ← g·y + x over `bytes` of T, the access of the decoding kernels' column passes (read and write every
// state entry once per token).
template <class T> void bench_bandwidth(benchmark::State& state, long bytes) {
  constexpr long kBlock = 256;  // y in blocks of kBlock entries (a whole number of them), each against the same x
  const long len = bytes / long(sizeof(T)) / kBlock * kBlock;
  std::vector<T> y(len, T(1)), x(kBlock, T(1e-3));
  const T g = T(0.999);
  for (auto _ : state) {
    for (long i = 0; i < len; i += kBlock) {
      T* __restrict yy = y.data() + i;
      const T* __restrict xx = x.data();
      for (long j = 0; j < kBlock; ++j) yy[j] = g * yy[j] + xx[j];
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes_per_s"] =
      benchmark::Counter(2.0 * len * sizeof(T), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes"] = double(len * sizeof(T));
}

template <class T> void register_scalar(const std::vector<int>& threads) {
  const std::string scalar = scalar_name<T>();
  for (Library lib : values_of<Library>())
    for (int t : threads) {
      const std::string nm = fmt::format("roofline/{}/{}/threads:{}", name_of(lib), scalar, t);
      benchmark::RegisterBenchmark(
          nm.c_str(), [=](benchmark::State& s) { bench_product<T>(s, lib, 1024, 1024, 1024, false, t, true); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
    }
  for (Library lib : values_of<Library>())
    for (Eigen::Index w : {32, 48, 64, 96, 128})
      for (const ChunkShape& sh : chunk_shapes(w, 64)) {
        const std::string nm = fmt::format("gemm/{}/{}/w:{}/m:{}/n:{}/k:{}{}/threads:1", name_of(lib), scalar, w, sh.m,
                                           sh.n, sh.k, sh.trans_b ? "/nt" : "");
        benchmark::RegisterBenchmark(
            nm.c_str(), [=](benchmark::State& s) { bench_product<T>(s, lib, sh.m, sh.n, sh.k, sh.trans_b, 1, false); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.05);
      }
  for (int t : threads) {
    const std::string nm = fmt::format("peak/fma/{}/threads:{}", scalar, t);
    benchmark::RegisterBenchmark(nm.c_str(), [=](benchmark::State& s) { bench_peak<T>(s, t); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  }
  // hla2's decoding state at d = dv = 64: S (d²) and the augmented [C m]ᵀ, [G h]ᵀ ((dv+1)·d each).
  const long state_bytes = long(sizeof(T)) * (64 * 64 + 2 * 65 * 64);
  const std::string nm = fmt::format("bandwidth/{}/bytes:{}/threads:1", scalar, state_bytes);
  benchmark::RegisterBenchmark(nm.c_str(), [=](benchmark::State& s) { bench_bandwidth<T>(s, state_bytes); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.1);
}

// Every library at one thread from the start: only a roofline entry runs more (set_threads, set back after it).
const bool one_thread = [] {
  openblas_set_num_threads(1);
  bli_thread_set_num_threads(1);
  return true;
}();

}  // namespace

// The machine's limits, registered by bench_main.cpp before its forms (the thread counts are its bench_threads()).
void register_gemm_libraries(const std::vector<int>& threads) {
  register_scalar<float>(threads);
  register_scalar<double>(threads);
  benchmark::RegisterBenchmark("peak/clock/threads:1", bench_clock)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

// Versions and the code paths each library chose on this CPU (printed and recorded in the JSON's context).
std::vector<std::pair<std::string, std::string>> gemm_library_context() {
  libxsmm_init();
  return {
      {"hla_openblas", fmt::format("{} (core {})", openblas_get_config(), openblas_get_corename())},
      {"hla_blis", fmt::format("{} (kernels {})", bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()))},
      {"hla_libxsmm", fmt::format("{} (JIT target {})", LIBXSMM_VERSION, libxsmm_get_target_arch())},
  };
}
