// Google Benchmark entries for the backward passes (fast/backward/), in double, against the forward
// serial form on the same inputs: time vs n at d = dv = 16.
//
//   backward/<op>/<path>/double/n:<n>/d:<d>/dv:<dv>[/w:<w>]
//     path  forward   the serial forward form alone (the yardstick)
//           serial    reverse mode, all n + 1 states stored           memory O(n·|X|)
//           chunked   reverse mode, checkpoints every w tokens        memory O((n/w + w)·|X|), one extra forward
//           scan      hla2 only: the ⊕* reverse scan (fast/backward/hla2.hpp), O(n·d²·dv)
//   counters tokens_per_s, state_numbers_kept (states held at the peak of the backward × numbers per state)
//
// Registered at static initialization; the main is experiments/bench/bench_main.cpp.
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include "core/inputs.hpp"
#include "fast/backward/ahla.hpp"
#include "fast/backward/hla2.hpp"
#include "fast/backward/linear.hpp"

using namespace hla;

namespace {

enum class Path { forward, serial, chunked, scan };

template <class T> struct Inputs {
  Problem<T> p;
  Mat<T> dO;
  Inputs(Eigen::Index n, Eigen::Index d, Eigen::Index dv) {
    p = convert_problem<T>(gaussian_problem({n, d, dv}, 1));
    dO = convert_problem<T>(gaussian_problem({n, d, dv}, 2)).V;
  }
};

template <class T>
backward::Gradients<T> run_backward(const std::string& op, const Inputs<T>& in, const Options& o, Path path, Eigen::Index w) {
  const Eigen::Index chunk = path == Path::serial ? 0 : w;
  if (op == "hla2") {
    if (path == Path::scan) return backward::hla2_scan_backward(in.p, o, nullptr, in.dO, fast::DecayRule::corrected, w);
    return backward::hla2_backward(in.p, o, nullptr, in.dO, fast::DecayRule::corrected, chunk);
  }
  if (op == "ahla") return backward::recurrence_backward(backward::AhlaOps<T>(o), in.p, nullptr, in.dO, chunk);
  return backward::recurrence_backward(backward::LinearOps<T>(o), in.p, nullptr, in.dO, chunk);
}

template <class T> Run<T> run_forward(const std::string& op, const Inputs<T>& in, const Options& o) {
  if (op == "hla2") return fast::hla2_serial<T, true>(in.p, o, nullptr, fast::DecayRule::corrected);
  if (op == "ahla") return fast::ahla_serial<T>(in.p, o, nullptr);
  return fast::linear_serial<T>(in.p, o, nullptr);
}

void bench_backward(benchmark::State& state, const std::string& op, Path path, Eigen::Index n, Eigen::Index d, Eigen::Index w) {
  const Inputs<double> in(n, d, d);
  Options o;
  o.gamma = rational(63, 64);
  o.normalized = true;
  o.eps = rational(1);
  for (auto _ : state) {
    if (path == Path::forward) {
      Run<double> r = run_forward(op, in, o);
      benchmark::DoNotOptimize(r.O.data());
    } else {
      backward::Gradients<double> g = run_backward(op, in, o, path, w);
      benchmark::DoNotOptimize(g.dQ.data());
    }
    benchmark::ClobberMemory();
  }
  const double states = path == Path::serial ? double(n + 1) : path == Path::forward ? 1.0 : double((n + w - 1) / w + w + 1);
  const Eigen::Index dv = d;
  const double numbers = op == "hla2"   ? double(d * d + 2 * d * dv + 2 * d)  // S, C, m, G, h
                         : op == "ahla" ? double(2 * d * dv + 2 * d)          // P, m, E, n
                                        : double(d * dv + d);                 // S, z
  state.counters["tokens_per_s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["state_numbers_kept"] = states * numbers;
}

const bool registered = [] {
  const Eigen::Index d = 16, w = 64;
  const char* names[] = {"forward", "serial", "chunked", "scan"};
  for (const std::string op : {"hla2", "ahla", "linear"})
    for (const Path path : {Path::forward, Path::serial, Path::chunked, Path::scan}) {
      if (path == Path::scan && op != "hla2") continue;
      for (Eigen::Index n = 1024; n <= (path == Path::scan ? 4096 : 16384); n *= 4) {
        std::string name = fmt::format("backward/{}/{}/double/n:{}/d:{}/dv:{}", op, names[int(path)], n, d, d);
        if (path == Path::chunked || path == Path::scan) name += fmt::format("/w:{}", w);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_backward(s, op, path, n, d, w); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
    }
  return true;
}();

}  // namespace
