// LIBXSMM behind fast/gemm/small_gemm.hpp: kernels dispatched (generated on first request, then cached by
// LIBXSMM itself, thread-safe) for one column-major shape, α = 1, β = 0 or 1. LIBXSMM 1.17 generates
// kernels for A·B and A·Bᵀ but not Aᵀ·B (the chunk kernels lay their operands out accordingly).
#include <libxsmm.h>

#include "fast/gemm/small_gemm.hpp"

namespace hla::gemm::detail {

namespace {
// Every matrix product runs on the thread that asks for it: the forms parallelize themselves (Options::threads, over
// chunks, blocks or heads, each region setting its own threads' count to 1). Eigen's OpenMP GEMM would otherwise start
// omp_get_max_threads() threads for a large product made outside those regions (hla2/chunked's final Qᵀ·diag(x)·V at
// one thread), so that `hla run --threads 1` ran on every core and waited on them: beside a CPU hog, 0.28–0.69 s
// instead of 0.004 s at n = 16384 (issue 49). Set once, when the library is loaded; the bench sets the same.
[[maybe_unused]] const bool kProductsOnTheCallingThread = (Eigen::setNbThreads(1), true);

int flags_of(const Shape& s) {
  return (s.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (s.accumulate ? 0 : LIBXSMM_GEMM_FLAG_BETA_0);
}
}  // namespace

template <> const void* xsmm_dispatch<double>(const Shape& s) {
  const libxsmm_blasint m = s.m, n = s.n, k = s.k, lda = s.lda, ldb = s.ldb, ldc = s.ldc;
  const double alpha = 1, beta = s.accumulate ? 1 : 0;
  const int flags = flags_of(s);
  return reinterpret_cast<const void*>(libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr));
}

template <> const void* xsmm_dispatch<float>(const Shape& s) {
  const libxsmm_blasint m = s.m, n = s.n, k = s.k, lda = s.lda, ldb = s.ldb, ldc = s.ldc;
  const float alpha = 1, beta = s.accumulate ? 1 : 0;
  const int flags = flags_of(s);
  return reinterpret_cast<const void*>(libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr));
}

template <> void xsmm_run<double>(const void* kernel, const double* a, const double* b, double* c) {
  reinterpret_cast<libxsmm_dmmfunction>(const_cast<void*>(kernel))(a, b, c);
}

template <> void xsmm_run<float>(const void* kernel, const float* a, const float* b, float* c) {
  reinterpret_cast<libxsmm_smmfunction>(const_cast<void*>(kernel))(a, b, c);
}

}  // namespace hla::gemm::detail
