// The backward passes, registered like the forms: one entry per (operator, pass), each saying what it
// differentiates (fast/backward/register.hpp registers them; generated/gradients_<scalar>.cpp, CMakeLists.txt,
// builds the registry once per scalar). The sweep engine (experiments/lib/sweep_backward.cpp), the benchmarks
// (experiments/bench/backward.cpp) and the gradient checks (numerics/gradient_checks.hpp) run them by name:
//   serial        reverse mode through the serial recurrence, all n + 1 states stored      (recurrence.hpp)
//   checkpointed  the same with checkpoints every w tokens, each chunk recomputed           (recurrence.hpp)
//   scan          hla2 only: the ⊕* reverse scan with the carries at chunk boundaries       (hla2.hpp)
// Each differentiates the serial form of its operator: hla2 with the decay rule given (the scan needs the
// corrected rule, or γ = 1), ahla (Algorithm 2, §6.1 decay), linear.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/names.hpp"
#include "fast/backward/ops.hpp"

namespace hla::backward {

enum class Pass { serial, checkpointed, scan };

constexpr NameTable<Pass, 3> name_table(Pass) {
  return {"backward pass", {{{Pass::serial, "serial"}, {Pass::checkpointed, "checkpointed"}, {Pass::scan, "scan"}}}};
}

// What a pass takes beyond (Q, K, V, X_0, dO) and the options of its serial form.
struct PassCaps {
  bool chunk = false;            // uses the chunk width w (checkpoints every w tokens); a pass without ignores it
  bool decay_rule = false;       // differentiates the serial form with the decay rule given (hla2's §4.3 rule)
  bool corrected_decay = false;  // with γ < 1, the serial form's derivative only under the corrected rule
};

// (problem, options, initial state or nullptr, dO, decay rule, w (0 when the pass takes no chunk), stats or nullptr).
template <class T> using PassFn =
    std::function<Gradients<T>(const Problem<T>&, const Options&, const NamedState<T>*, const Mat<T>&, fast::DecayRule,
                               Eigen::Index, BackwardStats*)>;

template <class T> struct BackwardEntry {
  std::string op;  // operator id (core/operators.hpp)
  Pass pass;
  std::string cite;  // what it differentiates, and where the paper has it
  PassCaps caps;
  PassFn<T> fn;
  std::string key() const { return op + "/" + name_of(pass); }
};

template <class T> class BackwardRegistry {
 public:
  void add(BackwardEntry<T> e) {
    if (!find_operator(e.op)) throw std::logic_error(e.key() + ": the operator has no row in core/operators.hpp");
    if (try_find(e.op, e.pass)) throw std::logic_error("backward registered twice: " + e.key());
    entries_.push_back(std::move(e));
  }
  const std::vector<BackwardEntry<T>>& entries() const { return entries_; }
  const BackwardEntry<T>* try_find(const std::string& op, Pass pass) const {
    for (const BackwardEntry<T>& e : entries_)
      if (e.op == op && e.pass == pass) return &e;
    return nullptr;
  }
  // An unknown operator, or an (op, pass) not registered, is an InputError naming what exists.
  const BackwardEntry<T>& find(const std::string& op, Pass pass) const {
    (void)operator_info(op);
    if (const BackwardEntry<T>* e = try_find(op, pass)) return *e;
    auto with = [&](Pass p) {
      return operator_names([&](const OperatorInfo& o) { return try_find(std::string(o.name), p) != nullptr; });
    };
    throw InputError("no " + name_of(pass) + " backward for operator '" + op + "' (serial: " + with(Pass::serial) +
                     "; checkpointed: " + with(Pass::checkpointed) + "; scan: " + with(Pass::scan) + ")");
  }

 private:
  std::vector<BackwardEntry<T>> entries_;
};

// The process-wide registry of backward passes for scalar T, built on first use (fast/backward/register.hpp;
// instantiated for each scalar in generated/gradients_<scalar>.cpp only).
template <class T> const BackwardRegistry<T>& backward_registry();

// Whether op has the pass; every scalar registers the same passes (one template, register_backward). An unknown
// operator is an InputError.
inline bool has_pass(const std::string& op, Pass p) {
  (void)operator_info(op);
  return backward_registry<double>().try_find(op, p) != nullptr;
}

// Runs one backward pass; `chunk` is w for the passes that take one (checkpointed and scan; ignored by serial).
template <class T> Gradients<T> run_pass(const std::string& op, Pass pass, const Problem<T>& p, const Options& opt,
                                         const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                         fast::DecayRule rule, Eigen::Index chunk, BackwardStats* stats = nullptr) {
  const BackwardEntry<T>& e = backward_registry<T>().find(op, pass);
  if (e.caps.chunk && chunk < 1) throw InputError("backward chunk width must be >= 1");
  return e.fn(p, opt, init, dO, rule, e.caps.chunk ? chunk : 0, stats);
}

}  // namespace hla::backward
