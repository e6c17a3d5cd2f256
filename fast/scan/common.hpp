// What every scan operator shares: the read-out options, the operator "concept", and the generic helpers
// the claims ledger uses to test associativity on random multi-token segments (segment summary of rows
// [b, e), exact equality of two segment states, numbers per state).
//
// An operator Op (one per family and variant, in fast/scan/<family>.hpp) provides
//   using Seg                      a segment state; Seg::st is the serial form's state struct
//                                  (fast/serial/*.hpp), so an inclusive segment from the start of the
//                                  sequence IS the serial state and is read out by the serial read-out
//   Seg identity(d, dv)            the zero-length segment
//   Seg token(q, k, v)             the single-token segment (inclusive of the token's own diagonal terms)
//   Seg combine(A, B)              A ⊕ B, A precedes B in time
//   Seg prefix(serial_state)       an initial state as a prefix segment (see each header for its ρ)
//   void read(I, q, t, out)        the output of token t from its inclusive state I (serial read-out)
//   static size_t numbers(d, dv)   numbers per segment state (the formula; Seg::named() counts them)
#pragma once

#include <exception>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/state.hpp"

namespace hla::scan {

// The read-out options every operator needs (converted once into T).
template <class T> struct ReadOut {
  T gamma, lambda, eps;
  bool normalized;
  explicit ReadOut(const Options& o)
      : gamma(from_rational<T>(o.gamma)),
        lambda(from_rational<T>(o.ridge)),
        eps(from_rational<T>(o.eps)),
        normalized(o.normalized) {}
};

// Which printed formula an operator follows.
enum class Variant { paper, corrected };
inline const char* variant_name(Variant v) { return v == Variant::paper ? "paper" : "corrected"; }

// ρ-scaling that skips the multiply when ρ = 1 (γ = 1): then ρB X + Y is literally the undecayed X + Y.
template <class T> Mat<T> scaled(const T& rho, const Mat<T>& X) { return rho == T(1) ? X : Mat<T>(rho * X); }

// A token's rows as the column vectors / row vector the serial steps take, and its index in the problem (a
// gated operator, fast/scan/gated.hpp, reads the token's own gate γ_t by it).
template <class T> struct TokenRows {
  ColVec<T> q, k;
  RowVec<T> v;
  Eigen::Index t;
  TokenRows(const Problem<T>& p, Eigen::Index t)
      : q(p.Q.row(t).transpose()), k(p.K.row(t).transpose()), v(p.V.row(t)), t(t) {}
};

// The summary of rows [b, e) of a problem: the left fold T_b ⊕ … ⊕ T_{e−1} of its token segments (for an
// associative operator every bracketing gives the same; for a non-associative printed one this is the
// serial reading). The identity for b = e.
template <class Op, class T>
typename Op::Seg segment(const Op& op, const Problem<T>& p, Eigen::Index b, Eigen::Index e) {
  if (b >= e) return op.identity(p.d(), p.dv());
  typename Op::Seg s = op.token(TokenRows<T>(p, b));
  for (Eigen::Index t = b + 1; t < e; ++t) s = op.combine(s, op.token(TokenRows<T>(p, t)));
  return s;
}

// A segment lists its parts once, in `Seg::fields(seg, visit)`: the serial state's parts, then the
// segment-only parts — matrices, or a scalar such as ρ (visited as a T). Its named parts (equality, counting,
// printing counterexamples) and its serialization across ranks (mpi/codec.hpp) derive from it.
template <class Seg, class T> NamedState<T> named_segment(const Seg& s) {
  NamedState<T> n;
  Seg::fields(s, [&](const char* name, const auto& part) {
    if constexpr (std::is_same_v<std::decay_t<decltype(part)>, T>)
      n.parts.emplace_back(name, scalar_part(part));
    else
      n.parts.emplace_back(name, part);
  });
  return n;
}

// Exact equality of two matrices, of two named states (part names, shapes, entries), of two segments.
template <class T> bool same_matrix(const Mat<T>& x, const Mat<T>& y) {
  if (x.rows() != y.rows() || x.cols() != y.cols()) return false;
  for (Eigen::Index j = 0; j < x.size(); ++j)
    if (!(x(j) == y(j))) return false;
  return true;
}
template <class T> bool same_named(const NamedState<T>& a, const NamedState<T>& b) {
  if (a.parts.size() != b.parts.size()) return false;
  for (std::size_t i = 0; i < a.parts.size(); ++i)
    if (a.parts[i].first != b.parts[i].first || !same_matrix(a.parts[i].second, b.parts[i].second)) return false;
  return true;
}
template <class Seg> bool same_segment(const Seg& a, const Seg& b) { return same_named(a.named(), b.named()); }

// Every part of a named state, stacked into one column, so two states compare entry by entry.
template <class T> Mat<T> stacked_parts(const NamedState<T>& s) {
  Mat<T> out(static_cast<Eigen::Index>(s.numbers()), 1);
  Eigen::Index at = 0;
  for (const auto& [k, m] : s.parts)
    for (Eigen::Index i = 0; i < m.size(); ++i) out(at++, 0) = m(i);
  return out;
}

// The monoid laws of an operator on segments A = [0, n/3), B = [n/3, 2n/3), C = [2n/3, n) of p (multi-token
// once n ≥ 6): ((A⊕B)⊕C ; E⊕A ; A⊕E) against (A⊕(B⊕C) ; A ; A), every state part stacked.
template <class Op, class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const Op& op, const Problem<T>& p) {
  const Eigen::Index n = p.n(), a = n / 3, b = (2 * n) / 3;
  const auto A = segment(op, p, 0, a), B = segment(op, p, a, b), C = segment(op, p, b, n);
  const auto E = op.identity(p.d(), p.dv());
  const Mat<T> l1 = stacked_parts(op.combine(op.combine(A, B), C).named()),
               r1 = stacked_parts(op.combine(A, op.combine(B, C)).named());
  const Mat<T> l2 = stacked_parts(op.combine(E, A).named()), l3 = stacked_parts(op.combine(A, E).named()),
               r2 = stacked_parts(A.named());
  Mat<T> lhs(l1.rows() + 2 * l2.rows(), 1), rhs(l1.rows() + 2 * l2.rows(), 1);
  lhs << l1, l2, l3;
  rhs << r1, r2, r2;
  return {lhs, rhs};
}

// Runs body(i) for i in [0, count) on `threads` OpenMP threads (static schedule: which thread runs an
// index never changes what is computed). An exception inside the loop (e.g. a vanishing normalizer) is
// carried out of the parallel region and rethrown, never left to terminate the process.
template <class Body> void parallel_for(Eigen::Index count, int threads, Body&& body) {
  std::exception_ptr error;
  std::mutex guard;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && count > 1)
  for (Eigen::Index i = 0; i < count; ++i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(guard);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hla::scan
