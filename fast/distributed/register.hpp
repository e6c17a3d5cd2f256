// Registers the sequence-parallel forms (fast/distributed/sequence.hpp) for scalar T, each the rank's rows
// (run_local) gathered on every rank:
//   mpi-chunked     blocks per rank, cross-rank scan by MPI_Exscan over a user-defined non-commutative
//                   MPI_Op (the default: faster in `make bench-distributed`, docs/distributed.md)
//   mpi-chunked-rd  the same with the hand-written recursive-doubling exclusive scan
// for every operator whose scan combine is associative with all its options: hla2 and AHLA (corrected
// combines), hla3 (corrected minimal concatenation), linear. Each finishes its block with the
// operator's fast chunked form and equals the operator's serial form (distributed_plan() names both);
// hla2 passes each block once with hla2/chunked-fused's pieces (sequence.hpp: its summaries are gathered and
// folded, so the two names run the same algorithm for it).
#pragma once

#include "core/registry.hpp"
#include "fast/distributed/plan.hpp"
#include "fast/distributed/sequence.hpp"
#include "fast/scan/operators.hpp"

namespace hla {

namespace distributed {
template <class T> void add_distributed_forms(Registry<T>& r, const DistributedPlan& plan) {
  // The finishing form's capabilities are the sequence-parallel form's (it runs every option itself).
  Registry<T> chunked;
  register_chunked(chunked);
  Caps caps = chunked.find(plan.op, plan.finish_form, plan.finish_variant).caps;
  caps.gates = false;  // given by add_gates below, where the operator has a gated scan and chunked form
  for (const auto& entry : distributed_forms()) {
    // Named copies, not a structured binding: clang (the fuzz and TSan builds) cannot capture a binding with OpenMP on.
    const std::string form = entry.first;
    const CrossScan how = entry.second;
    const std::string scan_name =
        how == CrossScan::mpi_exscan ? "MPI_Exscan (user MPI_Op)" : "recursive-doubling exscan";
    const std::string cite =
        plan.one_pass
            ? "blocks per rank, each passed once by hla2/chunked-fused's pieces: S summaries gathered, the block's "
              "chunk loop, C' summaries gathered, the block's outputs corrected by its prefix"
        : plan.corrected_once ? "blocks per rank, each passed once by " + plan.op + "/" + plan.finish_form + "/" +
                                    plan.finish_variant + " from zero (its state the block's summary), " + scan_name +
                                    " across ranks, each row corrected by one product with the state entering its block"
                              : "blocks per rank: scan summary, " + scan_name + " across ranks, finished by " +
                                    plan.op + "/" + plan.finish_form + "/" + plan.finish_variant;
    // The whole outputs on every rank (the registry's calling convention): the rank's rows, gathered.
    const auto run = [plan, how](const Problem<T>& p, const Options& o, const NamedState<T>* s) {
      return gather_run(run_local(plan, how, p, o, s), p.n(), p.dv());
    };
    r.add({plan.op, form, scan::variant_name(plan.scan_variant), cite, caps, run});
    if (!plan.gated_finish_form.empty())
      r.add_gates(plan.op, form, scan::variant_name(plan.scan_variant),
                  plan.one_pass ? "blocks per rank, each passed once by gated hla2/chunked-fused's pieces, each "
                                  "block's ρ = Π γ_t gathered with its S summary"
                  : plan.corrected_once
                      ? "blocks per rank, each passed once by " + plan.op + "/" + plan.gated_finish_form + "/" +
                            plan.gated_finish_variant +
                            " (gated) from zero, its ρ = Π γ_t and state the block's segment, the gated scan "
                            "operator across ranks, each row corrected by Γ(t, b−1) q_tᵀ [S z]"
                      : "blocks per rank: the block's ρ = Π γ_t and state by " + plan.op + "/" +
                            plan.gated_finish_form + "/" + plan.gated_finish_variant +
                            " (gated), the gated scan operator across ranks, the same form "
                            "from the carried state",
                  run);
  }
}
}  // namespace distributed

template <class T> void register_distributed(Registry<T>& r) {
  for (const auto& plan : distributed::distributed_plan()) distributed::add_distributed_forms(r, plan);
}

}  // namespace hla

// What the generated unit of this kind compiles besides register_distributed<T> (CMakeLists.txt).
#define HLA_KIND_INSTANTIATIONS(T) \
  namespace hla::distributed {     \
  HLA_RUN_LOCAL(, T)               \
  }
