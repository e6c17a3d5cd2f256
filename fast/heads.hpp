// Multi-head inputs (§5.2): H heads, each with its own Q, K, V and state, through one registered form.
// (Multi-query — heads with their own queries sharing K, V and so S — is hla2-specific and lives in
// fast/chunked/hla2.hpp as hla2_chunked_heads.)
//
// Heads are independent, so with at least as many heads as threads they run in parallel over heads, each
// head's form on one thread: no barrier between heads, and each thread streams its own heads' inputs.
// With fewer heads than threads, heads run one after another and each uses every thread over its chunks
// (the form's own parallelism). Every head goes through the registry's validated call, so a bad head is an
// InputError naming it, and an error in a parallel region is carried out of it, not thrown across it.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "core/registry.hpp"

namespace hla::fast {

template <class T> std::vector<Run<T>> multi_head(const Entry<T>& form, const std::vector<const Problem<T>*>& heads,
                                                  const Options& opt,
                                                  const std::vector<const NamedState<T>*>& init = {}) {
  const auto H = static_cast<Eigen::Index>(heads.size());
  if (H == 0) throw InputError(form.key() + " multi-head: no heads");
  if (!init.empty() && static_cast<Eigen::Index>(init.size()) != H)
    throw InputError(form.key() + " multi-head: " + std::to_string(init.size()) + " initial states for " +
                     std::to_string(H) + " heads");
  for (Eigen::Index h = 0; h < H; ++h)
    if (!heads[h]) throw InputError(form.key() + " multi-head: head " + std::to_string(h) + " has no problem");
  std::vector<Run<T>> runs(static_cast<std::size_t>(H));
  auto run_head = [&](Eigen::Index h, const Options& o) {
    try {
      runs[h] = form(*heads[h], o, init.empty() ? nullptr : init[h]);
    } catch (const InputError& e) { throw InputError("head " + std::to_string(h) + ": " + e.what()); }
  };
  if (opt.threads > 1 && H >= opt.threads) {
    Options one = opt;
    one.threads = 1;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(H));
#pragma omp parallel for num_threads(opt.threads) schedule(dynamic, 1)
    for (Eigen::Index h = 0; h < H; ++h) {
      try {
        run_head(h, one);
      } catch (...) { errors[h] = std::current_exception(); }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);  // the first failing head, in head order
  } else {
    for (Eigen::Index h = 0; h < H; ++h) run_head(h, opt);
  }
  return runs;
}

}  // namespace hla::fast
