// Which sequence-parallel forms exist (fast/distributed/register.hpp registers them; `hla check` holds
// each to its serial form), without the templates behind them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fast/scan/common.hpp"

namespace hla::distributed {

// The cross-rank exclusive scan (exscan.hpp).
enum class CrossScan { recursive_doubling, mpi_exscan };

// One sequence-parallel operator: its scan operator's variant, the form that finishes each block (hla2: whose
// pieces pass each block once, sequence.hpp), and the serial form it must equal (`hla check` under mpirun
// holds it to that).
struct DistributedPlan {
  std::string op;
  scan::Variant scan_variant;
  std::string finish_form, finish_variant;
  std::string serial_form, serial_variant;
  bool one_pass = false;  // each block passed once by the finishing form's pieces (sequence.hpp hla2_fused_local)
  // With per-token gates: the chunked form that finishes each block (it takes gates), and the blocks are joined by
  // the operator's gated scan operator (fast/scan/gated.hpp); "" when the operator has no gated scan (hla3).
  std::string gated_finish_form = "", gated_finish_variant = "";
  // Each block passed once by the finishing form from zero, its rows then corrected by one product with the entering
  // state (sequence.hpp linear_corrected_local: an operator whose outputs take the entering state through q_tᵀ X).
  bool corrected_once = false;
};
inline const std::vector<DistributedPlan>& distributed_plan() {
  using scan::Variant;
  static const std::vector<DistributedPlan> plan{
      {"hla2", Variant::corrected, "chunked-fused", "corrected", "serial", "corrected", true, "chunked", "corrected"},
      {"ahla", Variant::corrected, "chunked", "paper", "serial", "paper", false, "chunked", "paper"},
      {"hla3", Variant::corrected, "chunked", "corrected", "serial", "corrected"},
      {"linear", Variant::paper, "chunked", "paper", "serial", "paper", false, "chunked", "paper", true},
  };
  return plan;
}
inline const std::vector<std::pair<std::string, CrossScan>>& distributed_forms() {
  // The default (no suffix) is the faster scan in `make bench-distributed` on this machine (README
  // "Beyond one machine": MPI_Exscan, for 3 of the 4 operators at P = 2); the other stays beside it.
  static const std::vector<std::pair<std::string, CrossScan>> forms{{"mpi-chunked", CrossScan::mpi_exscan},
                                                                    {"mpi-chunked-rd", CrossScan::recursive_doubling}};
  return forms;
}

}  // namespace hla::distributed
