// Registers the sequence-parallel forms (fast/distributed/sequence.hpp) for scalar T:
//   mpi-chunked     blocks per rank, cross-rank scan by MPI_Exscan over a user-defined non-commutative
//                   MPI_Op (the default: faster in `make bench-distributed`, README "Beyond one machine")
//   mpi-chunked-rd  the same with the hand-written recursive-doubling exclusive scan
// for every operator whose scan combine is associative with all its options: hla2 and AHLA (corrected
// combines), hla3 (corrected minimal concatenation), linear. Each finishes its block with the
// operator's fast chunked form and equals the operator's serial form (distributed_plan() names both).
#pragma once

#include <algorithm>

#include "core/registry.hpp"
#include "fast/distributed/plan.hpp"
#include "fast/distributed/sequence.hpp"
#include "fast/scan/operators.hpp"

namespace hla {

namespace distributed {
template <class T, class MakeOp> void add_distributed_forms(Registry<T>& r, const std::string& op, MakeOp make) {
  const DistributedPlan& plan = *std::find_if(distributed_plan().begin(), distributed_plan().end(),
                                              [&](const DistributedPlan& x) { return x.op == op; });
  // The finishing form's capabilities are the sequence-parallel form's (it runs every option itself).
  Registry<T> chunked;
  register_chunked(chunked);
  const Caps caps = chunked.find(plan.op, plan.finish_form, plan.finish_variant).caps;
  for (const auto& entry : distributed_forms()) {
    // Named copies, not a structured binding: clang (the fuzz and TSan builds) cannot capture a binding with OpenMP on.
    const std::string form = entry.first;
    const CrossScan how = entry.second;
    const std::string cite = std::string("blocks per rank: scan summary, ") +
                             (how == CrossScan::mpi_exscan ? "MPI_Exscan (user MPI_Op)" : "recursive-doubling exscan") +
                             " across ranks, finished by " + plan.op + "/" + plan.finish_form + "/" + plan.finish_variant;
    r.add({plan.op, form, scan::variant_name(plan.scan_variant), cite, caps,
           [plan, how, make](const Problem<T>& p, const Options& o, const NamedState<T>* s) {
             const Entry<T>& finisher = registry<T>().find(plan.op, plan.finish_form, plan.finish_variant);
             return sequence_parallel(make(o), finisher, p, o, s, how);
           }});
  }
}
}  // namespace distributed

template <class T> void register_distributed(Registry<T>& r) {
  using namespace distributed;
  using scan::Variant;
  add_distributed_forms(r, "hla2", [](const Options& o) { return scan::Hla2Op<T, true>(o, Variant::corrected); });
  add_distributed_forms(r, "ahla", [](const Options& o) { return scan::AhlaOp<T>(o, Variant::corrected); });
  add_distributed_forms(r, "hla3", [](const Options& o) { return scan::Hla3MinimalOp<T>(o); });
  add_distributed_forms(r, "linear", [](const Options& o) { return scan::LinearOp<T>(o); });
}

}  // namespace hla
