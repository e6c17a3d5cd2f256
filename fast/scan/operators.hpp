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

// Each operator is compiled once per scalar, in generated/register_scan_<scalar>.cpp (the kind's hook in
// fast/scan/register.hpp, CMakeLists.txt); every other unit that includes this header (the distributed forms,
// the claims, verify, the CLI, the tests) calls that copy instead of compiling its own: docs/build.md "Sixth
// pass". A program built without the library (tests/tsan) instantiates the ones it uses itself.
#define HLA_SCAN_OPERATORS(EXTERN, T)       \
  EXTERN template struct Hla2Seg<T, true>;  \
  EXTERN template struct Hla2Seg<T, false>; \
  EXTERN template class Hla2Op<T, true>;    \
  EXTERN template class Hla2Op<T, false>;   \
  EXTERN template struct AhlaSeg<T>;        \
  EXTERN template class AhlaOp<T>;          \
  EXTERN template struct Hla3TensorSeg<T>;  \
  EXTERN template class Hla3TensorOp<T>;    \
  EXTERN template struct Hla3MinimalSeg<T>; \
  EXTERN template class Hla3MinimalOp<T>;   \
  EXTERN template struct LinearSeg<T>;      \
  EXTERN template class LinearOp<T>;
namespace hla::scan {
HLA_SCAN_OPERATORS(extern, rational)
HLA_SCAN_OPERATORS(extern, fp61)
HLA_SCAN_OPERATORS(extern, mpfr256)
HLA_SCAN_OPERATORS(extern, double)
HLA_SCAN_OPERATORS(extern, float)
}  // namespace hla::scan
