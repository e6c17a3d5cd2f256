#include "core/registry.hpp"

#include <string>

namespace hla {

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
