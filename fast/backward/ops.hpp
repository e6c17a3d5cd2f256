// The reverse-mode step operations of each operator with a backward (core/operators.hpp `backward`), chosen by
// name in one place for the gated passes (gated.hpp); the serial and checkpointed passes are registered with the
// same Ops types (register.hpp). All of them run through recurrence_backward.
#pragma once

#include <string>

#include "core/operators.hpp"
#include "fast/backward/ahla.hpp"
#include "fast/backward/hla2.hpp"
#include "fast/backward/linear.hpp"

namespace hla::backward {

// Calls f with op's step operations (hla2's with the given decay rule); an operator without a backward is an
// InputError naming those that have one.
template <class T, class F>
decltype(auto) with_backward_ops(const std::string& op, const Options& opt, fast::DecayRule rule, F&& f) {
  switch (op_id(op)) {
    case OpId::hla2:
      return f(Hla2Ops<T>(opt, rule));
    case OpId::ahla:
      return f(AhlaOps<T>(opt));
    case OpId::linear:
      return f(LinearOps<T>(opt));
    case OpId::hla2_unmasked:
    case OpId::hla3:
    case OpId::hla3_unmasked:
    case OpId::softmax:
      break;
  }
  throw InputError("no backward for operator '" + op + "' (" +
                   operator_names([](const OperatorInfo& o) { return o.backward; }) + ")");
}

}  // namespace hla::backward
