// Google Benchmark for the fast forms: every registered non-reference form of the float and double
// registries (iterated, not hard-coded, so new forms are benchmarked). The machine's limits — every GEMM
// library's 1024² product (the rooflines), the chunk form's own product shapes, the peak FMA rate, the
// clock and the cache bandwidth — are registered by experiments/bench/gemm_libraries.cpp.
//
//   names     <operator>/<form>/<scalar>/n:<n>/d:<d>/dv:<dv>/threads:<t>   (variant: the registry's one per
//             (op, form); a second variant of the same form gets "/<variant>" after the form)
//             roofline/<library>/<scalar>/threads:<t>, gemm/..., peak/..., bandwidth/... (gemm_libraries.cpp)
//             hla2/chunked-multiquery/.../heads:4 and <op>/<form>-multihead/.../heads:4 (§5.2; all heads counted)
//             ceiling/<operator>/<form>/<scalar>/n/d/dv/threads:2: the form's two halves at once, nothing shared
//             (bench_two_core_ceiling below: what the threads:2 entry is read against beside threads:1)
//             <op>/<form>/.../threads:<t>/gates:range:0.8,1 and <op>/chunked/.../threads:<t>/gamma:0.9: the gated
//             chunked forms and their fixed-γ siblings at the gates' mean decay (register_gated below)
//             <op>/<form>/.../threads:1/w:<w>: the threaded chunked forms at other chunk widths (register_widths)
//             phase/hla2/chunked-fused/{summary,carry}/...: the block schedule's two extra products; .../products/
//             .../threads:1/w:<w>: the chunk loop's products alone (register_fused_phases)
//   timed     a form's outputs only (Options::state = false, since run 11: what the PyTorch peer computes, and
//             what a forward pass that carries no state on asks for); hla2's chunked forms then skip C
//   counters  tokens_per_s; gflops = useful flops / s, with useful flops counted by the *serial* formula
//             per token (useful_flops_per_token below), whatever the form actually executes; chunk
//
// Threads: the threaded entries (forms, gated, multi-head, multi-query), the rooflines and the peak FMA rate run at
// each count of HLA_BENCH_THREADS (bench_threads below; default "1 2"); the ceiling/ entries stay at two threads.
// Sets: the default one (n = 65536, d = dv = 64) — scripts/bench.sh filters it further;
// HLA_BENCH_FULL=1 (or --full) adds n = 2^10, 2^12, ..., 2^20 and d = dv ∈ {16, 64, 128}. Chunk width from
// HLA_BENCH_CHUNK (default 48: a multiple of the rows of Eigen's AVX2 GEMM micro-tile for both scalars, 12
// doubles and 24 floats, so the w-row products take no narrow remainder pass; at n = 65536, d = dv = 64 it
// timed 5–15% faster than w = 64 in float and double, see results/chunked).
// The process keeps freed memory for reuse (core/alloc_policy.hpp), so the forms' outputs are timed like
// the roofline's preallocated product: not page-faulted in afresh from the OS on every iteration.
#include <benchmark/benchmark.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>
#include "core/eigen.hpp"

#include "core/alloc_policy.hpp"
#include "core/build_info.hpp"
#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "experiments/lib/bench_threads.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/chunked/hla2_fused.hpp"
#include "fast/heads.hpp"
#include "io/npy.hpp"

using namespace hla;

// experiments/bench/gemm_libraries.cpp: the GEMM libraries' versions and chosen code paths; the machine's limits,
// the rooflines and the peak FMA rate at each of `threads`.
std::vector<std::pair<std::string, std::string>> gemm_library_context();
void register_gemm_libraries(const std::vector<int>& threads);

namespace {

// The thread counts the threaded entries, the rooflines and the peak FMA rate run at: HLA_BENCH_THREADS, read here only
// (experiments/lib/bench_threads.hpp); scripts/bench.sh gets the list back from `hla_bench --print-threads`.
std::vector<int> bench_threads() { return bench::parse_bench_threads(std::getenv("HLA_BENCH_THREADS")); }

// The thread counts of an entry: every one of the run's for a form that takes threads, one thread otherwise.
std::vector<int> threads_for(bool threaded, const std::vector<int>& threads) {
  return threaded ? threads : std::vector<int>{1};
}

// Useful flops per token of the serial recurrence (core/operators.hpp has the count per operator and why).
double useful_flops_per_token(const std::string& op, double d, double dv) {
  const OperatorInfo& o = operator_info(op);
  return o.flops_d2 * d * d + o.flops_ddv * d * dv;
}

// Inputs shared by every benchmark of one shape (generated on first use, in double; float rounds once).
const Problem<double>& inputs(Eigen::Index n, Eigen::Index d, Eigen::Index dv) {
  static std::mutex mu;
  static std::map<std::tuple<Eigen::Index, Eigen::Index, Eigen::Index>, std::unique_ptr<Problem<double>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{n, d, dv}];
  if (!slot) {
    cache.clear();  // one shape at a time: the large ones are hundreds of MB
    auto& fresh = cache[{n, d, dv}];
    fresh = std::make_unique<Problem<double>>(gaussian_problem({n, d, dv}, 1));
    return *fresh;
  }
  return *slot;
}

// Counters of an entry that runs one head of n tokens per iteration (head_counters below: several heads).
void form_counters(benchmark::State& state, const std::string& op, Eigen::Index n, Eigen::Index d, Eigen::Index dv,
                   int chunk) {
  state.counters["tokens_per_s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gflops"] = benchmark::Counter(double(n) * useful_flops_per_token(op, double(d), double(dv)) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["chunk"] = chunk;
}

// What an entry's call decays by, named after its threads field: nothing (the plain call, γ = 1), a fixed γ
// (/gamma:<γ>, Options::gamma), or per-token gates (/gates:<spec>, core/gates.hpp: drawn once from the inputs'
// seed, before the timed loop, and run through the entry's gated computation).
struct DecayCase {
  std::string gamma = "1";
  std::string gates = "none";
  std::string suffix() const {
    if (gates != "none") return "/gates:" + gates;
    return gamma == "1" ? "" : "/gamma:" + gamma;
  }
};

template <class T> void bench_form(benchmark::State& state, const Entry<T>* e, Eigen::Index n, Eigen::Index d,
                                   Eigen::Index dv, int threads, int chunk, const DecayCase& decay = {}) {
  Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  const GateSpec gates = parse_gate_spec(decay.gates);
  p.gates = draw_gates(gates, n, 1).template cast<T>();  // float-representable: exact in either scalar
  const FormFn<T>& fn = gates.any() ? e->gated : e->fn;
  Options opt;
  opt.gamma = parse_rational(decay.gamma, "gamma");
  opt.threads = threads;
  opt.chunk = chunk;
  opt.state = false;       // the outputs of a forward pass, as the PyTorch peer computes them (since run 11)
  Eigen::setNbThreads(1);  // forms parallelize themselves (opt.threads)
  for (auto _ : state) {
    Run<T> r = fn(p, opt, nullptr);
    benchmark::DoNotOptimize(r.O.data());
    benchmark::ClobberMemory();
  }
  // The flops of the fixed-γ form: the gate factors are work the gated form does beyond it, not useful flops.
  form_counters(state, e->op, n, d, dv, chunk);
}

// Every entry is timed in wall-clock milliseconds, at least 0.2 s per repetition.
template <class F> void add_entry(const std::string& name, F&& body) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(body))
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

// The two-core ceiling of a form's own work: the sequence's two halves (n/2 tokens each), each a one-thread
// call of the form, run at once on two threads with nothing shared between them. It times what this
// machine's two cores give that work when no state crosses between them — both cores busy (the clock they
// then hold), their shared cache and memory — so the form's threads:2 entry can be read against the
// machine's two-core limit for it, not only against threads:1 (experiments/bench_targets.py). The second
// half starts from the zero state instead of the carried one: the same work, not the same outputs.
template <class T> void bench_two_core_ceiling(benchmark::State& state, const Entry<T>* e, Eigen::Index n,
                                               Eigen::Index d, Eigen::Index dv, int chunk) {
  const Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  const Problem<T> halves[2] = {slice_rows(p, 0, n / 2), slice_rows(p, n / 2, n)};
  Options opt;
  opt.threads = 1;
  opt.chunk = chunk;
  opt.state = false;  // as bench_form
  Eigen::setNbThreads(1);
  for (auto _ : state) {
    std::exception_ptr failed[2];
#pragma omp parallel num_threads(2)
    {
      const int h = omp_get_thread_num();
      omp_set_num_threads(1);  // each half's call runs on its own thread only
      try {
        Run<T> r = e->fn(halves[h], opt, nullptr);
        benchmark::DoNotOptimize(r.O.data());
      } catch (...) {
        failed[h] = std::current_exception();  // no exception may leave an OpenMP region
      }
    }
    for (const auto& f : failed)
      if (f) std::rethrow_exception(f);
    benchmark::ClobberMemory();
  }
  form_counters(state, e->op, n, d, dv, chunk);
}

template <class T> void register_forms(const std::vector<std::array<Eigen::Index, 3>>& shapes, int chunk,
                                       const std::vector<int>& threads) {
  const std::string scalar = scalar_name<T>();
  std::map<std::string, int> seen;
  for (const Entry<T>& e : registry<T>().entries()) {
    if (e.form == "reference") continue;
    const std::string form = seen[e.op + "/" + e.form]++ ? e.form + "/" + e.variant : e.form;
    for (const auto& [n, d, dv] : shapes)
      for (int t : threads_for(e.caps.threads, threads)) {
        const std::string name = fmt::format("{}/{}/{}/n:{}/d:{}/dv:{}/threads:{}", e.op, form, scalar, n, d, dv, t);
        const Entry<T>* ep = &e;
        add_entry(name, [=](benchmark::State& s) { bench_form<T>(s, ep, n, d, dv, t, chunk); });
      }
    if (e.caps.threads)
      for (const auto& [n, d, dv] : shapes) {
        const std::string name =
            fmt::format("ceiling/{}/{}/{}/n:{}/d:{}/dv:{}/threads:2", e.op, form, scalar, n, d, dv);
        const Entry<T>* ep = &e;
        add_entry(name, [=](benchmark::State& s) { bench_two_core_ceiling<T>(s, ep, n, d, dv, chunk); });
      }
  }
}

// The block schedule's two extra products at one thread, over the whole sequence (experiments/model/workspan.py charges
// (A) and (C) at these rates): phase/hla2/chunked-fused/summary/... is FusedPass::s_summary over all n rows (ΔS,
// 2d² flops per token), .../carry/... is add_entering_carry over all n rows from a nonzero entering state (2d·dv flops
// per token, normalization off), both with the plain entry's options (γ = 1, unnormalized: no weights).
template <class T> void bench_fused_phase(benchmark::State& state, bool carry, Eigen::Index n, Eigen::Index d,
                                          Eigen::Index dv, int chunk) {
  const Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  Options opt;
  opt.threads = 1;
  opt.chunk = chunk;
  Eigen::setNbThreads(1);
  const fast::chunked::FusedPass<T> pass(p, opt);
  fast::chunked::fused_detail::Carried<T> entering = pass.zero();
  entering.CpT.setConstant(T(1) / T(d));
  Mat<T> Y = Mat<T>::Zero(n, pass.va());
  std::atomic<Eigen::Index> zero_den{n};
  for (auto _ : state) {
    if (carry) {
      pass.add_entering_carry(0, 0, n, entering, Y, false, zero_den);
      benchmark::DoNotOptimize(Y.data());
    } else {
      Mat<T> S = pass.s_summary(0, n);
      benchmark::DoNotOptimize(S.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["gflops"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(n * d * (carry ? pass.va() : d)) / 1e9,
      benchmark::Counter::kIsRate);
}

// The chunk loop's products alone at width w, one thread (FusedPass::products_only: the eight products of a chunk,
// outputs only, on buffers in cache, ⌈n/w⌉ chunks per iteration): phase/hla2/chunked-fused/products/<scalar>/n/d/dv/
// threads:1/w:<w>, read beside the plain entry at the same width — what everything but the products costs, and the
// most the form could reach with these kernels (experiments/bench_targets.py). Counters: gflops = the products'
// flops per second; tokens_per_s.
template <class T>
void bench_fused_products(benchmark::State& state, Eigen::Index n, Eigen::Index d, Eigen::Index dv, int w) {
  const Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  Options opt;
  opt.threads = 1;
  opt.chunk = w;
  opt.state = false;  // as bench_form
  Eigen::setNbThreads(1);
  const fast::chunked::FusedPass<T> pass(p, opt);
  const Eigen::Index chunks = (n + w - 1) / w;
  for (auto _ : state) {
    pass.products_only(chunks);
    benchmark::ClobberMemory();
  }
  state.counters["gflops"] =
      benchmark::Counter(pass.products_only_flops(chunks) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens_per_s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["chunk"] = w;
}

template <class T> void register_fused_phases(int chunk) {
  const Eigen::Index n = 65536, d = 64, dv = 64;
  for (const bool carry : {false, true}) {
    const std::string name = fmt::format("phase/hla2/chunked-fused/{}/{}/n:{}/d:{}/dv:{}/threads:1",
                                         carry ? "carry" : "summary", scalar_name<T>(), n, d, dv);
    add_entry(name, [=](benchmark::State& s) { bench_fused_phase<T>(s, carry, n, d, dv, chunk); });
  }
  for (const int w : {16, 32, 48, 64}) {
    const std::string name = fmt::format("phase/hla2/chunked-fused/products/{}/n:{}/d:{}/dv:{}/threads:1/w:{}",
                                         scalar_name<T>(), n, d, dv, w);
    add_entry(name, [=](benchmark::State& s) { bench_fused_products<T>(s, n, d, dv, w); });
  }
}

// Counters of an entry that runs `heads` heads per iteration, for all heads together (useful flops = heads ×
// the single-head count), so tokens_per_s and gflops compare directly with that many single-head calls.
void head_counters(benchmark::State& state, const std::string& op, Eigen::Index n, Eigen::Index d, Eigen::Index dv,
                   int chunk, int heads) {
  form_counters(state, op, n * heads, d, dv, chunk);
  state.counters["heads"] = heads;
}

// The timed loop of a several-head entry: `call(opt)` runs every head and returns their runs.
template <class Call> void time_heads(benchmark::State& state, int threads, int chunk, Call&& call) {
  Options opt;
  opt.threads = threads;
  opt.chunk = chunk;
  opt.state = false;       // as bench_form
  Eigen::setNbThreads(1);  // forms parallelize themselves (opt.threads)
  for (auto _ : state) {
    auto runs = call(opt);
    benchmark::DoNotOptimize(runs.front().O.data());
    benchmark::ClobberMemory();
  }
}

// §5.2 multi-query: h heads with their own queries and shared K, V (one S), fast::chunked::hla2_chunked_heads,
// named hla2/chunked-multiquery/<scalar>/n/d/dv/threads/heads:<h> (counters: head_counters).
template <class T> void bench_multiquery(benchmark::State& state, Eigen::Index n, Eigen::Index d, Eigen::Index dv,
                                         int threads, int chunk, int heads) {
  const Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  std::vector<Mat<T>> Qs;
  for (int h = 0; h < heads; ++h) Qs.push_back(p.Q * T(h + 1));  // distinct queries per head (timing only)
  std::vector<const Mat<T>*> qptr;
  for (const auto& q : Qs) qptr.push_back(&q);
  time_heads(state, threads, chunk,
             [&](const Options& opt) { return fast::chunked::hla2_chunked_heads<T>(qptr, p.K, p.V, opt, {}); });
  head_counters(state, "hla2", n, d, dv, chunk, heads);
}

template <class T> void register_multiquery(const std::vector<std::array<Eigen::Index, 3>>& shapes, int chunk,
                                            const std::vector<int>& threads) {
  for (const auto& [n, d, dv] : shapes)
    for (int t : threads) {
      const std::string name =
          fmt::format("hla2/chunked-multiquery/{}/n:{}/d:{}/dv:{}/threads:{}/heads:4", scalar_name<T>(), n, d, dv, t);
      add_entry(name, [=](benchmark::State& s) { bench_multiquery<T>(s, n, d, dv, t, chunk, 4); });
    }
}

// §5.2 multi-head: h heads with their own Q, K, V through the registered chunked form (fast::multi_head:
// parallel over heads when heads ≥ threads), named <op>/chunked-multihead/<scalar>/n/d/dv/threads/heads:<h>.
// Each head gets its own copy of the inputs (scaled), so the heads do not share cache lines they only read.
// Each head goes through the registry's validated call (a finiteness pass over its inputs and outputs),
// where the single-head entries time the form itself. Counters: head_counters.
template <class T> void bench_multihead(benchmark::State& state, const Entry<T>* e, Eigen::Index n, Eigen::Index d,
                                        Eigen::Index dv, int threads, int chunk, int heads) {
  const Problem<T> p = convert_problem<T>(inputs(n, d, dv));
  std::vector<Problem<T>> ps;
  for (int h = 0; h < heads; ++h) ps.push_back({p.Q * T(h + 1), p.K, p.V * T(h + 1)});
  std::vector<const Problem<T>*> ptr;
  for (const auto& q : ps) ptr.push_back(&q);
  time_heads(state, threads, chunk, [&](const Options& opt) { return fast::multi_head<T>(*e, ptr, opt); });
  head_counters(state, e->op, n, d, dv, chunk, heads);
}

// Only at the default shape: four copies of the largest full-set inputs would not fit in memory. hla2's heads
// through both of its chunked forms (<form>-multihead), linear's through its one.
template <class T> void register_multihead(int chunk, const std::vector<int>& threads) {
  const Eigen::Index n = 65536, d = 64, dv = 64;
  const std::pair<const char*, const char*> forms[] = {
      {"hla2", "chunked"}, {"hla2", "chunked-fused"}, {"linear", "chunked"}};
  for (const auto& [op, form] : forms)
    for (int t : threads) {
      const Entry<T>* e = &registry<T>().find_exact(op, form);
      const std::string name =
          fmt::format("{}/{}-multihead/{}/n:{}/d:{}/dv:{}/threads:{}/heads:4", op, form, scalar_name<T>(), n, d, dv, t);
      add_entry(name, [=](benchmark::State& s) { bench_multihead<T>(s, e, n, d, dv, t, chunk, 4); });
    }
}

// The gated chunked forms beside their fixed-γ siblings, at the default shape only (docs/benchmarks.md "Gated
// forms"): every chunked form with a gated computation, on gates from kGates, at the threads its fixed-γ entries
// run — the naive cumulative-product formulation at one thread only, its time read beside the stable form's (at
// this length its gate products underflow and its outputs are wrong: it is timed, not checked) —
// and each stable one (<op>/chunked, hla2/chunked-fused) at the fixed γ = kGamma, the gates' mean. That entry, not γ =
// 1, is what a gated entry's time is divided by (experiments/bench_targets.py): at γ = 1 the fixed-γ forms skip every
// decay weight.
constexpr const char* kGates = "range:0.8,1";
constexpr const char* kGamma = "0.9";

template <class T> void register_gated(int chunk, const std::vector<int>& threads) {
  const Eigen::Index n = 65536, d = 64, dv = 64;
  for (const Entry<T>& e : registry<T>().entries()) {
    if (!e.gated || !e.form.starts_with("chunked")) continue;
    const bool naive = e.form == "chunked-naive-cumprod";
    std::vector<DecayCase> cases{{.gates = kGates}};
    if (!naive) cases.push_back({.gamma = kGamma});
    for (const DecayCase& decay : cases)
      for (int t : threads_for(e.caps.threads && !naive, threads)) {
        const std::string name = fmt::format("{}/{}/{}/n:{}/d:{}/dv:{}/threads:{}{}", e.op, e.form, scalar_name<T>(), n,
                                             d, dv, t, decay.suffix());
        const Entry<T>* ep = &e;
        add_entry(name, [=](benchmark::State& s) { bench_form<T>(s, ep, n, d, dv, t, chunk, decay); });
      }
  }
}

// The chunk width, at one thread: each threaded chunked form at w = 16, 32 and 64 beside its plain entry (w = the
// bench's chunk, 48 by default), named <op>/<form>/<scalar>/n/d/dv/threads:1/w:<w>, since the best width depends on
// the form and the vector width — measured on a Zen 4 (AVX-512) timing outputs only: hla2/chunked-fused fastest at
// w = 16-32 (float 38-40 ms at 32 against 41-44 at 48; double 67 at 16 against 82-86), the Eigen-based grouped forms at
// 48. experiments/bench_targets.py reads the best hla2 form at its fastest width, as it reads the PyTorch peer's
// fastest loop width.
constexpr int kWidths[] = {16, 32, 64};

template <class T> void register_widths(int chunk) {
  const Eigen::Index n = 65536, d = 64, dv = 64;
  for (const Entry<T>& e : registry<T>().entries()) {
    if (!e.caps.threads || !e.form.starts_with("chunked")) continue;
    for (const int w : kWidths) {
      if (w == chunk) continue;  // the plain entry
      const std::string name =
          fmt::format("{}/{}/{}/n:{}/d:{}/dv:{}/threads:1/w:{}", e.op, e.form, scalar_name<T>(), n, d, dv, w);
      const Entry<T>* ep = &e;
      add_entry(name, [=](benchmark::State& s) { bench_form<T>(s, ep, n, d, dv, 1, w); });
    }
  }
}

void describe_build(const std::vector<int>& threads) {
  const std::string simd = Eigen::SimdInstructionSetsInUse();
  const int float_lanes = Eigen::internal::packet_traits<float>::size;
  const std::pair<std::string, std::string> info[] = {
      {"hla_compiler", build_info::compiler()},
      {"hla_cxx_flags", build_info::cxx_flags()},
      {"hla_build_type", build_info::build_type()},
      {"hla_simd", fmt::format("{} ({} float lanes, {}-bit)", simd, float_lanes, 32 * float_lanes)},
      {"hla_openmp_max_threads", std::to_string(omp_get_max_threads())},
      {"hla_bench_threads", fmt::format("{}", fmt::join(threads, " "))},
      {"hla_git_commit", build_info::source_tree()},
      {"hla_eigen", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION)},
      {"hla_allocator", ReuseFreedMemory::description},
  };
  std::vector<std::pair<std::string, std::string>> all(std::begin(info), std::end(info));
  for (auto& kv : gemm_library_context()) all.push_back(std::move(kv));
  for (const auto& [k, v] : all) {
    fmt::print("{:<24} {}\n", k, v);
    benchmark::AddCustomContext(k, v);
  }
  fmt::print("\n");
}

// `--write-peer-inputs DIR`: the default entries' inputs (n = 65536, d = dv = 64, float64) as DIR/{q,k,v}.npy
// and the registered chunked forms' outputs on them, DIR/o_<op>_<scalar>.npy, for the PyTorch peer
// (experiments/peer/torch_chunked.py), which times itself on the same inputs and checks its outputs against these.
template <class T> void write_peer_outputs(const std::filesystem::path& dir, int chunk) {
  const Problem<T> p = convert_problem<T>(inputs(65536, 64, 64));
  Options opt;
  opt.chunk = chunk;
  for (const char* op : {"hla2", "linear"}) {
    const Entry<T>& e = registry<T>().find_exact(op, "chunked");
    const Mat<T> O = e(p, opt).O;
    npy::write(dir / fmt::format("o_{}_{}.npy", op, scalar_name<T>()), Mat<double>(O.template cast<double>()),
               std::is_same_v<T, float> ? npy::DType::f32 : npy::DType::f64);
  }
}

int write_peer_inputs(const std::filesystem::path& dir, int chunk) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    fmt::print(stderr, "hla_bench: cannot create {}: {}\n", dir.string(), ec.message());
    return 2;
  }
  const Problem<double>& p = inputs(65536, 64, 64);
  npy::write(dir / "q.npy", p.Q);
  npy::write(dir / "k.npy", p.K);
  npy::write(dir / "v.npy", p.V);
  write_peer_outputs<float>(dir, chunk);
  write_peer_outputs<double>(dir, chunk);
  fmt::print("wrote the peer's inputs and the harness's outputs to {}\n", dir.string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool full = std::getenv("HLA_BENCH_FULL") && std::strcmp(std::getenv("HLA_BENCH_FULL"), "0") != 0;
  std::vector<char*> args;
  const char* peer_dir = nullptr;
  bool print_threads = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0)
      full = true;
    else if (std::strcmp(argv[i], "--print-threads") == 0)  // the checked HLA_BENCH_THREADS, for scripts/bench.sh
      print_threads = true;
    else if (std::strcmp(argv[i], "--write-peer-inputs") == 0) {
      if (i + 1 >= argc) {
        fmt::print(stderr, "hla_bench: --write-peer-inputs needs a directory\n");
        return 2;
      }
      peer_dir = argv[++i];
    } else
      args.push_back(argv[i]);
  }
  int nargs = static_cast<int>(args.size());
  std::vector<int> threads;
  try {
    threads = bench_threads();
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hla_bench: {}\n", e.what());
    return 2;
  }
  if (print_threads) {
    fmt::print("{}\n", fmt::join(threads, " "));
    return 0;
  }
  int chunk = 48;
  if (const char* env = std::getenv("HLA_BENCH_CHUNK")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > (1 << 20)) {
      fmt::print(stderr, "hla_bench: HLA_BENCH_CHUNK must be a chunk width in 1..2^20, got '{}'\n", env);
      return 2;
    }
    chunk = static_cast<int>(v);
  }
  if (peer_dir) return write_peer_inputs(peer_dir, chunk);
  const ReuseFreedMemory steady_state;

  describe_build(threads);
  std::vector<std::array<Eigen::Index, 3>> shapes{{65536, 64, 64}};
  if (full)
    for (Eigen::Index d : {16, 64, 128})
      for (Eigen::Index n = 1 << 10; n <= (1 << 20); n <<= 2)
        if (!(n == 65536 && d == 64)) shapes.push_back({n, d, d});
  register_gemm_libraries(threads);  // first, as when they were registered before main
  register_forms<float>(shapes, chunk, threads);
  register_forms<double>(shapes, chunk, threads);
  register_multiquery<float>(shapes, chunk, threads);
  register_multiquery<double>(shapes, chunk, threads);
  register_multihead<float>(chunk, threads);
  register_multihead<double>(chunk, threads);
  register_gated<float>(chunk, threads);
  register_gated<double>(chunk, threads);
  register_fused_phases<float>(chunk);
  register_fused_phases<double>(chunk);
  register_widths<float>(chunk);
  register_widths<double>(chunk);

  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
