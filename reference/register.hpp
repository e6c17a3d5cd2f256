// Registers every reference (SPEC's literal sums) for scalar T.
#pragma once

#include "core/registry.hpp"
#include "reference/gated.hpp"
#include "reference/second_order.hpp"
#include "reference/third_order.hpp"

namespace hla {

template <class T> void register_reference(Registry<T>& r) {
  namespace ref = hla::reference;
  auto add = [&](std::string op, std::string cite, Caps caps, auto fn) {
    r.add({std::move(op), "reference", "spec", std::move(cite), caps,
           [fn](const Problem<T>& p, const Options& o, const NamedState<T>*) { return fn(p, o); }});
  };
  const Caps second{.decay = true, .normalized = true, .ridge = true};
  add("hla2", "SPEC hla2 (masked); §3.1", second,
      [](const Problem<T>& p, const Options& o) { return ref::hla2(p, o, true); });
  add("hla2-unmasked", "SPEC hla2-unmasked; eq. 3.1", second,
      [](const Problem<T>& p, const Options& o) { return ref::hla2(p, o, false); });
  add("ahla", "SPEC ahla; eq. 6.1", {.decay = true, .normalized = true}, ref::ahla<T>);
  add("hla3", "SPEC hla3; proof of Thm 7.1", {.normalized = true}, ref::hla3<T>);
  add("hla3-unmasked", "SPEC hla3-unmasked; §7.1", {.normalized = true}, ref::hla3_unmasked<T>);
  add("linear", "SPEC linear (identity features)", {.decay = true, .normalized = true}, ref::linear<T>);
  if constexpr (has_exp_v<T>) add("softmax", "SPEC softmax; §2.1", {}, ref::softmax<T>);

  // Per-token gates (reference/gated.hpp): the same literal sums with the gate products Γ(t, s) as their decay.
  auto gates = [&](std::string op, std::string cite, auto fn) {
    r.add_gates(op, "reference", "spec", std::move(cite),
                [fn](const Problem<T>& p, const Options& o, const NamedState<T>*) { return fn(split_gates(p), o); });
  };
  gates("hla2", "SPEC gated hla2: Γ(t,i)Γ(t,j) in place of γ^(2t−i−j)",
        [](const GatedProblem<T>& g, const Options& o) { return ref::gated_hla2<T>(g, o, true); });
  gates("hla2-unmasked", "hla2-unmasked with Γ(t,i)Γ(t,j): the gated masked operator's absolute operator",
        [](const GatedProblem<T>& g, const Options& o) { return ref::gated_hla2<T>(g, o, false); });
  gates("ahla", "SPEC gated ahla: Γ(t,j) in place of γ^(t−j)", ref::gated_ahla<T>);
  gates("linear", "SPEC gated linear: Γ(t,j) in place of γ^(t−j)", ref::gated_linear<T>);
}

}  // namespace hla
