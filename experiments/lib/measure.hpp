// Measuring one sweep point's calls (forward forms in sweep_run.cpp, backward passes in sweep_backward.cpp):
// wall and process-CPU time over the repeats, and the peak-RSS delta of the first call.
#pragma once

#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "numerics/compare.hpp"

namespace hla::sweep {

inline std::string fmt_double(double v) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return "inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

inline long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t len = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, len, field) == 0) return std::atol(line.c_str() + len + 1);
  return -1;
}

// Under AddressSanitizer the heap is the sanitizer's: freed blocks wait in a quarantine of up to 256 MiB,
// every block has redzones and shadow pages, and malloc_trim does not reach it. A peak-RSS delta then
// measures the sanitizer, not the work (CI saw a checkpointed pass "use" 4.4x the serial pass's memory), so
// such builds leave the column empty rather than write a number that means something else.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kPeakRssMeasured = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kPeakRssMeasured = false;
#else
inline constexpr bool kPeakRssMeasured = true;
#endif
#else
inline constexpr bool kPeakRssMeasured = true;
#endif

// Resets the kernel's peak-RSS counter (Linux ≥ 4.0: writing 5 to clear_refs), so VmHWM after the
// work minus VmRSS before it is the work's own peak. Falls back to getrusage's lifetime maximum. Pages
// the allocator still holds from earlier work are first returned (malloc_trim) so that reuse of them
// does not hide the work's memory; page granularity (4 KiB) remains.
struct PeakMeter {
  long rss0_kb = -1;
  bool reset = false;
  void start() {
    ::malloc_trim(0);  // hand freed heap pages back, so the work's allocations show up as new resident pages
    int fd = ::open("/proc/self/clear_refs", O_WRONLY);
    reset = fd >= 0 && ::write(fd, "5", 1) == 1;
    if (fd >= 0) ::close(fd);
    rss0_kb = status_kb("VmRSS:");
  }
  long delta_bytes() const {
    long hwm = status_kb("VmHWM:");
    if (!reset || hwm < 0 || rss0_kb < 0) {
      rusage ru{};
      getrusage(RUSAGE_SELF, &ru);
      hwm = ru.ru_maxrss;
    }
    return std::max(0L, hwm - rss0_kb) * 1024;
  }
};

// CPU nanoseconds each thread of this process has run (/proc/self/task/<tid>/schedstat, first field), by thread id;
// empty where the kernel does not provide it.
inline std::map<long, long long> thread_cpu_ns() {
  std::map<long, long long> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    long long ns = 0;
    if (in >> ns) out[std::atol(task.path().filename().c_str())] = ns;
  }
  return out;
}

// The threads of this process that ran between two thread_cpu_ns() readings: those whose CPU time advanced (a thread
// started in between counts when it ran at all). What a point's `threads` asked for is not always what ran: a library's
// own thread pool (Eigen's OpenMP GEMM, a BLAS) or an earlier region's workers still spinning show up here. 0 when
// unknown.
inline int threads_that_ran(const std::map<long, long long>& before, const std::map<long, long long>& after) {
  int ran = 0;
  for (const auto& [tid, ns] : after) {
    const auto it = before.find(tid);
    if (ns > (it == before.end() ? 0 : it->second)) ++ran;
  }
  return ran;
}

// Runs call() `repeats` times and fills time_median_s, time_min_s, time_max_s, time_iqr_s, tokens_per_s,
// cpu_time_median_s, threads_used (threads_that_ran over the first call) and peak_rss_delta_bytes (of the first call;
// empty under AddressSanitizer).
template <class F> void measure_calls(int repeats, long n, F&& call, std::map<std::string, std::string>& f) {
  auto cpu_now = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  std::vector<double> times, cpu_times;
  PeakMeter meter;
  std::map<long, long long> threads_before;
  for (int r = 0; r < repeats; ++r) {
    if (r == 0) {
      threads_before = thread_cpu_ns();
      meter.start();
    }
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu_times.push_back(cpu_now() - c0);
    if (r == 0) {
      f["peak_rss_delta_bytes"] = kPeakRssMeasured ? std::to_string(meter.delta_bytes()) : "";
      const int ran = threads_that_ran(threads_before, thread_cpu_ns());
      f["threads_used"] = ran > 0 ? std::to_string(ran) : "";
    }
  }
  std::sort(cpu_times.begin(), cpu_times.end());
  f["cpu_time_median_s"] = fmt_double(cpu_times[cpu_times.size() / 2]);
  std::sort(times.begin(), times.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(times.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(std::floor(pos)), hi = std::min(lo + 1, times.size() - 1);
    return times[lo] + (pos - static_cast<double>(lo)) * (times[hi] - times[lo]);
  };
  f["time_median_s"] = fmt_double(quantile(0.5));
  f["time_min_s"] = fmt_double(times.front());
  f["time_max_s"] = fmt_double(times.back());
  f["time_iqr_s"] = fmt_double(quantile(0.75) - quantile(0.25));
  f["tokens_per_s"] = fmt_double(static_cast<double>(n) / quantile(0.5));
}

// The error columns err_max_abs, err_max_rel, err_normwise_rel and err_units_u (u = the scalar's unit roundoff).
inline void error_columns(const ErrorStats& es, double u, std::map<std::string, std::string>& f) {
  f["err_max_abs"] = fmt_double(es.max_abs);
  f["err_max_rel"] = fmt_double(es.max_rel);
  f["err_normwise_rel"] = fmt_double(es.normwise_rel);
  f["err_units_u"] = fmt_double(es.normwise_rel / u);
}

}  // namespace hla::sweep
