// Registers every backward pass for scalar T, once per (operator, pass), like the forms' register.hpp: the
// operator table's `backward` and `scan_backward` flags (core/operators.hpp) must name exactly these ([operators]
// in tests/test_operators.cpp checks it). Included only by generated/gradients_<scalar>.cpp (CMakeLists.txt).
#pragma once

#include "fast/backward/ahla.hpp"
#include "fast/backward/hla2.hpp"
#include "fast/backward/linear.hpp"
#include "fast/backward/passes.hpp"
#include "fast/backward/recurrence.hpp"

namespace hla::backward {

template <class T> void register_backward(BackwardRegistry<T>& r) {
  using P = Problem<T>;
  using S = NamedState<T>;
  // The serial and checkpointed passes: recurrence_backward over the operator's step operations (its Ops type).
  auto recurrence = [](auto make_ops) -> PassFn<T> {
    return
        [make_ops](const P& p, const Options& o, const S* init, const Mat<T>& dO, fast::DecayRule rule, Eigen::Index w,
                   BackwardStats* st) { return recurrence_backward(make_ops(o, rule), p, init, dO, w, st); };
  };
  const PassFn<T> hla2_ops = recurrence([](const Options& o, fast::DecayRule rule) { return Hla2Ops<T>(o, rule); });
  const PassFn<T> ahla_ops = recurrence([](const Options& o, fast::DecayRule) { return AhlaOps<T>(o); });
  const PassFn<T> linear_ops = recurrence([](const Options& o, fast::DecayRule) { return LinearOps<T>(o); });
  const std::string all = "reverse mode, all n + 1 states stored", ckpt = "reverse mode, checkpoints every w tokens";
  const PassCaps serial{}, checkpointed{.chunk = true};
  const PassCaps hla2_serial{.decay_rule = true}, hla2_checkpointed{.chunk = true, .decay_rule = true};
  const std::string hla2 = "§3.1 online updates; §4.3 decayed updates (the rule given); Alg. 1 (λ, normalize)";
  r.add({"hla2", Pass::serial, hla2 + ": " + all, hla2_serial, hla2_ops});
  r.add({"hla2", Pass::checkpointed, hla2 + ": " + ckpt, hla2_checkpointed, hla2_ops});
  r.add({"hla2",
         Pass::scan,
         "§4.2 \"Backward for gradients\": the reverse scan applying ⊕* of eq. 4.1 (decay-aware, the corrected ρ_B² "
         "on G_A), carries at chunk boundaries",
         {.chunk = true, .decay_rule = true, .corrected_decay = true},
         [](const P& p, const Options& o, const S* init, const Mat<T>& dO, fast::DecayRule rule, Eigen::Index w,
            BackwardStats* st) { return hla2_scan_backward<T>(p, o, init, dO, rule, w, st); }});
  const std::string ahla = "Alg. 2; §6.1 decay; Thm 6.1 normalizer";
  r.add({"ahla", Pass::serial, ahla + ": " + all, serial, ahla_ops});
  r.add({"ahla", Pass::checkpointed, ahla + ": " + ckpt, checkpointed, ahla_ops});
  const std::string linear = "§2.2 running sums, identity features";
  r.add({"linear", Pass::serial, linear + ": " + all, serial, linear_ops});
  r.add({"linear", Pass::checkpointed, linear + ": " + ckpt, checkpointed, linear_ops});
}

template <class T> const BackwardRegistry<T>& backward_registry() {
  static const BackwardRegistry<T> reg = [] {
    BackwardRegistry<T> r;
    register_backward(r);
    return r;
  }();
  return reg;
}

}  // namespace hla::backward
