// Gated scan operators (SPEC "Gated (data-dependent) decay": a segment's summary carries ρ = Π γ_t over the
// segment where the fixed-γ monoids carry γ^len).
//
// The decay-aware combines of hla2.hpp (corrected: G = ρB² GA + GB + SB(ρB CA)), ahla.hpp (corrected:
// undecayed R) and linear.hpp read a segment's decay only through its ρ, never through γ: a gated segment is
// the same segment with ρ = Π_{t∈X} γ_t. So the gated operator is the fixed-γ operator whose single-token
// segment carries the token's own gate, ρ = γ_t; combine, identity, prefix and read-out are unchanged, and
// every driver (fast/scan/drivers.hpp) runs it as is.
#pragma once

#include <utility>

#include "core/operators.hpp"
#include "fast/scan/common.hpp"
#include "fast/scan/operators.hpp"  // the operators, and their one compiled copy per scalar

namespace hla::scan {

template <class Op> class GatedOp : public Op {
 public:
  using Seg = typename Op::Seg;
  using T = typename std::decay_t<decltype(std::declval<Seg>().rho)>;
  // `gates` must outlive the operator; gates(t) belongs to row t of the problem the drivers are given.
  GatedOp(Op op, const ColVec<T>& gates) : Op(std::move(op)), gates_(&gates) {}

  Seg token(const TokenRows<T>& x) const {
    Seg s = Op::token(x);  // the token's deltas, computed undecayed
    s.rho = (*gates_)(x.t);
    return s;
  }

 private:
  const ColVec<T>* gates_;
};

// The registered variant whose operator is exact for every ρ, so that it takes gates: hla2 and ahla's
// corrected combines (the printed ones fail with decay), linear's one operator. Empty: no gated scan.
inline std::string gated_scan_variant(const std::string& op) {
  switch (op_id(op)) {
    case hla::OpId::hla2:
    case hla::OpId::ahla:
      return "corrected";
    case hla::OpId::linear:
      return "paper";
    case hla::OpId::hla2_unmasked:
    case hla::OpId::hla3:
    case hla::OpId::hla3_unmasked:
    case hla::OpId::softmax:
      break;
  }
  return "";
}

// Calls f with the gated scan operator of `op` (the operator of gated_scan_variant(op), its tokens carrying
// their own gates); `o` holds the read-out options (ε, λ, normalized).
template <class T, class F>
decltype(auto) with_gated_scan_op(const std::string& op, const Options& o, const ColVec<T>& gates, F&& f) {
  switch (op_id(op)) {
    case hla::OpId::hla2:
      return f(GatedOp<Hla2Op<T, true>>({o, Variant::corrected}, gates));
    case hla::OpId::ahla:
      return f(GatedOp<AhlaOp<T>>({o, Variant::corrected}, gates));
    case hla::OpId::linear:
      return f(GatedOp<LinearOp<T>>(LinearOp<T>(o), gates));
    case hla::OpId::hla2_unmasked:
    case hla::OpId::hla3:
    case hla::OpId::hla3_unmasked:
    case hla::OpId::softmax:
      break;
  }
  throw InputError("no gated scan operator for '" + op + "'");
}

}  // namespace hla::scan
