// Everything the claims ledger and the tests need to exercise the scan operators directly:
//   the operator types (Hla2Op, AhlaOp, Hla3TensorOp, Hla3MinimalOp, LinearOp),
//   scan::segment(op, problem, b, e)     the segment summary of rows [b, e),
//   op.combine(A, B), op.identity(d, dv) the operator and its identity,
//   scan::same_segment(A, B)             exact part-by-part equality,
//   Op::numbers(d, dv), seg.named()      numbers per segment state (formula / counted),
//   the drivers scan_fold / scan_blelloch / scan_twolevel, and `make_scan_op` by operator id.
#pragma once

#include "core/operators.hpp"
#include "fast/scan/ahla.hpp"
#include "fast/scan/drivers.hpp"
#include "fast/scan/hla2.hpp"
#include "fast/scan/hla3.hpp"
#include "fast/scan/linear.hpp"

namespace hla::scan {

// Bytes of one segment state when T has a fixed size (float, double, fp61); multiprecision numbers
// have heap-allocated limbs, so for them count `numbers` instead.
template <class Op, class T> std::size_t state_bytes(std::size_t d, std::size_t dv) {
  return Op::numbers(d, dv) * sizeof(T);
}

// Calls f(op) with the operator registered under (operator id, variant): the one place that maps names
// to operator types.
template <class T, class F> decltype(auto) with_scan_op(const std::string& op, Variant v, const Options& o, F&& f) {
  switch (op_id(op)) {
    case hla::OpId::hla2:
      return f(Hla2Op<T, true>(o, v));
    case hla::OpId::hla2_unmasked:
      return f(Hla2Op<T, false>(o, v));
    case hla::OpId::ahla:
      return f(AhlaOp<T>(o, v));
    case hla::OpId::hla3:
      return v == Variant::paper ? f(Hla3TensorOp<T>(o)) : f(Hla3MinimalOp<T>(o));
    case hla::OpId::linear:
      return f(LinearOp<T>(o));
    case hla::OpId::hla3_unmasked:
    case hla::OpId::softmax:
      break;
  }
  throw InputError("no scan operator for '" + op + "' (" +
                   operator_names([](const OperatorInfo& i) { return i.scan; }) + " have one)");
}

}  // namespace hla::scan
