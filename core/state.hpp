// Typed operator states ↔ NamedState. A state struct lists its parts once, in `fields(state, visit)`;
// everything else (zero init, loading an initial state with shape checks, exporting, byte counts) is
// derived from that list.
#pragma once

#include "core/types.hpp"

namespace hla {

template <class State, class T> NamedState<T> export_state(const State& s) {
  NamedState<T> out;
  State::fields(s, [&](const char* name, const Mat<T>& m) { out.parts.emplace_back(name, m); });
  return out;
}

// The zero state of shape (d, dv), or `init` after checking that it has exactly this state's parts
// and shapes (a state from another operator or another d is a clear error).
template <class State, class T> State load_state(const NamedState<T>* init, Eigen::Index d, Eigen::Index dv) {
  State s = State::zero(d, dv);
  if (!init) return s;
  std::size_t count = 0;
  State::fields(s, [&](const char* name, Mat<T>& m) {
    m = state_part(*init, name, m.rows(), m.cols());
    ++count;
  });
  if (count != init->parts.size())
    throw InputError("initial state has " + std::to_string(init->parts.size()) + " parts, this form's state has " +
                     std::to_string(count) + " (a state from another operator?)");
  return s;
}

// Scalar-valued state parts (a segment's attenuation ρ) are stored as 1×1 matrices.
template <class T> Mat<T> scalar_part(const T& v) { return Mat<T>::Constant(1, 1, v); }

}  // namespace hla
