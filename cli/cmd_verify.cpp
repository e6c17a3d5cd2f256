// `hla verify`: holds an outside implementation to the exact operator (docs/verify.md).
//
//   hla verify --op hla2 --gamma 0.99 --normalized --eps 1e-6 --dtype float64 --exec "python3 my_hla.py"
//   hla verify --op hla2 --gamma 0.99 --q q.npy --k k.npy --v v.npy --o o.npy      (outputs you already have)
//   hla verify --op hla2 --list-state --d 4 --dv 3                                 (the state's parts)
//   hla verify --op hla2 --layout bthk --exec my_ops.py:recurrent_hla               (an op in fla's convention)
// Exit codes: 0 computes, 1 differs or lower-precision, 2 bad input or a protocol error.
#include <fmt/core.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/operators.hpp"
#include "core/parse.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/battery.hpp"
#include "verify/combine.hpp"
#include "verify/exec.hpp"
#include "verify/precision.hpp"

namespace hla::cli {
namespace {
namespace fs = std::filesystem;
using namespace hla::verify::ext;

struct VerifyArgs {
  std::string op = "hla2", gamma = "1", eps = "0", ridge = "0", dtype = "float64", precision;
  bool normalized = false, state = false, grad = false, combine = false, keep = false, no_diagnose = false,
       list_state = false, quiet = false, calibrate = false, fixed_d = false, gates = false, fresh_process = false,
       state_v_first = false;
  long n_multiple = 1;
  std::string exec, json_file, q, k, v, o, npz, parts, gamma_npy, gate_range = "0.8,1";
  std::string layout, scale, device, python = "python3";  // --layout: an op in fla's calling convention
  long gqa = 1;
  long max_n = 512, d = 16, dv = 16;
  std::uint64_t seed = 1;
  double timeout = 300;
  int shrink_rounds = 8;
  std::set<std::string> given;  // the options on the command line (file mode refuses those it cannot use)
};

Request request_of(const VerifyArgs& a) {
  Request r;
  r.op = a.op;
  r.opt.gamma = parse_rational(a.gamma, "--gamma");
  r.opt.eps = parse_rational(a.eps, "--eps");
  r.opt.ridge = parse_rational(a.ridge, "--ridge");
  r.opt.normalized = a.normalized;
  r.dtype = parse_dtype(a.dtype);
  if (!a.precision.empty()) r.precision = parse_precision(a.precision);
  r.state = a.state;
  r.grad = a.grad;
  r.max_n = a.max_n;
  r.d = a.d;
  r.dv = a.dv;
  r.seed = a.seed;
  r.fixed_widths = a.fixed_d;
  r.n_multiple = a.n_multiple;
  r.gates = a.gates;
  if (!a.gates && a.given.count("--gate-range")) throw InputError("--gate-range goes with --gates");
  if (a.gates && a.given.count("--gamma"))
    throw InputError("--gates takes the decay from the per-token gates; --gamma means nothing with it");
  if (a.gates && a.calibrate)
    throw InputError("--calibrate runs the fixed-gamma calibration; it does not take --gates");
  const auto comma = a.gate_range.find(',');
  if (comma == std::string::npos) throw InputError("--gate-range takes LO,HI (e.g. 0.8,1); got '" + a.gate_range + "'");
  r.gate_lo = from_rational<double>(parse_rational(a.gate_range.substr(0, comma), "--gate-range"));
  r.gate_hi = from_rational<double>(parse_rational(a.gate_range.substr(comma + 1), "--gate-range"));
  validate_request(r);
  return r;
}

// Written whole to a fresh temporary file, then renamed: a report is never half-written, never written
// through a planted symlink, and a non-UTF-8 byte (a command's stderr) cannot lose it.
void write_json(const std::string& file, const nlohmann::json& j) {
  write_file_atomically(file, json_text(j, 2) + "\n", "--json file");
}

// With --gates, the per-token gates: gamma.npy of shape (n,) (--gamma-npy, or the array "gamma" of --npz).
Problem<double> given_inputs(const VerifyArgs& a, Mat<double>& out, DType& dtype, ColVec<double>& gates) {
  if (!a.npz.empty() && (!a.q.empty() || !a.k.empty() || !a.v.empty() || !a.o.empty()))
    throw InputError("give either --npz or --q --k --v --o, not both");
  // Headers are held to file mode's limits before any data is read: n <= 8192 tokens of at most kMaxWidth features
  // (a sparse .npy claiming 2^31 values was 16 GiB allocated before the n check).
  auto load = [&](const std::string& file, const std::string& what, std::size_t max_values) -> npy::Array {
    if (file.empty())
      throw InputError("file mode needs --q, --k, --v and --o (or --npz with arrays q, k, v, o); " + what +
                       " is missing");
    return npy::read(file, max_values);
  };
  constexpr std::size_t kMaxFileTokens = 8192, kMaxMatrix = kMaxFileTokens * static_cast<std::size_t>(kMaxWidth);
  if (!a.gamma_npy.empty() && (!a.gates || !a.npz.empty()))
    throw InputError("--gamma-npy goes with --gates and --q --k --v --o (with --npz the gates are its array 'gamma')");
  npy::Array q, k, v, o, g;
  if (!a.npz.empty()) {
    auto m = npy::read_npz(a.npz);
    for (const char* key : {"q", "k", "v", "o", "gamma"})
      if (!m.count(key) && (a.gates || key != std::string("gamma")))
        throw InputError(a.npz + " has no array '" + std::string(key) + "'");
    q = m["q"], k = m["k"], v = m["v"], o = m["o"];
    if (a.gates) g = m["gamma"];
  } else {
    q = load(a.q, "--q", kMaxMatrix), k = load(a.k, "--k", kMaxMatrix), v = load(a.v, "--v", kMaxMatrix),
    o = load(a.o, "--o", kMaxMatrix);
    if (a.gates) g = load(a.gamma_npy, "--gamma-npy (the gates, with --gates)", kMaxFileTokens);
  }
  if (a.gates) {
    if (g.shape.size() != 1)
      throw InputError(fmt::format("gamma must have shape (n,); it has {} dimensions", g.shape.size()));
    gates = Eigen::Map<const ColVec<double>>(g.data.data(), static_cast<Eigen::Index>(g.data.size()));
  }
  // One dtype for every array: the case's (a float32 q among float64 arrays is a kernel fed other inputs than the
  // ones judged, or a mix-up; either way not a precision verdict to give).
  auto dtype_name = [](const npy::Array& x) { return x.dtype == npy::DType::f64 ? "float64" : "float32"; };
  std::string mixed;
  for (const auto& [name, x] :
       {std::pair<const char*, const npy::Array*>{"q", &q}, {"k", &k}, {"v", &v}, {"gamma", &g}})
    if ((a.gates || name != std::string("gamma")) && x->dtype != o.dtype)
      mixed += fmt::format("{}{} is {}", mixed.empty() ? "" : ", ", name, dtype_name(*x));
  if (!mixed.empty())
    throw InputError(fmt::format("the arrays must share one dtype: o is {}, but {}", dtype_name(o), mixed));
  dtype = o.dtype == npy::DType::f64 ? DType::float64 : DType::float32;
  Problem<double> p{npy::to_matrix(q, "q"), npy::to_matrix(k, "k"), npy::to_matrix(v, "v")};
  out = npy::to_matrix(o, "o");
  if (p.Q.rows() != p.K.rows() || p.Q.rows() != p.V.rows() || p.Q.cols() != p.K.cols())
    throw InputError(fmt::format("q, k, v shapes do not fit: q {}x{}, k {}x{}, v {}x{}", p.Q.rows(), p.Q.cols(),
                                 p.K.rows(), p.K.cols(), p.V.rows(), p.V.cols()));
  if (p.Q.rows() == 0 || p.Q.cols() == 0 || p.V.cols() == 0) throw InputError("q, k, v must not be empty");
  if (p.Q.rows() > static_cast<Eigen::Index>(kMaxFileTokens))
    throw InputError(
        fmt::format("file mode checks n <= {} tokens (the MPFR reference); got n = {}", kMaxFileTokens, p.Q.rows()));
  for (const Mat<double>* m : {&p.Q, &p.K, &p.V})
    if (!m->allFinite()) throw InputError("q, k, v contain NaN or Inf");
  return p;
}

// File mode judges given arrays: options that shape or run a battery would be silently ignored there.
void refuse_battery_options(const VerifyArgs& a) {
  std::string refused;
  for (const char* name : {"--state", "--grad", "--max-n", "--d", "--dv", "--fixed-d", "--n-multiple", "--seed",
                           "--timeout", "--shrink-rounds", "--keep", "--gate-range", "--fresh-process"})
    if (a.given.count(name)) refused += std::string(refused.empty() ? "" : ", ") + name;
  if (!refused.empty())
    throw InputError(
        "file mode judges the given arrays (their shapes and dtype are the case); these options shape or run "
        "a battery and mean nothing here: " +
        refused);
}

// --layout: the battery of hla_harness.verify(fn, op, layout=...) (python/hla_harness.cpp: several cases per call,
// GQA, gradients through autograd) on a function in fla's calling convention, FILE.py:FUNCTION or MODULE:FUNCTION,
// in a Python process that imports the module from this build (build/python beside build/bin). The options are the
// command's own, passed as verify()'s keywords; the report comes back as JSON, and is printed and written as any.
// clang-format off
constexpr const char* kFlaVerify = R"python(
import importlib
import importlib.util
import json
import os
import sys


def fail(message):
    print("hla verify: " + message, file=sys.stderr)
    sys.exit(2)


spec, kwargs, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
where, _, name = spec.rpartition(":")
if not where or not name:
    fail(f"with --layout, --exec takes FILE.py:FUNCTION or MODULE:FUNCTION, not {spec!r}")
try:
    if where.endswith(".py"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        found = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    fn = module
    for part in name.split("."):
        fn = getattr(fn, part)
except Exception as e:
    fail(f"cannot load {spec}: {e!r}")
import hla_harness  # noqa: E402
try:
    report = hla_harness.verify(fn, **kwargs)
except ValueError as e:
    fail(str(e))
with open(out, "w") as f:
    json.dump(report, f)
)python";
// clang-format on

int run_fla_style(const VerifyArgs& a, const Request& req) {
  std::string refused;
  for (const char* name : {"--keep", "--fresh-process", "--combine", "--calibrate", "--parts"})
    if (a.given.count(name)) refused += std::string(refused.empty() ? "" : ", ") + name;
  if (!a.o.empty() || !a.npz.empty()) refused += std::string(refused.empty() ? "" : ", ") + "file mode";
  if (!refused.empty()) throw InputError("--layout runs an fla-style function through the module; refused: " + refused);
  if (a.exec.empty()) throw InputError("--layout needs --exec FILE.py:FUNCTION (or MODULE:FUNCTION)");
  const fs::path module_dir = fs::canonical("/proc/self/exe").parent_path().parent_path() / "python";
  bool built = false;
  if (fs::is_directory(module_dir))
    for (const auto& e : fs::directory_iterator(module_dir))
      built = built || e.path().filename().string().rfind("hla_harness", 0) == 0;
  if (!built) throw InputError("--layout needs the Python module hla_harness, built into " + module_dir.string());
  nlohmann::json kw = {{"op", req.op},
                       {"gamma", a.gamma},
                       {"normalized", a.normalized},
                       {"eps", a.eps},
                       {"ridge", a.ridge},
                       {"dtype", a.dtype},
                       {"state", a.state},
                       {"grad", a.grad},
                       {"max_n", a.max_n},
                       {"d", a.d},
                       {"dv", a.dv},
                       {"seed", a.seed},
                       {"shrink_rounds", a.shrink_rounds},
                       {"diagnose", !a.no_diagnose},
                       {"fixed_d", a.fixed_d},
                       {"n_multiple", a.n_multiple},
                       {"precision", a.precision},
                       {"timeout", checked_timeout(a.timeout)},
                       {"gates", a.gates},
                       {"gate_range", {req.gate_lo, req.gate_hi}},
                       {"layout", a.layout},
                       {"device", a.device},
                       {"gqa", a.gqa},
                       {"state_v_first", a.state_v_first}};
  kw["scale"] = a.scale.empty() ? nlohmann::json(nullptr)
                                : nlohmann::json(from_rational<double>(parse_rational(a.scale, "--scale")));
  TempDir tmp("hla-verify-layout");
  const std::string out = (tmp.path() / "report.json").string(), args = kw.dump();
  const char* old = std::getenv("PYTHONPATH");
  setenv("PYTHONPATH", (module_dir.string() + (old && *old ? ":" + std::string(old) : "")).c_str(), 1);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("--layout: fork failed");
  if (pid == 0) {
    execlp(a.python.c_str(), a.python.c_str(), "-c", kFlaVerify, a.exec.c_str(), args.c_str(), out.c_str(),
           static_cast<char*>(nullptr));
    std::perror(("hla verify: --python " + a.python).c_str());
    _exit(2);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  if (!fs::exists(out)) return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 2;
  std::ifstream in(out);
  nlohmann::json report = nlohmann::json::parse(in);
  report["command"] = a.exec;
  if (!a.json_file.empty()) write_json(a.json_file, report);
  fmt::print("{}", report["summary"].get<std::string>());
  return exit_code_for(parse_verdict(report["verdict"].get<std::string>()));
}

int run_verify(const VerifyArgs& a) {
  if (!a.json_file.empty()) check_writable(a.json_file, "--json");  // before the battery, not after it
  Request req = request_of(a);
  if (a.combine) {
    // A summary and a combine depend on the tokens and γ only: options that mean nothing here are refused, not ignored.
    std::string refused;
    for (const auto& [given, name] : std::vector<std::pair<bool, const char*>>{
             {a.state, "--state"},
             {a.grad, "--grad"},
             {!a.precision.empty(), "--precision"},
             {a.calibrate, "--calibrate"},
             {a.list_state, "--list-state"},
             {a.normalized, "--normalized"},
             {req.opt.eps != 0, "--eps"},
             {req.opt.ridge != 0, "--ridge"},
             {a.gates, "--gates"},
             {!a.q.empty() || !a.k.empty() || !a.v.empty() || !a.o.empty() || !a.npz.empty(),
              "file mode (--q/--k/--v/--o/--npz)"}})
      if (given) refused += std::string(refused.empty() ? "" : ", ") + name;
    if (!refused.empty())
      throw InputError(
          "with --combine the cases depend on the tokens and --gamma only (a segment summary holds the "
          "normalizer's parts, and no ridge); refused: " +
          refused);
  }
  if (a.list_state) {
    fmt::print("state parts of {} (d = {}, dv = {}), as state_in/<part>.npy and state_out/<part>.npy:\n", req.op, req.d,
               req.dv);
    for (const PartShape& p : state_layout(req.op, req.d, req.dv))
      fmt::print("  {:<4} {}\n", p.name,
                 p.vector ? fmt::format("({},)", p.rows) : fmt::format("({}, {})", p.rows, p.cols));
    return 0;
  }
  if (!a.layout.empty()) return run_fla_style(a, req);
  for (const char* name : {"--scale", "--gqa", "--device", "--python", "--state-v-first"})
    if (a.given.count(name)) throw InputError(std::string(name) + " goes with --layout (an op in fla's convention)");
  if (a.calibrate) {
    const nlohmann::json c = calibration(req.op, req.opt, req.max_n, req.d, req.dv, a.quiet ? nullptr : &std::cerr);
    if (!a.json_file.empty()) write_json(a.json_file, c);
    fmt::print("{}", calibration_text(c));
    return 0;
  }
  if (a.combine) {
    if (a.exec.empty()) throw InputError("--combine needs --exec CMD");
    checked_timeout(a.timeout);
    const PartMap map = a.parts.empty() ? PartMap{} : read_part_map(a.parts);
    ExecCombine impl(a.exec, a.timeout, a.keep, a.fresh_process);
    nlohmann::json report = run_combine_battery(impl, req, map, a.quiet ? nullptr : &std::cerr);
    InterruptGuard::check();  // a signal after the last round: exit 128 + signal, no report
    report["command"] = a.exec;
    if (!a.json_file.empty()) write_json(a.json_file, report);
    fmt::print("{}", report["summary"].get<std::string>());
    return exit_code_for(parse_verdict(report["verdict"].get<std::string>()));
  }
  if (!a.parts.empty()) throw InputError("--parts goes with --combine");
  const bool file_mode = !a.o.empty() || !a.npz.empty();
  if (file_mode == !a.exec.empty())
    throw InputError("give either --exec CMD (run the battery) or the given arrays (--q --k --v --o, or --npz)");
  nlohmann::json report;
  if (file_mode) {
    refuse_battery_options(a);
    Mat<double> out;
    DType dt{};
    ColVec<double> gates;
    const Problem<double> in = given_inputs(a, out, dt, gates);
    if (a.given.count("--dtype") && dt != req.dtype)
      throw InputError("--dtype " + a.dtype + " but the given o is " + dtype_name(dt) +
                       " (file mode takes the arrays' dtype)");
    req.dtype = dt;
    report = judge_given(req, in, out, gates);
  } else {
    if (!a.gamma_npy.empty()) throw InputError("--gamma-npy is file mode's (with --exec the harness makes the gates)");
    checked_timeout(a.timeout);
    if (a.shrink_rounds < 0 || a.shrink_rounds > 50) throw InputError("--shrink-rounds must lie in [0, 50]");
    ExecImplementation impl(a.exec, a.timeout, a.keep, a.fresh_process);
    BatteryOptions bo;
    bo.shrink_rounds = a.shrink_rounds;
    bo.diagnose = !a.no_diagnose;
    bo.progress = a.quiet ? nullptr : &std::cerr;
    report = run_battery(impl, req, bo);
    InterruptGuard::check();  // a signal after the last round: stopped here (exit 128 + signal), no report
    report["command"] = a.exec;
  }
  if (!a.json_file.empty()) write_json(a.json_file, report);
  fmt::print("{}", report["summary"].get<std::string>());
  return exit_code_for(parse_verdict(report["verdict"].get<std::string>()));
}

const CommandRegistrar verify_registrar([](CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  auto* sub = app.add_subcommand("verify", "Hold an outside implementation (any language) to the exact operator");
  sub->add_option("--op", a->op, "operator: " + operator_names([](const OperatorInfo& o) { return o.streaming; }));
  sub->add_option("--gamma", a->gamma, "decay in (0, 1], e.g. 0.99 or 3/4");
  sub->add_flag("--normalized", a->normalized, "divide by den_t + eps");
  sub->add_option("--eps", a->eps, "normalizer stabilizer >= 0");
  sub->add_option("--ridge", a->ridge, "ridge λ >= 0 (hla2)");
  sub->add_option("--dtype", a->dtype, "float64 | float32: the arrays' dtype");
  sub->add_flag("--combine", a->combine,
                "hold the command's segment summaries and combine operator instead (associativity, identity, agreement "
                "with its segments and with the exact operator): cases of kind 'segment' and 'combine'");
  sub->add_option("--parts", a->parts, "with --combine: a JSON object mapping your part names onto SPEC's (or null)");
  sub->add_flag(
      "--grad", a->grad,
      "also hold the backward pass: cases carry do.npy, the command writes dq.npy, dk.npy, dv.npy (and, from a "
      "given state, optionally dstate_in/<part>.npy)");
  sub->add_option(
      "--precision", a->precision,
      "fp64 | fp32 | tf32 | bf16 | fp16: the arithmetic the implementation computes in (default: the dtype's); "
      "the bound follows it");
  sub->add_option("--exec", a->exec,
                  "command started as: CMD DIR; one that answers DIR on fd 3 (HLA_VERIFY_REPLY_FD) is kept and gets "
                  "later rounds' DIR on fd 4 (HLA_VERIFY_ROUND_FD), one that exits is started again "
                  "(examples/protocol.py answers)");
  sub->add_option("--layout", a->layout,
                  "bthk | bhtk: --exec names FILE.py:FUNCTION (or MODULE:FUNCTION), an op in fla's calling convention "
                  "(torch tensors [B, T, H, K] or head-first, scale, g, initial_state tuple), run through the Python "
                  "module's adapter: several cases per call, GQA, gradients by autograd");
  sub->add_option("--scale", a->scale, "with --layout: the scale the op is called with (default: 1, SPEC's operator)");
  sub->add_option("--gqa", a->gqa, "with --layout: query heads per key/value head (default 1)");
  sub->add_flag("--state-v-first", a->state_v_first,
                "with --layout --state: the op keeps its state's [K, V] parts as [V, K] (fla's state_v_first=True)");
  sub->add_option("--device", a->device, "with --layout: the tensors' device (default: cuda when torch has it)");
  sub->add_option("--python", a->python, "with --layout: the Python that runs the op (default python3)");
  sub->add_flag("--fresh-process", a->fresh_process,
                "start the command afresh for every round (no fds 3 and 4), nothing kept between rounds");
  sub->add_flag("--state", a->state, "the implementation takes state_in/ and writes state_out/ (split-and-carry)");
  sub->add_option("--max-n", a->max_n, "largest random case (default 512)");
  sub->add_option("--d", a->d, "query/key width of the random cases (default 16)");
  sub->add_option("--dv", a->dv, "value width of the random cases (default 16)");
  sub->add_flag("--fixed-d", a->fixed_d,
                "every case (exact ones too) at widths --d x --dv: for kernels built for one head size");
  sub->add_option("--n-multiple", a->n_multiple,
                  "every case's length a multiple of this: for kernels that take whole blocks of tokens");
  add_seed_option(sub, a->seed, "case seed");
  sub->add_option("--timeout", a->timeout, "seconds per round before the command is killed (default 300)");
  sub->add_option("--shrink-rounds", a->shrink_rounds, "rounds of the counterexample search (default 8)");
  sub->add_flag("--no-diagnose", a->no_diagnose, "skip comparing with the registered forms and known mistakes");
  sub->add_option("--json", a->json_file, "write the whole report here");
  sub->add_flag("--keep", a->keep, "keep the case directories (their paths are in the report)");
  sub->add_flag("--quiet", a->quiet, "no progress lines on stderr");
  sub->add_flag("--list-state", a->list_state, "print the state's part names and shapes for --op, --d, --dv");
  sub->add_flag("--calibrate", a->calibrate,
                "run emulated tf32/bf16/fp16 kernels (correct, and accumulating in the format) through the battery for "
                "--op and its options: the calibration of --precision's bound");
  sub->add_option("--q", a->q, "file mode: queries .npy (n x d)");
  sub->add_option("--k", a->k, "file mode: keys .npy (n x d)");
  sub->add_option("--v", a->v, "file mode: values .npy (n x dv)");
  sub->add_option("--o", a->o, "file mode: the implementation's outputs .npy (n x dv)");
  sub->add_option("--npz", a->npz, "file mode: one .npz holding q, k, v, o (and gamma, with --gates)");
  sub->add_flag("--gates", a->gates,
                "per-token gates: every case also holds gamma.npy (n,), gamma_t in (0, 1] (" +
                    operator_names([](const OperatorInfo& o) { return o.verify_gates; }) + "; not with --gamma)");
  sub->add_option("--gate-range", a->gate_range,
                  "with --gates: LO,HI, the random cases' gates drawn from [LO, HI] (default 0.8,1)");
  sub->add_option("--gamma-npy", a->gamma_npy, "file mode with --gates: the gates .npy (n,)");
  sub->callback([a, sub] {
    for (const CLI::Option* opt : sub->get_options())
      if (opt->count() > 0) a->given.insert(opt->get_name());
    const int code = run_verify(*a);
    if (code != 0) throw CLI::RuntimeError(code);
  });
});

}  // namespace
}  // namespace hla::cli
