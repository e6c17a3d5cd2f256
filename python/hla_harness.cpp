// hla_harness: the harness from Python. A thin layer: it converts NumPy arrays and Python callables and
// calls the same C++ code as `hla verify` and `hla run` (verify/, the registry). No check is
// implemented twice.
//
//   import hla_harness
//   o = hla_harness.reference("hla2", q, k, v, gamma=0.9, precision="exact")
//   report = hla_harness.verify(my_fn, "hla2", gamma=0.9, dtype="float32")   # dict, as `hla verify --json`
//   assert report["verdict"] == "computes"
#include <pybind11/eval.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/inputs.hpp"
#include "core/limits.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "io/files.hpp"
#include "verify/battery.hpp"
#include "verify/combine.hpp"
#include "verify/exec.hpp"

namespace py = pybind11;
using namespace hla;
using namespace hla::verify::ext;

namespace {

using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A Python number for γ, ε, λ: its exact value (every float is a dyadic rational); a string such as
// "3/4" is parsed exactly.
rational exact_param(const py::object& x, const std::string& what) {
  if (py::isinstance<py::str>(x)) return parse_rational(x.cast<std::string>(), what);
  if (py::isinstance<py::bool_>(x)) throw InputError(what + " must be a number, not a bool");
  double v = 0;
  try {
    v = x.cast<double>();
  } catch (const py::cast_error&) {  // None, a list, ...: the caller's mistake, a ValueError like every other
    throw InputError(what + " must be a number or a string such as '3/4', not " +
                     std::string(py::str(py::type::of(x).attr("__name__"))));
  }
  if (!std::isfinite(v)) throw InputError(what + " must be finite");
  // A float as the user wrote it, as the CLI reads it: 0.9 is 9/10 (Python's repr is the shortest decimal that
  // rounds back to the same double), not the binary fraction nearest to it.
  return parse_rational(py::str(py::float_(v)).cast<std::string>(), what);
}

// Which keywords a Python callable takes (inspect.signature): all of them with **kwargs or when it cannot be
// inspected, else those it names. An option it does not take must be at its neutral value, so an ignored option
// never passes silently.
class Keywords {
 public:
  explicit Keywords(const py::object& fn) {
    try {
      py::object params = py::module_::import("inspect").attr("signature")(fn).attr("parameters");
      const py::object var_kw = py::module_::import("inspect").attr("Parameter").attr("VAR_KEYWORD");
      for (const py::handle& name : params) {
        const py::object p = params[name];
        if (py::object(p.attr("kind")).equal(var_kw)) return;  // **kwargs: everything
        names_.push_back(py::str(name));
      }
      all_ = false;
    } catch (py::error_already_set&) { all_ = true; }
  }
  bool takes(const std::string& name) const {
    return all_ || std::find(names_.begin(), names_.end(), name) != names_.end();
  }
  // kw[name] = value if the callable takes it; otherwise an error unless the value is neutral.
  void pass(py::dict& kw, const std::string& name, py::object value, bool neutral,
            const std::string& who = "fn") const {
    if (takes(name)) {
      kw[py::str(name)] = std::move(value);
      return;
    }
    if (!neutral) throw InputError(who + " takes no keyword '" + name + "' (nor **kwargs), but this battery needs it");
  }

 private:
  std::vector<std::string> names_;
  bool all_ = true;
};

Mat<double> to_matrix(const DoubleArray& a, const std::string& what) {
  if (a.ndim() != 2)
    throw InputError(what + " must be a 2-D array (rows are tokens), got " + std::to_string(a.ndim()) + "-D");
  const auto r = a.unchecked<2>();
  Mat<double> m(a.shape(0), a.shape(1));
  for (py::ssize_t i = 0; i < a.shape(0); ++i)
    for (py::ssize_t j = 0; j < a.shape(1); ++j) m(i, j) = r(i, j);
  return m;
}

py::array_t<double> to_numpy(const Mat<double>& m) {
  py::array_t<double> out({m.rows(), m.cols()});
  auto w = out.mutable_unchecked<2>();
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) w(i, j) = m(i, j);
  return out;
}

Options options_of(const py::object& gamma, bool normalized, const py::object& eps, const py::object& ridge) {
  Options o;
  o.gamma = exact_param(gamma, "gamma");
  o.normalized = normalized;
  o.eps = exact_param(eps, "eps");
  o.ridge = exact_param(ridge, "ridge");
  return o;
}

py::array_t<double> reference(const std::string& op, const DoubleArray& q, const DoubleArray& k, const DoubleArray& v,
                              const py::object& gamma, bool normalized, const py::object& eps, const py::object& ridge,
                              const std::string& precision) {
  // The module goes through the CLI's limits (core/limits.hpp): the environment OpenMP reads, and the memory the
  // reference needs in its scalar, before anything is converted.
  check_thread_environment();
  const Options o = options_of(gamma, normalized, eps, ridge);
  const std::uint64_t value_bytes = precision == "exact"  ? bytes_per_value<rational>()
                                    : precision == "mpfr" ? bytes_per_value<mpfr256>()
                                                          : bytes_per_value<double>();
  if (q.ndim() == 2 && v.ndim() == 2)
    require_memory(saturating_add(run_bytes(Shape{q.shape(0), q.shape(1), v.shape(1)}, value_bytes),
                                  literal_reference_bytes(Shape{q.shape(0), q.shape(1), v.shape(1)}, value_bytes)),
                   fmt::format("reference('{}', precision='{}') at n={} d={} dv={}", op, precision, q.shape(0),
                               q.shape(1), v.shape(1)));
  const Problem<double> p{to_matrix(q, "q"), to_matrix(k, "k"), to_matrix(v, "v")};
  // Before the conversion: a NaN or an infinity has no exact value, and GMP's conversion of one to a rational was a
  // division by zero (SIGFPE, the Python process killed). The registry names it too, after converting.
  for (const Mat<double>* m : {&p.Q, &p.K, &p.V})
    if (!m->allFinite()) throw InputError("q, k, v contain NaN or Inf");
  Mat<double> out;
  {
    py::gil_scoped_release release;
    if (precision == "exact") {
      const Mat<rational> r = registry<rational>().reference(op)(convert_problem<rational>(p), o).O;
      out = r.unaryExpr([](const rational& x) { return x.convert_to<double>(); });
    } else if (precision == "mpfr") {
      const Mat<mpfr256> r = registry<mpfr256>().reference(op)(convert_problem<mpfr256>(p), o).O;
      out = r.unaryExpr([](const mpfr256& x) { return x.convert_to<double>(); });
    } else if (precision == "float64") {
      out = registry<double>().reference(op)(p, o).O;
    } else {
      throw InputError("precision must be 'exact', 'mpfr' or 'float64', not '" + precision + "'");
    }
  }
  return to_numpy(out);
}

// What a function under test raised, as a finding of its case; KeyboardInterrupt and SystemExit are not
// findings but the user stopping the battery, so they propagate (out of verify(), to the caller).
std::string raised(py::error_already_set& e) {
  if (e.matches(PyExc_KeyboardInterrupt) || e.matches(PyExc_SystemExit)) throw;
  return std::string("the function raised ") + e.what();
}

// The module's time-out, the CLI's --timeout for a function: when a round passes `seconds`, a watchdog
// thread raises TimeoutError in the thread running the function (PyThreadState_SetAsyncExc). Python code
// stops at its next bytecode; a call blocked inside C (a GPU kernel) stops when it returns. Created and
// destroyed with the GIL held.
class RoundWatchdog {
 public:
  explicit RoundWatchdog(double seconds) : target_(PyThread_get_thread_ident()) {
    worker_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
      fired_ = true;
      lock.unlock();
      py::gil_scoped_acquire gil;
      PyThreadState_SetAsyncExc(target_, PyExc_TimeoutError);
    });
  }
  ~RoundWatchdog() {
    {
      py::gil_scoped_release release;  // the worker may be waiting for the GIL
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = true;
      }
      wake_.notify_all();
      worker_.join();
    }
    if (fired_) PyThreadState_SetAsyncExc(target_, nullptr);  // not delivered yet: never raised later, elsewhere
  }
  bool fired() const { return fired_; }

 private:
  unsigned long target_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::atomic<bool> fired_{false};
  std::thread worker_;
};

// A round answered by calling a Python function per case (`one`), under the time-out: once it has passed, the
// case being run and every later one carry it, as every case of a command the CLI kills does.
template <class Outcome_, class Case_, class One>
std::vector<Outcome_> answer_round(const std::vector<Case_>& cases, double timeout, RoundLog& log, One one) {
  py::gil_scoped_acquire gil;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string timed_out = fmt::format("timed out after {:g} s", timeout);
  std::vector<Outcome_> out;
  {
    RoundWatchdog watchdog(timeout);
    for (const Case_& c : cases) {
      out.push_back(watchdog.fired() ? Outcome_{} : one(c));
      if (watchdog.fired()) out.back().error = "the function " + timed_out;
    }
    if (watchdog.fired()) log.failure = timed_out;
  }
  log.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// A Python callable as an implementation: fn(q, k, v, gamma=, normalized=, eps=, ridge=) -> o, or with
// state=True fn(q, k, v, initial_state=dict | None, **options) -> (o, final_state dict). Whatever it raises
// or returns wrongly is a finding of that case, never an exception out of verify().
class CallableImplementation : public Implementation {
 public:
  CallableImplementation(py::object fn, double timeout) : fn_(std::move(fn)), keywords_(fn_), timeout_(timeout) {}

  std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog& log) override {
    return answer_round<Outcome>(cases, timeout_, log, [&](const Case& c) { return one(c, req); });
  }

 private:
  Outcome one(const Case& c, const Request& req) {
    Outcome o;
    const bool f32 = req.dtype == DType::float32;
    auto arr = [&](const Mat<double>& m) -> py::object {
      py::array_t<double> a = to_numpy(m);
      return f32 ? py::object(a.attr("astype")("float32")) : py::object(a);
    };
    auto value = [&](const rational& r) { return round_to(req.dtype, from_rational<double>(r)); };
    py::dict kw;
    try {
      // with gates=True, gamma is the case's per-token gates, a 1-D array of the dtype
      if (req.gates)
        keywords_.pass(kw, "gamma", arr(Mat<double>(c.gamma)).attr("reshape")(-1), false);
      else
        keywords_.pass(kw, "gamma", py::float_(value(c.opt.gamma)), c.opt.gamma == 1);
      keywords_.pass(kw, "normalized", py::bool_(c.opt.normalized), !c.opt.normalized);
      keywords_.pass(kw, "eps", py::float_(value(c.opt.eps)), c.opt.eps == 0);
      keywords_.pass(kw, "ridge", py::float_(value(c.opt.ridge)), c.opt.ridge == 0);
      py::object result;
      std::vector<py::object> args{arr(c.in.Q), arr(c.in.K), arr(c.in.V)};
      if (req.grad) args.push_back(arr(c.dO));
      auto call = [&]() {
        py::tuple a(args.size());
        for (std::size_t i = 0; i < args.size(); ++i) a[i] = args[i];
        return fn_(*a, **kw);
      };
      // With grad=True the function returns (o, dq, dk, dv[, final_state]); the gradients follow o. With gates=True
      // too it may return dgamma (∂L/∂γ, shape (n,)) after dv: (o, dq, dk, dv, dgamma[, final_state]).
      std::size_t lead = req.grad ? 4 : 1;
      auto read_gradients = [&](const py::tuple& t) {
        if (!req.grad) return;
        const Eigen::Index n = c.n(), d = c.in.Q.cols(), dv = c.in.V.cols();
        o.dQ = read_array(t[1], req, n, d, "dq", false);
        o.dK = read_array(t[2], req, n, d, "dk", false);
        o.dV = read_array(t[3], req, n, dv, "dv", false);
        if (lead == 5) o.dgamma = read_array(t[4], req, n, 1, "dgamma", true);
      };
      // the tuple's length says whether dgamma is there: one more than without it
      auto with_dgamma = [&](const py::tuple& t, std::size_t without) {
        if (req.grad && req.gates && t.size() == without + 1) lead = 5;
      };
      if (req.state) {
        py::object init = py::none();
        if (!c.state_in.parts.empty()) {
          py::dict d;
          const std::vector<PartShape> layout = state_layout(req.op, c.in.Q.cols(), c.in.V.cols());
          for (const auto& [name, m] : c.state_in.parts) {
            py::object a = arr(m);
            const bool vector = std::any_of(layout.begin(), layout.end(),
                                            [&](const PartShape& p) { return p.name == name && p.vector; });
            d[py::str(name)] = vector ? py::object(a.attr("reshape")(m.rows())) : a;
          }
          init = d;
        }
        keywords_.pass(kw, "initial_state", init, false);
        result = call();
        py::tuple t = result.cast<py::tuple>();
        with_dgamma(t, lead + 1);
        if (t.size() != lead + 1)
          throw InputError(
              req.grad ? req.gates ? "with state=True, grad=True, gates=True the function must return (o, dq, dk, dv[, "
                                     "dgamma], final_state)"
                                   : "with state=True, grad=True the function must return (o, dq, dk, dv, final_state)"
                       : "with state=True the function must return (o, final_state)");
        o.O = read_array(t[0], req, c.n(), c.in.V.cols(), "o", false);
        read_gradients(t);
        if (c.want_state) {
          py::dict st = t[lead].cast<py::dict>();
          for (const PartShape& p : state_layout(req.op, c.in.Q.cols(), c.in.V.cols())) {
            if (!st.contains(p.name)) throw InputError("final_state has no part '" + p.name + "'");
            o.state_out.parts.emplace_back(
                p.name, read_array(st[py::str(p.name)], req, p.rows, p.cols, "final_state['" + p.name + "']",
                                   p.vector || p.cols == 1));
          }
        }
      } else {
        result = call();
        if (req.grad) {
          py::tuple t = result.cast<py::tuple>();
          with_dgamma(t, 4);
          if (t.size() != lead)
            throw InputError(req.gates ? "with grad=True, gates=True the function must return (o, dq, dk, dv[, dgamma])"
                                       : "with grad=True the function must return (o, dq, dk, dv)");
          o.O = read_array(t[0], req, c.n(), c.in.V.cols(), "o", false);
          read_gradients(t);
        } else {
          o.O = read_array(result, req, c.n(), c.in.V.cols(), "o", false);
        }
      }
      o.error = check_returned_output(c, o.O);
      if (o.error.empty()) o.error = check_returned_state(c, o.state_out, req);
      if (o.error.empty()) o.error = check_returned_gradients(c, o, req);
    } catch (py::error_already_set& e) { o.error = raised(e); } catch (const std::exception& e) {
      o.error = e.what();
    }
    return o;
  }

  // Which keywords fn takes: all of them with **kwargs (or when Python cannot say, as for some builtins),
  // else its named parameters. An option fn does not take is left out when it is at its neutral value
  // (fn(q, k, v) for plain hla2 is fine) and is an error otherwise: a silently ignored γ is a wrong verdict.
  // The returned array as the protocol wants it: a NumPy array of the case's dtype and shape. A torch
  // tensor (detached, moved to the CPU) or anything else NumPy can convert (JAX, CuPy via __array__) is
  // taken as NumPy would see it; the dtype is not converted, so a float32 answer to a float64 battery is
  // still reported.
  static Mat<double> read_array(const py::handle& h, const Request& req, Eigen::Index rows, Eigen::Index cols,
                                const std::string& what, bool vector_ok) {
    py::object obj = py::reinterpret_borrow<py::object>(h);
    if (!py::isinstance<py::array>(obj)) {
      const std::string type = py::str(py::type::of(obj).attr("__name__"));
      try {
        if (py::hasattr(obj, "detach") && py::hasattr(obj, "cpu")) obj = obj.attr("detach")().attr("cpu")();
        if (!py::hasattr(obj, "__array__")) throw InputError("");
        obj = py::module_::import("numpy").attr("asarray")(obj);
      } catch (const std::exception&) {
        throw InputError(what + " is a " + type + ", expected a NumPy array (or a tensor NumPy can convert)");
      }
    }
    py::array a = py::reinterpret_borrow<py::array>(obj);
    const std::string kind = py::str(a.dtype());
    const std::string want = dtype_name(req.dtype);
    if (kind != want) throw InputError(what + " is " + kind + ", expected " + want);
    const bool as_vector = vector_ok && a.ndim() == 1 && a.shape(0) == rows;
    if (!as_vector && (a.ndim() != 2 || a.shape(0) != rows || a.shape(1) != cols)) {
      std::ostringstream s;
      s << what << " has shape (";
      for (py::ssize_t i = 0; i < a.ndim(); ++i) s << (i ? ", " : "") << a.shape(i);
      s << "), expected (" << rows << ", " << cols << ")";
      throw InputError(s.str());
    }
    DoubleArray d = DoubleArray::ensure(as_vector ? py::object(a.attr("reshape")(rows, 1)) : py::object(a));
    return to_matrix(d, what);
  }

  py::object fn_;
  Keywords keywords_;
  double timeout_;
};

// The report as Python objects; a non-UTF-8 byte in it (a function's message) becomes U+FFFD (io/files.hpp).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(json_text(j)); }

// fla's calling convention (fla-org/flash-linear-attention: every op takes torch tensors [B, T, H, K] — or head-first
// [B, H, T, K] — on the device, a `scale` on the queries, `initial_state` / `output_final_state` tuples, and returns
// (o, final_state)), turned into the battery's: one case in batch 0, head 0. Written in Python, run once per verify().
//   scale      passed as `scale=` when fn names it: 1.0 unless declared, so that the op computes SPEC's operator; a
//              declared scale s is undone by handing fn q / s (exact when s is a power of two)
//   options    `normalized` as `normalize` or `normalized`, `eps`, `ridge`, as fn names them (an option fn does not
//              take must be at its neutral value); with gates, `g` (log-gates, fla's) or `gamma`, shape [B, T, H]
//   state      the tuple's entries are SPEC's parts in order (hla_harness.state_parts), each [B, H, ...]
// clang-format off
constexpr const char* kFlaAdapter = R"python(
import inspect
import numpy as np


def fla_adapter(fn, parts, layout, scale, device, state):
    import torch
    if layout not in ("bthk", "bhtk"):
        raise ValueError(f"layout must be 'bthk' ([B, T, H, K], fla's) or 'bhtk' (head-first), not {layout!r}")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    every = {"scale", "normalize", "eps", "ridge", "g"}
    try:
        params = inspect.signature(fn).parameters.values()
        names = {p.name for p in params}
        if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
            names |= every  # **kwargs: fla's keywords
    except (TypeError, ValueError):
        names = every

    def to4(x):
        t = torch.from_numpy(np.ascontiguousarray(x)).to(dev)
        return t[None, :, None, :] if layout == "bthk" else t[None, None, :, :]

    def from4(t):
        t = t.detach().to("cpu")
        return (t[0, :, 0, :] if layout == "bthk" else t[0, 0, :, :]).numpy()

    def call(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None):
        kw = {}
        if "scale" in names:
            s = 1.0 if scale is None else float(scale)
            kw["scale"] = s
            q = q / q.dtype.type(s) if s != 1.0 else q
        elif scale is not None:
            raise TypeError("scale declared, but the function takes no 'scale'")
        norm = "normalize" if "normalize" in names else "normalized" if "normalized" in names else None
        for name, value, neutral in ((norm, normalized, False), ("eps", eps, 0.0), ("ridge", ridge, 0.0)):
            if name in names:
                kw[name] = value
            elif value != neutral:
                raise TypeError(f"the function takes no keyword for this option (value {value!r})")
        if np.ndim(gamma) == 1:
            g = torch.from_numpy(np.ascontiguousarray(gamma)).to(dev)
            g = g[None, :, None] if layout == "bthk" else g[None, None, :]
            if "g" in names:
                kw["g"] = torch.log(g)
            elif "gamma" in names:
                kw["gamma"] = g
            else:
                raise TypeError("gates=True, but the function takes no 'g' (log-gates) or 'gamma'")
        elif gamma != 1.0:
            raise TypeError("a decay gamma, but the function takes no gates")
        if state:
            kw["output_final_state"] = True
            if initial_state is not None:
                kw["initial_state"] = tuple(torch.from_numpy(np.ascontiguousarray(initial_state[p]))[None, None].to(dev)
                                            for p in parts)
        out = fn(to4(q), to4(k), to4(v), **kw)
        o, final = out if isinstance(out, tuple) else (out, None)
        if not state:
            return from4(o)
        if final is None or len(final) != len(parts):
            raise ValueError(f"final_state must be a tuple of the {len(parts)} parts {parts}")
        return from4(o), {p: x.detach().to("cpu")[0, 0].numpy() for p, x in zip(parts, final)}

    return call
)python";
// clang-format on

py::object fla_adapter(py::object fn, const std::string& op, const std::string& layout, const py::object& scale,
                       const std::string& device, bool state) {
  py::dict scope;
  py::exec(kFlaAdapter, scope);
  py::list parts;
  for (const PartShape& p : state_layout(op, 2, 3)) parts.append(p.name);
  return scope["fla_adapter"](fn, py::tuple(parts), layout, scale, device, state);
}

py::object verify_callable(py::object fn, const std::string& op, const py::object& gamma, bool normalized,
                           const py::object& eps, const py::object& ridge, const std::string& dtype, bool state,
                           long max_n, long d, long dv, std::uint64_t seed, int shrink_rounds, bool diagnose,
                           bool fixed_d, long n_multiple, const std::string& precision, bool grad, double timeout,
                           bool gates, std::pair<double, double> gate_range, const std::string& layout,
                           const py::object& scale, const std::string& device) {
  if (!PyCallable_Check(fn.ptr())) throw InputError("verify: fn must be callable");
  check_thread_environment();
  if (!layout.empty()) {
    if (grad) throw InputError("verify: layout= (fla's convention) takes no grad=True yet");
    fn = fla_adapter(fn, op, layout, scale, device, state);
  } else if (!scale.is_none() || !device.empty()) {
    throw InputError("verify: scale= and device= go with layout= (fla's calling convention)");
  }
  Request req;
  req.op = op;
  req.opt = options_of(gamma, normalized, eps, ridge);
  req.dtype = parse_dtype(dtype);
  if (!precision.empty()) req.precision = parse_precision(precision);
  req.state = state;
  req.grad = grad;
  req.max_n = max_n;
  req.d = d;
  req.dv = dv;
  req.seed = seed;
  req.fixed_widths = fixed_d;
  req.n_multiple = n_multiple;
  req.gates = gates;
  req.gate_lo = gate_range.first;
  req.gate_hi = gate_range.second;
  CallableImplementation impl(fn, checked_timeout(timeout));
  BatteryOptions bo;
  bo.shrink_rounds = shrink_rounds;
  bo.diagnose = diagnose;
  nlohmann::json report;
  {
    py::gil_scoped_release release;  // the harness's own work runs without the GIL; the callable takes it
    report = run_battery(impl, req, bo);
  }
  return to_python(report);
}

// A segment function and a combine as the combine battery sees them (verify/combine.hpp):
//   segment(q, k, v, gamma=) -> {part: array}        combine(a, b[, a_tokens=, b_tokens=, gamma=]) -> {part: array}
// Keywords follow each function's signature, as for verify(): the combine's are passed only if it names them.
class CallableCombine : public CombineImplementation {
 public:
  CallableCombine(py::object segment, py::object combine, double timeout)
      : segment_(std::move(segment)),
        combine_(std::move(combine)),
        segment_keywords_(segment_),
        combine_keywords_(combine_),
        timeout_(timeout) {}
  std::vector<CombineOutcome> run(const std::vector<CombineCase>& cases, const Request& req, RoundLog& log) override {
    return answer_round<CombineOutcome>(cases, timeout_, log, [&](const CombineCase& c) { return one(c, req); });
  }

 private:
  static py::object numpy_of(const Part& p, DType t) {
    std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
    py::array_t<double> a(shape);
    std::copy(p.values.begin(), p.values.end(), a.mutable_data());
    return t == DType::float32 ? py::object(a.attr("astype")("float32")) : py::object(a);
  }
  static py::dict dict_of(const Summary& s, DType t) {
    py::dict d;
    for (const Part& p : s) d[py::str(p.name)] = numpy_of(p, t);
    return d;
  }
  static Summary summary_of(const py::object& result, DType t, const std::string& what) {
    if (!py::isinstance<py::dict>(result)) throw InputError(what + " must return a dict {part name: array}");
    Summary s;
    for (const auto& [key, value] : result.cast<py::dict>()) {
      const std::string name = py::str(key);
      py::object obj = py::reinterpret_borrow<py::object>(value);
      if (py::hasattr(obj, "detach") && py::hasattr(obj, "cpu")) obj = obj.attr("detach")().attr("cpu")();
      py::array a = py::module_::import("numpy").attr("asarray")(obj);
      const std::string kind = py::str(a.dtype());
      if (kind != dtype_name(t))
        throw InputError(what + " part '" + name + "' is " + kind + ", expected " + dtype_name(t));
      if (a.ndim() > 2) throw InputError(what + " part '" + name + "' has " + std::to_string(a.ndim()) + " dimensions");
      DoubleArray d = DoubleArray::ensure(a);
      Part p{name, {}, std::vector<double>(d.data(), d.data() + d.size())};
      for (py::ssize_t i = 0; i < a.ndim(); ++i) p.shape.push_back(static_cast<std::size_t>(a.shape(i)));
      s.push_back(std::move(p));
    }
    std::sort(s.begin(), s.end(), [](const Part& x, const Part& y) { return x.name < y.name; });
    return s;
  }
  CombineOutcome one(const CombineCase& c, const Request& req) {
    CombineOutcome o;
    const double g = round_to(req.dtype, from_rational<double>(c.opt.gamma));
    try {
      if (c.kind == CombineKind::segment) {
        auto arr = [&](const Mat<double>& m) {
          py::array_t<double> a = to_numpy(m);
          return req.dtype == DType::float32 ? py::object(a.attr("astype")("float32")) : py::object(a);
        };
        py::dict kw;
        segment_keywords_.pass(kw, "gamma", py::float_(g), c.opt.gamma == 1, "segment");
        o.summary = summary_of(segment_(arr(c.tokens.Q), arr(c.tokens.K), arr(c.tokens.V), **kw), req.dtype, "segment");
      } else {
        // The token counts and γ are there for a combine that wants them (ρ from γ^length); one that keeps ρ in
        // its parts needs none of them.
        py::dict kw;
        combine_keywords_.pass(kw, "a_tokens", py::int_(c.a_tokens), true, "combine");
        combine_keywords_.pass(kw, "b_tokens", py::int_(c.b_tokens), true, "combine");
        combine_keywords_.pass(kw, "gamma", py::float_(g), true, "combine");
        o.summary = summary_of(combine_(dict_of(c.a, req.dtype), dict_of(c.b, req.dtype), **kw), req.dtype, "combine");
      }
    } catch (py::error_already_set& e) { o.error = raised(e); } catch (const std::exception& e) {
      o.error = e.what();
    }
    return o;
  }
  py::object segment_, combine_;
  Keywords segment_keywords_, combine_keywords_;
  double timeout_;
};

py::object verify_combine(py::object segment, py::object combine, const std::string& op, const py::object& gamma,
                          const std::string& dtype, const py::object& parts, long d, long dv, std::uint64_t seed,
                          double timeout) {
  if (!PyCallable_Check(segment.ptr()) || !PyCallable_Check(combine.ptr()))
    throw InputError("verify_combine: segment and combine must be callable");
  check_thread_environment();
  Request req;
  req.op = op;
  req.opt.gamma = exact_param(gamma, "gamma");
  req.dtype = parse_dtype(dtype);
  req.d = d;
  req.dv = dv;
  req.seed = seed;
  PartMap map;
  if (!parts.is_none())
    for (const auto& [user, target] : parts.cast<py::dict>())
      map.emplace_back(py::str(user), target.is_none() ? std::string() : std::string(py::str(target)));
  CallableCombine impl(segment, combine, checked_timeout(timeout));
  nlohmann::json report;
  {
    py::gil_scoped_release release;
    report = run_combine_battery(impl, req, map);
  }
  return to_python(report);
}

}  // namespace

PYBIND11_MODULE(hla_harness, m) {
  m.doc() = "HLA harness: exact references and verification of outside HLA implementations";
  // C++ input errors become ValueError with the message the CLI prints.
  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<NumericalError>(m, "NumericalError", PyExc_ArithmeticError);
  m.def("reference", &reference, py::arg("op"), py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
        py::arg("gamma") = 1.0, py::arg("normalized") = false, py::arg("eps") = 0.0, py::arg("ridge") = 0.0,
        py::arg("precision") = "exact",
        "SPEC's operator `op` on q (n x d), k (n x d), v (n x dv) by its literal sum: 'exact' (rationals, rounded "
        "once at the end), 'mpfr' (256 bits) or 'float64'. gamma/eps/ridge: numbers (exact as given) or strings like "
        "'3/4'.");
  m.def("verify", &verify_callable, py::arg("fn"), py::arg("op"), py::kw_only(), py::arg("gamma") = 1.0,
        py::arg("normalized") = false, py::arg("eps") = 0.0, py::arg("ridge") = 0.0, py::arg("dtype") = "float64",
        py::arg("state") = false, py::arg("max_n") = 512, py::arg("d") = 16, py::arg("dv") = 16, py::arg("seed") = 1,
        py::arg("shrink_rounds") = 8, py::arg("diagnose") = true, py::arg("fixed_d") = false, py::arg("n_multiple") = 1,
        py::arg("precision") = "", py::arg("grad") = false, py::arg("timeout") = 300.0, py::arg("gates") = false,
        py::arg("gate_range") = std::pair<double, double>(0.8, 1.0), py::arg("layout") = "",
        py::arg("scale") = py::none(), py::arg("device") = "",
        "Runs the `hla verify` battery on fn(q, k, v, gamma=, normalized=, eps=, ridge=) -> o (NumPy in and out; "
        "with state=True: fn(q, k, v, initial_state=dict|None, **options) -> (o, final_state dict); with grad=True "
        "fn(q, k, v, do, **options) -> (o, dq, dk, dv), with both (o, dq, dk, dv, final_state); with gates=True "
        "gamma= is the per-token gates, an array of shape (n,), the random cases' drawn from gate_range, and with "
        "grad=True "
        "fn may return dgamma (shape (n,)) after dv: (o, dq, dk, dv, dgamma[, final_state])). Returns the "
        "report as a dict with the keys of `hla verify --json` ('verdict', 'matches', 'counterexample', ...). "
        "timeout: "
        "seconds per "
        "round, as the CLI's --timeout: past it TimeoutError is raised inside fn and the round's remaining cases "
        "carry "
        "the "
        "time-out. KeyboardInterrupt (Ctrl-C) inside fn stops the battery. layout='bthk' or 'bhtk': fn in fla's "
        "convention, fn(q, k, v, scale=, normalize=, eps=, ridge=, g=, initial_state=tuple, output_final_state=) "
        "-> (o, final_state), torch tensors [B, T, H, K] (or head-first) on device (default: CUDA when present, "
        "else the CPU); scale= declares the scale fn applies to q (passed as 1.0 when not declared).");
  m.def("verify_combine", &verify_combine, py::arg("segment"), py::arg("combine"), py::arg("op"), py::kw_only(),
        py::arg("gamma") = 1.0, py::arg("dtype") = "float64", py::arg("parts") = py::none(), py::arg("d") = 16,
        py::arg("dv") = 16, py::arg("seed") = 1, py::arg("timeout") = 300.0,
        "Runs the `hla verify --combine` battery on an outside scan operator: segment(q, k, v, gamma=) -> {part: "
        "array} "
        "and combine(a, b) -> {part: array} (a precedes b; a_tokens=, b_tokens=, gamma= passed if it names them or "
        "takes "
        "**kwargs). parts: {your name: SPEC name "
        "or None}. Returns the report as a dict ('verdict', 'checks', 'counterexample', ...).");
  m.def(
      "state_parts",
      [](const std::string& op, long d, long dv) {
        // The layout is read off a run of one token at these widths: held to the harness's widths and memory first
        // (d = -1 was a MemoryError, d = 30000 allocated for 31 s).
        check_thread_environment();
        require_shape(Shape{1, d, dv}, "state_parts('" + op + "')", bytes_per_value<double>());
        std::vector<std::pair<std::string, std::vector<long>>> out;
        for (const PartShape& p : state_layout(op, d, dv))
          out.push_back({p.name, p.vector ? std::vector<long>{p.rows} : std::vector<long>{p.rows, p.cols}});
        return out;
      },
      py::arg("op"), py::arg("d"), py::arg("dv"), "The state's part names and shapes (SPEC's names).");
}
