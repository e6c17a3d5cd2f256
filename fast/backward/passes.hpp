// The backward passes by name, for the sweep engine (experiments/lib/sweep_backward.cpp) and the
// benchmarks (experiments/bench/backward.cpp):
//   serial        reverse mode through the serial recurrence, all n + 1 states stored      (recurrence.hpp)
//   checkpointed  the same with checkpoints every w tokens, each chunk recomputed           (recurrence.hpp)
//   scan          hla2 only: the ⊕* reverse scan with the carries at chunk boundaries       (hla2.hpp)
// Each differentiates the serial form of its operator: hla2 with the decay rule given (the scan needs the
// corrected rule, or γ = 1), ahla (Algorithm 2, §6.1 decay), linear.
#pragma once

#include <optional>
#include <string>

#include "fast/backward/ops.hpp"

namespace hla::backward {

enum class Pass { serial, checkpointed, scan };

inline const char* pass_name(Pass p) {
  switch (p) {
    case Pass::serial:
      return "serial";
    case Pass::checkpointed:
      return "checkpointed";
    case Pass::scan:
      return "scan";
  }
  return "?";
}
inline std::optional<Pass> parse_pass(const std::string& s) {
  for (Pass p : {Pass::serial, Pass::checkpointed, Pass::scan})
    if (s == pass_name(p)) return p;
  return std::nullopt;
}

// Which operators have a backward, and which of them a reverse scan (core/operators.hpp).
inline bool has_pass(const std::string& op, Pass p) {
  const OperatorInfo& o = operator_info(op);
  return p == Pass::scan ? o.scan_backward : o.backward;
}

// Runs one backward pass; `chunk` is w for checkpointed and scan (ignored by serial).
template <class T> Gradients<T> run_pass(const std::string& op, Pass pass, const Problem<T>& p, const Options& opt,
                                         const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                         fast::DecayRule rule, Eigen::Index chunk, BackwardStats* stats = nullptr) {
  if (!has_pass(op, pass))
    throw InputError(std::string("no ") + pass_name(pass) + " backward for operator '" + op +
                     "' (serial, checkpointed: " + operator_names([](const OperatorInfo& o) { return o.backward; }) +
                     "; scan: " + operator_names([](const OperatorInfo& o) { return o.scan_backward; }) + ")");
  if (pass != Pass::serial && chunk < 1) throw InputError("backward chunk width must be >= 1");
  const Eigen::Index w = pass == Pass::serial ? 0 : chunk;
  if (pass == Pass::scan) return hla2_scan_backward(p, opt, init, dO, rule, w, stats);
  return with_backward_ops<T>(op, opt, rule,
                              [&](const auto& ops) { return recurrence_backward(ops, p, init, dO, w, stats); });
}

}  // namespace hla::backward
