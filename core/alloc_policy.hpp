// Timing a form in steady state: the allocator keeps what the previous call freed.
//
// Every form returns a fresh n×dv output. glibc serves a block above its mmap threshold (at most 32 MiB,
// raised dynamically) with a new mapping and unmaps it on free, so every call of a large form page-faults
// its whole output in again and the kernel zeroes each page: measured on this machine at n ≥ 2^16,
// d = dv = 32, that is +20–40% on the AHLA decoding kernel's time per token (an n-exponent of 1.03–1.05
// over 2^10..2^20 that is the OS's, not the recurrence's; 1.000 with the output's pages reused). A
// long-running consumer (a training or serving loop, a caching allocator) reuses its buffers, and the
// roofline GEMM writes into a preallocated matrix, so timings here are taken the same way.
//
// Scoped, because it changes what the process keeps resident: memory measurements (the sweeps' peak-RSS
// delta) must not run under it. The destructor restores glibc's default thresholds and returns the kept
// pages (malloc_trim).
#pragma once

#include <malloc.h>

namespace hla {

class ReuseFreedMemory {
 public:
  ReuseFreedMemory() {
    ::mallopt(M_MMAP_THRESHOLD, kKeep);  // large blocks come from the heap, so free keeps their pages
    ::mallopt(M_TRIM_THRESHOLD, kKeep);  // and the heap's top is not handed back to the OS either
  }
  ~ReuseFreedMemory() {
    ::mallopt(M_MMAP_THRESHOLD, kDefault);
    ::mallopt(M_TRIM_THRESHOLD, kDefault);
    ::malloc_trim(0);
  }
  ReuseFreedMemory(const ReuseFreedMemory&) = delete;
  ReuseFreedMemory& operator=(const ReuseFreedMemory&) = delete;

  // What the benchmark's build description prints.
  static constexpr const char* description =
      "freed blocks kept for reuse (mallopt M_MMAP_THRESHOLD = M_TRIM_THRESHOLD = 1 GiB)";

 private:
  static constexpr int kKeep = 1 << 30;
  static constexpr int kDefault = 128 * 1024;  // glibc's initial values of both
};

}  // namespace hla
