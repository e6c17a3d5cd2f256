// Google Benchmark entries for the registered backward passes (fast/backward/passes.hpp), in float and double,
// against the forward serial form on the same inputs: time and stored-state memory vs n at d = dv = 16.
//
//   backward/<op>/<path>/<scalar>/n:<n>/d:<d>/dv:<dv>[/w:<w>]
//     path  forward        the serial forward form alone (the yardstick)
//           serial         reverse mode, all n + 1 states stored           memory O(n·|X|)
//           checkpointed   reverse mode, checkpoints every w tokens        memory O((n/w + w)·|X|), one extra forward
//           scan           hla2 only: the ⊕* reverse scan (fast/backward/hla2.hpp), O(n·d²·dv)
//   counters tokens_per_s; for the backward paths, as the pass reports them (BackwardStats):
//            checkpoints (states held through the pass), stored_states (most states alive at once),
//            stored_bytes (stored_states × numbers per state × sizeof scalar)
//
// The sweep engine measures the same passes with peak RSS and gradient errors: configs/backward.toml.
// Registered at static initialization; the main is experiments/bench/bench_main.cpp.
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "numerics/gradient_checks.hpp"  // the passes' registry, compiled once per scalar

using namespace hla;

namespace {

template <class T> struct Inputs {
  Problem<T> p;
  Mat<T> dO;
  Inputs(Eigen::Index n, Eigen::Index d, Eigen::Index dv) {
    p = convert_problem<T>(gaussian_problem({n, d, dv}, 1));
    dO = convert_problem<T>(gaussian_problem({n, d, dv}, 2)).V;
  }
};

template <class T> Run<T> run_forward(const std::string& op, const Inputs<T>& in, const Options& o) {
  return registry<T>().find_exact(op, "serial")(in.p, o);
}

// path: nullopt = the forward.
template <class T> void bench_backward(benchmark::State& state, const std::string& op,
                                       std::optional<backward::Pass> path, Eigen::Index n, Eigen::Index d,
                                       Eigen::Index w) {
  const Inputs<T> in(n, d, d);
  Options o;
  o.gamma = rational(63, 64);
  o.normalized = true;
  o.eps = rational(1);
  backward::BackwardStats st;
  for (auto _ : state) {
    if (!path) {
      Run<T> r = run_forward(op, in, o);
      benchmark::DoNotOptimize(r.O.data());
    } else {
      backward::Gradients<T> g =
          backward::run_pass(op, *path, in.p, o, nullptr, in.dO, fast::DecayRule::corrected, w, &st);
      benchmark::DoNotOptimize(g.dQ.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["tokens_per_s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  if (path) {
    state.counters["checkpoints"] = double(st.checkpoints);
    state.counters["stored_states"] = double(st.peak_states);
    state.counters["stored_bytes"] = double(st.peak_numbers() * sizeof(T));
  }
}

template <class T> void register_scalar(const char* scalar) {
  const Eigen::Index d = 16, w = 64;
  using backward::Pass;
  for (const OperatorInfo& info : kOperators)
    for (const std::optional<Pass> path : {std::optional<Pass>(), std::optional(Pass::serial),
                                           std::optional(Pass::checkpointed), std::optional(Pass::scan)}) {
      const std::string op(info.name);
      if (!info.backward || (path && !backward::has_pass(op, *path))) continue;
      for (Eigen::Index n = 1024; n <= (path == Pass::scan ? 4096 : 16384); n *= 4) {
        std::string name =
            fmt::format("backward/{}/{}/{}/n:{}/d:{}/dv:{}", op, path ? name_of(*path) : "forward", scalar, n, d, d);
        if (path && backward::backward_registry<T>().find(op, *path).caps.chunk) name += fmt::format("/w:{}", w);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& s) { bench_backward<T>(s, op, path, n, d, w); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
    }
}

const bool registered = [] {
  register_scalar<double>("double");
  register_scalar<float>("float");
  return true;
}();

}  // namespace
