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

#include "fast/scan/common.hpp"

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

}  // namespace hla::scan
