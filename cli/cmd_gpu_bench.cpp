// `hla gpu-bench`: times one GPU form (fast/cuda/) on the device on inputs made there — B × H sequences of T tokens,
// d = K, dv = V, fixed γ or per-token gates — with CUDA events around each forward call (forward + backward with
// --backward) after a warm-up, and prints one JSON object: each rep's milliseconds, their median and minimum, tokens
// per second, what the form allocated on the device and the device's used memory at its highest, and the card, driver
// and runtime. scripts/bench-gpu.py drives it beside the PyTorch and fla peers (make bench-gpu, docs/gpu.md).
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/build_info.hpp"
#include "core/names.hpp"
#include "core/types.hpp"
#include "fast/cuda/device.hpp"

namespace hla::cli {
namespace {

struct GpuBenchArgs {
  std::string op = "hla2", products = "ieee", scalar = "float";
  int batch = 1, heads = 1, T = 65536, d = 64, dv = 64, chunk = 64, reps = 10;
  double gate_lo = 0, gamma = 1, eps = 0, ridge = 0;
  bool normalized = false, with_state = false, fused = false, backward = false;
  std::uint64_t seed = 1;
};

fast::cuda::GpuOp gpu_op(const std::string& name) {
  if (const auto op = fast::cuda::gpu_op_named(name)) return *op;
  throw InputError("gpu-bench: --op must be linear, hla2 or ahla (the operators with GPU forms), not '" + name + "'");
}

Products products_of(const std::string& name) {
  if (const auto p = try_parse<Products>(name)) return *p;
  throw InputError("gpu-bench: --products must be " + known_names<Products>() + ", not '" + name + "'");
}

template <class T> nlohmann::json run(const GpuBenchArgs& a) {
  if (!fast::cuda::device_available())
    throw InputError("gpu-bench: no CUDA device (" + fast::cuda::device_description() + ")");
  if (a.gamma <= 0 || a.gamma > 1 || a.gate_lo < 0 || a.gate_lo > 1 || a.eps < 0 || a.ridge < 0)
    throw InputError("gpu-bench: gamma in (0, 1], --gates-from in [0, 1], eps and ridge >= 0");
  if (a.ridge != 0 && a.op != "hla2") throw InputError("gpu-bench: --ridge is hla2's alone");
  fast::cuda::ForwardOptions o;
  o.normalized = a.normalized;
  o.eps = a.eps;
  o.ridge = a.ridge;
  o.chunk = a.fused ? fast::cuda::kFusedChunk : a.chunk;
  o.products = products_of(a.products);
  o.fused = a.fused;
  o.state = a.with_state;
  const long seqs = static_cast<long>(a.batch) * a.heads;
  if (seqs > 65535) throw InputError("gpu-bench: at most 65535 sequences (batch x heads)");
  fast::cuda::Timing t;
  try {
    t = fast::cuda::time_forward<T>(gpu_op(a.op), static_cast<int>(seqs), a.T, a.d, a.dv, a.gate_lo, a.gamma, o, a.reps,
                                    a.seed, a.backward);
  } catch (const std::invalid_argument& e) { throw InputError(std::string("gpu-bench: ") + e.what()); }
  std::vector<double> ms = t.ms;
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  return {{"op", a.op},
          {"form", std::string(a.fused ? "cuda-fused" : "cuda-chunked") +
                       (o.products == Products::ieee ? "" : "-" + a.products)},
          {"scalar", a.scalar},
          {"products", a.products},
          {"B", a.batch},
          {"H", a.heads},
          {"T", a.T},
          {"d", a.d},
          {"dv", a.dv},
          {"chunk", o.chunk},
          {"gated", a.gate_lo > 0},
          {"gates_from", a.gate_lo},
          {"gamma", a.gamma},
          {"normalized", a.normalized},
          {"ridge", a.ridge},
          {"state", a.with_state && !a.backward},
          {"pass", a.backward ? "forward+backward" : "forward"},
          {"reps", a.reps},
          {"ms", t.ms},
          {"ms_median", median},
          {"ms_min", ms.front()},
          {"tokens_per_s", static_cast<double>(seqs) * a.T / (median * 1e-3)},
          {"device_bytes", t.device_bytes},
          {"peak_bytes_used", t.peak_bytes_used},
          {"device", fast::cuda::device_description()},
          {"commit", build_info::source_tree()}};
}

const CommandRegistrar gpu_bench_registrar([](CLI::App& app) {
  auto a = std::make_shared<GpuBenchArgs>();
  auto* sub = app.add_subcommand("gpu-bench", "Time a GPU form (cuda-chunked*) on the device (JSON on stdout)");
  sub->add_option("--op", a->op, "operator: linear, hla2, ahla");
  sub->add_option("--products", a->products, "ieee (the scalar's own), tf32 or bf16 (tensor cores)");
  sub->add_option("--scalar", a->scalar, "float or double")->check(CLI::IsMember({"float", "double"}));
  sub->add_option("--batch", a->batch, "B: batch size")->check(CLI::Range(1, 65535));
  sub->add_option("--heads", a->heads, "H: heads (B x H independent sequences)")->check(CLI::Range(1, 65535));
  sub->add_option("--T", a->T, "tokens per sequence")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--d", a->d, "key width K")->check(CLI::Range(1, 1024));
  sub->add_option("--dv", a->dv, "value width V")->check(CLI::Range(1, 1024));
  sub->add_option("--chunk", a->chunk, "chunk width")->check(CLI::Range(1, 1024));
  sub->add_option("--reps", a->reps, "timed repeats after one warm-up")->check(CLI::Range(1, 1000));
  sub->add_option("--gates-from", a->gate_lo, "per-token gates uniform in [LO, 1] (0: none, the fixed --gamma)");
  sub->add_option("--gamma", a->gamma, "fixed decay when there are no gates");
  sub->add_flag("--normalized", a->normalized, "divide by the normalizer + eps");
  sub->add_option("--eps", a->eps, "normalizer stabilizer");
  sub->add_option("--ridge", a->ridge, "ridge lambda (hla2)");
  sub->add_flag("--state", a->with_state, "also compute the final state");
  sub->add_flag("--backward", a->backward, "time forward + backward (dq, dk, dv, and dgamma with gates)");
  sub->add_flag("--fused", a->fused, "the fused kernels (cuda-fused*, chunks of 64) instead of the cuBLAS products");
  sub->add_option("--seed", a->seed, "input seed");
  sub->callback([a] {
    const nlohmann::json j = a->scalar == "double" ? run<double>(*a) : run<float>(*a);
    fmt::print("{}\n", j.dump());
  });
});

}  // namespace
}  // namespace hla::cli
