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

// One sequence-parallel operator: its scan operator's variant, the form that finishes each block, and
// the serial form it must equal (`hla check` under mpirun holds it to that).
struct DistributedPlan {
  std::string op;
  scan::Variant scan_variant;
  std::string finish_form, finish_variant;
  std::string serial_form, serial_variant;
};
inline const std::vector<DistributedPlan>& distributed_plan() {
  using scan::Variant;
  static const std::vector<DistributedPlan> plan{
      {"hla2", Variant::corrected, "chunked", "corrected", "serial", "corrected"},
      {"ahla", Variant::corrected, "chunked", "paper", "serial", "paper"},
      {"hla3", Variant::corrected, "chunked", "corrected", "serial", "corrected"},
      {"linear", Variant::paper, "chunked", "paper", "serial", "paper"},
  };
  return plan;
}
inline const std::vector<std::pair<std::string, CrossScan>>& distributed_forms() {
  static const std::vector<std::pair<std::string, CrossScan>> forms{{"mpi-chunked", CrossScan::recursive_doubling},
                                                                     {"mpi-chunked-exscan", CrossScan::mpi_exscan}};
  return forms;
}

}  // namespace hla::distributed
