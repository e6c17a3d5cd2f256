// First-order linear attention as an associative scan operator (the baseline; §4 "Connection to linear
// attention"): a segment carries (S = Σ k vᵀ, z = Σ k), decayed to its end, and ρ = γ^{ℓ};
//   (A ⊕γ B) = (ρB SA + SB, ρB zA + zB, ρA ρB).
// Single-token segment: (k vᵀ, k, γ). Numbers per state: d·dv + d + 1.
#pragma once

#include "fast/scan/common.hpp"
#include "fast/serial/linear.hpp"

namespace hla::scan {

template <class T> struct LinearSeg {
  fast::LinearState<T> st;
  T rho{1};
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    fast::LinearState<T>::fields(s.st, visit);
    visit("rho", s.rho);
  }
  NamedState<T> named() const { return named_segment<LinearSeg, T>(*this); }
};

template <class T> class LinearOp {
 public:
  using Seg = LinearSeg<T>;
  using Serial = fast::LinearState<T>;
  LinearOp(const Options& o, Variant = Variant::paper) : ro_(o) {}

  Seg identity(Eigen::Index d, Eigen::Index dv) const { return {Serial::zero(d, dv), T(1)}; }

  Seg token(const TokenRows<T>& x) const {
    Seg s{Serial::zero(x.q.size(), x.v.size()), ro_.gamma};
    fast::linear_step(s.st, x.k, x.v, T(1));
    return s;
  }

  Seg combine(const Seg& A, const Seg& B) const {
    const T& b = B.rho;
    Seg r;
    r.st.S = scaled(b, A.st.S) + B.st.S;
    r.st.z = scaled(b, A.st.z) + B.st.z;
    r.rho = A.rho * B.rho;
    return r;
  }

  Seg prefix(Serial st) const { return {std::move(st), T(1)}; }  // ρ of a prefix reaches no part

  template <class Out> void read(const Seg& I, const TokenRows<T>& x, Eigen::Index t, Out&& out) const {
    fast::linear_output(I.st, x.q, ro_.normalized, ro_.eps, t, std::forward<Out>(out));
  }

  static std::size_t numbers(std::size_t d, std::size_t dv) { return d * dv + d + 1; }

 private:
  ReadOut<T> ro_;
};

}  // namespace hla::scan
