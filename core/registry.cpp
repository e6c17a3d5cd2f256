#include "core/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace hla {

// The most OpenMP threads a form may ask for: 4 per hardware thread (oversubscription measures something;
// tens of thousands of threads only crash libgomp or the process), and at least 64.
int max_threads() {
  static const int limit = static_cast<int>(std::max(64u, 4 * std::thread::hardware_concurrency()));  // read once
  return limit;
}

void check_thread_environment() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env) return;
  // A list "a,b,..." gives the threads of each nesting level; libgomp creates them at the first parallel region
  // and aborts when it cannot ("Thread creation failed"), so a number past the limit is refused here, by name.
  const std::string text(env);
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (!item.empty() && item.size() <= 18 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      if (std::stoll(item) > max_threads())
        throw InputError("OMP_NUM_THREADS=" + text + " asks for more than the " + std::to_string(max_threads()) +
                         " threads this machine can run (4 per hardware thread, at least 64)");
    } else if (!item.empty() && std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw InputError("OMP_NUM_THREADS=" + text + ": a thread count of " + std::to_string(item.size()) + " digits");
    }
    start = comma + 1;
  }
}

void validate_options(const Options& opt, const Caps& caps, const std::string& who) {
  auto fail = [&](const std::string& what) { throw InputError(who + ": " + what); };
  if (opt.gamma <= 0 || opt.gamma > 1) fail("decay gamma must lie in (0, 1]");
  if (opt.eps < 0) fail("epsilon must be >= 0");
  if (opt.ridge < 0) fail("ridge (λ) must be >= 0");
  if (opt.chunk < 1) fail("chunk width must be >= 1");
  if (opt.threads < 1 || opt.threads > max_threads())
    fail("threads must lie in [1, " + std::to_string(max_threads()) +
         "] (4 per hardware thread of this machine, at least 64)");
  if (opt.gamma != 1 && !caps.decay) fail("this form does not define a decay gamma != 1");
  if (opt.normalized && !caps.normalized) fail("this form does not define a normalized output");
  if (opt.ridge != 0 && !caps.ridge) fail("this form does not define a ridge (λ)");
}

}  // namespace hla
