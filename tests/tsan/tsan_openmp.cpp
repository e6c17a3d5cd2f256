// ThreadSanitizer over the OpenMP drivers (`make tsan`, docs/hardening.md): every registered form that
// takes a thread count (the scan drivers, the chunked forms, the fused kernel) at 2, 3 and 4 threads,
// several heads through fast/heads.hpp, and the multi-query chunked form with several heads. Built with
// clang++-16 -fsanitize=thread against LLVM's libomp; run with Archer (OMP_TOOL_LIBRARIES=libarcher.so),
// which tells TSan about OpenMP's barriers, tasks and reductions so that only real races are reported.
//
// Each threaded result is also compared with the one-thread result: a race that TSan could not see (in
// uninstrumented code such as LIBXSMM's kernels) but that changes numbers shows up there. Exit status 1 on
// such a difference; TSan's own reports set the exit status through TSAN_OPTIONS=exitcode.
//
// One scalar (double) and the forms' registration compiled into this one unit, so the tsan build does
// not rebuild the whole harness.
#include <fmt/core.h>

#include <cmath>

#include "core/inputs.hpp"
#include "core/registry_impl.hpp"
#include "fast/chunked/register.hpp"
#include "fast/heads.hpp"
#include "fast/scan/register.hpp"

namespace hla {
// The kinds this program does not run: defined empty so that registry<double>() links.
template <class T> void register_reference(Registry<T>&) {}
template <class T> void register_serial(Registry<T>&) {}
template <class T> void register_distributed(Registry<T>&) {}  // MPI ranks, not OpenMP threads (scripts/test-mpi.sh)
template void register_scan<double>(Registry<double>&);
template void register_chunked<double>(Registry<double>&);
namespace scan {
HLA_SCAN_OPERATORS(, double)  // compiled in the library's scan and chunked units, which this program does not link
}
namespace fast::chunked {
HLA_FUSED_PASS(, double)
}
}  // namespace hla

using namespace hla;

namespace {

int differences = 0;

// Threads change the order of floating-point sums only across chunk summaries: within a few ulps of the
// one-thread result, relative to the output's scale.
void compare(const std::string& what, const Mat<double>& one, const Mat<double>& many) {
  const double scale = std::max(1.0, one.cwiseAbs().maxCoeff());
  const double diff = (one - many).cwiseAbs().maxCoeff() / scale;
  if (!(diff <= 1e-12)) {
    fmt::print("DIFFERS {}: max relative difference {:.3e} from the one-thread result\n", what, diff);
    ++differences;
  }
}

}  // namespace

int main() {
  const Registry<double>& reg = registry<double>();
  const Problem<double> p = gaussian_problem({77, 6, 5}, 3);  // 77: a ragged last chunk for every width below
  int runs = 0;
  for (const Entry<double>& e : reg.entries()) {
    if (!e.caps.threads) continue;
    for (int chunk : {4, 9}) {
      Options o;
      o.chunk = chunk;
      o.gamma = e.caps.decay ? rational(9, 10) : rational(1);
      o.normalized = e.caps.normalized;
      o.eps = e.caps.normalized ? rational(1, 100) : rational(0);
      const Run<double> one = e(p, o);
      for (int threads : {2, 3, 4}) {
        o.threads = threads;
        const Run<double> many = e(p, o);
        compare(fmt::format("{} chunk={} threads={}", e.key(), chunk, threads), one.O, many.O);
        ++runs;
      }
    }
  }
  // Heads in parallel (as many heads as threads or more), and fewer heads than threads (each head threaded).
  std::vector<Problem<double>> problems;
  for (int h = 0; h < 5; ++h) problems.push_back(gaussian_problem({40, 4, 3}, 10 + h));
  std::vector<const Problem<double>*> heads;
  for (const auto& q : problems) heads.push_back(&q);
  for (const char* form : {"chunked", "scan-blelloch"}) {
    const Entry<double>& e = reg.find("ahla", form);
    Options o;
    o.chunk = 8;
    const auto one = fast::multi_head(e, heads, o);
    for (int threads : {2, 4, 8}) {
      o.threads = threads;
      const auto many = fast::multi_head(e, heads, o);
      for (std::size_t h = 0; h < heads.size(); ++h)
        compare(fmt::format("multi_head {} head {} threads={}", e.key(), h, threads), one[h].O, many[h].O);
      ++runs;
    }
  }
  std::vector<const Mat<double>*> queries;
  for (const auto& q : problems) queries.push_back(&q.Q);
  Options o;
  o.chunk = 8;
  o.gamma = rational(3, 4);
  const std::vector<const NamedState<double>*> no_state(queries.size(), nullptr);
  const auto one = fast::chunked::hla2_chunked_heads<double>(queries, problems[0].K, problems[0].V, o, no_state);
  for (int threads : {2, 4}) {
    o.threads = threads;
    const auto many = fast::chunked::hla2_chunked_heads<double>(queries, problems[0].K, problems[0].V, o, no_state);
    for (std::size_t h = 0; h < queries.size(); ++h)
      compare(fmt::format("hla2_chunked_heads head {} threads={}", h, threads), one[h].O, many[h].O);
    ++runs;
  }
  fmt::print("tsan: {} threaded runs, {} differing from one thread\n", runs, differences);
  return differences == 0 ? 0 : 1;
}
