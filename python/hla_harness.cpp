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
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

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

// The most cases one packed call holds (layout=): B = 3 batches of H = 4 heads.
constexpr long kPackedCall = 12;

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
// With a packer (layout=: an op in fla's convention takes [B, T, H, K]), the round's cases that can share a call (the
// same shapes, options and kinds of input: pack_key) go to packer(items, B, H, G) in calls of B × H cases
// (pack_shapes), items being each case's (args, keywords) as fn would get them; it returns each case's answer as fn
// would, and the case's Slot says where it sat. A case marked alone is called by itself. G > 1 (GQA): each run of G
// heads shares its keys, values and gates (Request::shared_kv), which go in once, as one key/value head.
class CallableImplementation : public Implementation {
 public:
  CallableImplementation(py::object fn, double timeout, py::object packer = py::none())
      : fn_(std::move(fn)), packer_(std::move(packer)), keywords_(fn_), timeout_(timeout) {}

  std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog& log) override {
    if (packer_.is_none())
      return answer_round<Outcome>(cases, timeout_, log, [&](const Case& c) { return one(c, req); });
    // Each call is made when its first case comes up (answer_round goes case by case, under the time-out).
    std::vector<std::vector<std::size_t>> calls;
    std::vector<std::pair<std::size_t, std::size_t>> where(cases.size());  // case → (call, place in it)
    std::vector<std::pair<long, long>> shapes;
    std::map<std::string, std::vector<std::size_t>> groups;
    std::vector<std::string> order;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const std::string key = cases[i].alone ? "alone " + std::to_string(i) : pack_key(cases[i], req);
      if (!groups.count(key)) order.push_back(key);
      groups[key].push_back(i);
    }
    for (const std::string& key : order) {
      const std::vector<std::size_t>& g = groups[key];
      std::size_t next = 0;
      for (const auto& [batch, heads] : pack_shapes(static_cast<long>(g.size()), req.shared_kv)) {
        calls.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(next),
                           g.begin() + static_cast<std::ptrdiff_t>(next + static_cast<std::size_t>(batch * heads)));
        shapes.push_back({batch, heads});
        for (std::size_t j = 0; j < calls.back().size(); ++j) where[calls.back()[j]] = {calls.size() - 1, j};
        next += static_cast<std::size_t>(batch * heads);
      }
    }
    std::vector<std::vector<Outcome>> answered(calls.size());
    return answer_round<Outcome>(cases, timeout_, log, [&](const Case& c) {
      const auto [call, place] = where[static_cast<std::size_t>(&c - cases.data())];
      if (answered[call].empty()) {
        std::vector<const Case*> members;
        for (std::size_t i : calls[call]) members.push_back(&cases[i]);
        answered[call] = call_packed(members, shapes[call].first, shapes[call].second, req);
      }
      return answered[call][place];
    });
  }

 private:
  // Cases that one call can hold: the same n, d, dv and options, and the same kinds of input (gates, a state handed
  // in, a state asked for, an upstream gradient).
  static std::string pack_key(const Case& c, const Request& req) {
    return fmt::format("{} {} {} {} {} {} {} {} {} {} {}", c.n(), c.in.Q.cols(), c.in.V.cols(),
                       format_rational(c.opt.gamma), c.opt.normalized, format_rational(c.opt.eps),
                       format_rational(c.opt.ridge), c.gamma.size() > 0, !c.state_in.parts.empty(),
                       c.want_state && req.state, c.dO.size() > 0);
  }

  // The calls' (B, H) for `count` cases that can share them: B, H ≥ 2 wherever four or more are left (up to 3 × 4 =
  // kPackedCall, so that a fault at a third batch or a fourth head shows), the rest in one call of 1 × r. With GQA
  // (runs of `shared` cases sharing keys and values), 2 × 2·shared: two key/value heads in each of two batches.
  static std::vector<std::pair<long, long>> pack_shapes(long count, long shared) {
    std::vector<std::pair<long, long>> out;
    for (; shared > 1 && count >= 4 * shared; count -= 4 * shared) out.push_back({2, 2 * shared});
    while (count >= 4) {
      std::pair<long, long> best{2, 2};
      for (long b = 2; b <= 3; ++b)
        for (long h = 2; h <= 4; ++h)
          if (b * h <= std::min(count, kPackedCall) && b * h >= best.first * best.second) best = {b, h};
      out.push_back(best);
      count -= best.first * best.second;
    }
    if (count > 0) out.push_back({1, count});
    return out;
  }

  // One call of the packer for `members` (B × H of them, case i at (i / H, i % H)). What it raises is every member's
  // finding; what it returns is read case by case. The heads come in runs of G = req.shared_kv that share one
  // key/value head where every run's cases have the same keys, values and gates; else G = 1.
  std::vector<Outcome> call_packed(const std::vector<const Case*>& members, long batch, long heads,
                                   const Request& req) {
    const long id = calls_++;
    long groups = heads % req.shared_kv == 0 ? req.shared_kv : 1;
    for (std::size_t i = 0; i < members.size() && groups > 1; ++i) {
      const Case &c = *members[i], &lead = *members[i - i % static_cast<std::size_t>(groups)];
      if (c.in.K != lead.in.K || c.in.V != lead.in.V || c.gamma != lead.gamma) groups = 1;
    }
    std::vector<Outcome> out(members.size());
    try {
      py::list items;
      for (const Case* c : members) {
        auto [args, kw] = arguments(*c, req);
        items.append(py::make_tuple(args, kw));
      }
      const py::list answers = packer_(items, batch, heads, groups);
      if (answers.size() != members.size())
        throw InputError(fmt::format("the adapter returned {} answers for {} cases", answers.size(), members.size()));
      for (std::size_t i = 0; i < members.size(); ++i) out[i] = outcome(*members[i], req, answers[i]);
    } catch (py::error_already_set& e) {
      const std::string m = raised(e);
      for (Outcome& o : out) o = failed(m);
    } catch (const std::exception& e) {
      for (Outcome& o : out) o = failed(e.what());
    }
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i].slot = {id, static_cast<long>(i) / heads, static_cast<long>(i) % heads, batch, heads, groups};
    return out;
  }

  Outcome one(const Case& c, const Request& req) {
    try {
      auto [args, kw] = arguments(c, req);
      return outcome(c, req, fn_(*args, **kw));
    } catch (py::error_already_set& e) { return failed(raised(e)); } catch (const std::exception& e) {
      return failed(e.what());
    }
  }

  // fn's arguments for a case: (q, k, v[, do]) and its keywords (the options, gates, initial_state).
  std::pair<py::tuple, py::dict> arguments(const Case& c, const Request& req) const {
    const bool f32 = req.dtype == DType::float32;
    auto arr = [&](const Mat<double>& m) -> py::object {
      py::array_t<double> a = to_numpy(m);
      return f32 ? py::object(a.attr("astype")("float32")) : py::object(a);
    };
    auto value = [&](const rational& r) { return round_to(req.dtype, from_rational<double>(r)); };
    py::dict kw;
    // with gates=True, gamma is the case's per-token gates, a 1-D array of the dtype
    if (req.gates)
      keywords_.pass(kw, "gamma", arr(Mat<double>(c.gamma)).attr("reshape")(-1), false);
    else
      keywords_.pass(kw, "gamma", py::float_(value(c.opt.gamma)), c.opt.gamma == 1);
    keywords_.pass(kw, "normalized", py::bool_(c.opt.normalized), !c.opt.normalized);
    keywords_.pass(kw, "eps", py::float_(value(c.opt.eps)), c.opt.eps == 0);
    keywords_.pass(kw, "ridge", py::float_(value(c.opt.ridge)), c.opt.ridge == 0);
    if (req.state) {
      py::object init = py::none();
      if (!c.state_in.parts.empty()) {
        py::dict d;
        const std::vector<PartShape> layout = state_layout(req.op, c.in.Q.cols(), c.in.V.cols());
        for (const auto& [name, m] : c.state_in.parts) {
          py::object a = arr(m);
          const bool vector =
              std::any_of(layout.begin(), layout.end(), [&](const PartShape& p) { return p.name == name && p.vector; });
          d[py::str(name)] = vector ? py::object(a.attr("reshape")(m.rows())) : a;
        }
        init = d;
      }
      keywords_.pass(kw, "initial_state", init, false);
    }
    py::tuple args(req.grad ? 4 : 3);
    args[0] = arr(c.in.Q);
    args[1] = arr(c.in.K);
    args[2] = arr(c.in.V);
    if (req.grad) args[3] = arr(c.dO);
    return {args, kw};
  }

  // What fn returned for a case, read and checked: o, or with grad=True (o, dq, dk, dv) — with gates=True dgamma
  // (∂L/∂γ, shape (n,)) may follow dv —, and with state=True final_state last.
  Outcome outcome(const Case& c, const Request& req, const py::object& result) const {
    Outcome o;
    try {
      const Eigen::Index n = c.n(), d = c.in.Q.cols(), dv = c.in.V.cols();
      if (!req.grad && !req.state) {
        o.O = read_array(result, req, n, dv, "o", false);
      } else {
        py::tuple t = result.cast<py::tuple>();
        const std::size_t lead = req.grad ? 4 : 1, more = req.state ? 1 : 0;
        // the tuple's length says whether dgamma is there: one more than without it
        const bool dgamma = req.grad && req.gates && t.size() == lead + more + 1;
        if (t.size() != lead + more + (dgamma ? 1 : 0))
          throw InputError(req.grad && req.state
                               ? req.gates ? "with state=True, grad=True, gates=True the function must return (o, dq, "
                                             "dk, dv[, dgamma], final_state)"
                                           : "with state=True, grad=True the function must return (o, dq, dk, dv, "
                                             "final_state)"
                           : req.grad ? req.gates
                                            ? "with grad=True, gates=True the function must return (o, dq, dk, dv[, "
                                              "dgamma])"
                                            : "with grad=True the function must return (o, dq, dk, dv)"
                                      : "with state=True the function must return (o, final_state)");
        o.O = read_array(t[0], req, n, dv, "o", false);
        if (req.grad) {
          o.dQ = read_array(t[1], req, n, d, "dq", false);
          o.dK = read_array(t[2], req, n, d, "dk", false);
          o.dV = read_array(t[3], req, n, dv, "dv", false);
          if (dgamma) o.dgamma = read_array(t[4], req, n, 1, "dgamma", true);
        }
        if (req.state && c.want_state) {
          py::dict st = t[t.size() - 1].cast<py::dict>();
          for (const PartShape& p : state_layout(req.op, d, dv)) {
            if (!st.contains(p.name)) throw InputError("final_state has no part '" + p.name + "'");
            o.state_out.parts.emplace_back(
                p.name, read_array(st[py::str(p.name)], req, p.rows, p.cols, "final_state['" + p.name + "']",
                                   p.vector || p.cols == 1));
          }
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
      if (a.ndim() == 2 && a.shape(0) == cols && a.shape(1) == rows)
        s << transposed_hint(what.rfind("final_state", 0) == 0);
      throw InputError(s.str());
    }
    DoubleArray d = DoubleArray::ensure(as_vector ? py::object(a.attr("reshape")(rows, 1)) : py::object(a));
    return to_matrix(d, what);
  }

  static Outcome failed(std::string error) {
    Outcome o;
    o.error = std::move(error);
    return o;
  }

  py::object fn_, packer_;
  Keywords keywords_;
  double timeout_;
  long calls_ = 0;  // packed calls made so far (a Slot's call)
};

// The report as Python objects; a non-UTF-8 byte in it (a function's message) becomes U+FFFD (io/files.hpp).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(json_text(j)); }

// fla's calling convention (fla-org/flash-linear-attention: every op takes torch tensors [B, T, H, K] — or head-first
// [B, H, T, K] — on the device, a `scale` on the queries, `initial_state` / `output_final_state` tuples, and returns
// (o, final_state)), turned into the battery's. Written in Python, run once per verify(); it returns a signature
// (the keywords the harness passes each case) and pack(items, B, H), which calls fn once for B × H cases, case i at
// (b, h) = (i // H, i % H), and returns each case's answer.
//   scale      passed as `scale=` when fn names it: 1.0 unless declared, so that the op computes SPEC's operator; a
//              declared scale s is undone by handing fn q / s (exact when s is a power of two)
//   options    `normalized` as `normalize` or `normalized`, `eps`, `ridge`, as fn names them (an option fn does not
//              take must be at its neutral value); with gates, `g` (log-gates, fla's) or `gamma`, shape [B, T, H]
//   state      the tuple's entries are SPEC's parts in order (hla_harness.state_parts), each [B, H, ...]; with
//              state_v_first=True its [K, V] parts (hla2's C, G; linear's S; AHLA's P, E) are [V, K], as fla's ops
//              store them with that keyword (fla/ops/common/chunk_h.py): transposed on the way in and out, and
//              `state_v_first=` passed when fn names it
// clang-format off
constexpr const char* kFlaAdapter = R"python(
import inspect
import numpy as np


def fla_adapter(fn, parts, kv_parts, layout, scale, device, state, state_v_first):
    import torch
    if layout not in ("bthk", "bhtk"):
        raise ValueError(f"layout must be 'bthk' ([B, T, H, K], fla's) or 'bhtk' (head-first), not {layout!r}")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    every = {"scale", "normalize", "eps", "ridge", "g"}
    if state_v_first and not state:
        raise ValueError("state_v_first= goes with state=True")

    def v_first(p, t):  # a [K, V] part as the op keeps it: [V, K] with state_v_first
        return t.transpose(-1, -2).contiguous() if state_v_first and p in kv_parts else t
    try:
        params = inspect.signature(fn).parameters.values()
        names = {p.name for p in params}
        if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
            names |= every  # **kwargs: fla's keywords
    except (TypeError, ValueError):
        names = every

    def signature(q, k, v, do=None, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None):
        raise AssertionError("every call goes through pack")

    def put(xs, B, H, grad=False):  # per-case arrays [T, ...] -> [B, T, H, ...] (bthk) or [B, H, T, ...]
        t = torch.from_numpy(np.ascontiguousarray(np.stack(xs)))
        t = t.reshape(B, H, *t.shape[1:])
        return (t.transpose(1, 2) if layout == "bthk" else t).contiguous().to(dev).requires_grad_(grad)

    def take(t, B, H, what="o"):  # the inverse of put, checked: [B, T, H, ...] -> per-case arrays
        if t.dim() < 3 or (t.shape[0], t.shape[2 if layout == "bthk" else 1]) != (B, H):
            want = "[B, T, H, ...]" if layout == "bthk" else "[B, H, T, ...]"
            raise ValueError(f"{what} has shape {tuple(t.shape)}, expected {want} with B = {B}, H = {H}")
        t = t.detach().to("cpu")
        t = t.transpose(1, 2) if layout == "bthk" else t
        return [t[i // H, i % H].numpy() for i in range(B * H)]

    def pack(items, B, H, G):
        kws = [kw for _, kw in items]
        shared = [{n: x for n, x in kw.items() if n not in ("gamma", "initial_state")} for kw in kws]
        if any(s != shared[0] for s in shared):
            raise ValueError("the cases of one call have different options")
        kw = dict(shared[0])
        grad = len(items[0][0]) == 4  # (q, k, v, do)
        kv = items[::G]  # GQA: each run of G query heads reads one key/value head (h // G)
        q = put([a[0] for a, _ in items], B, H, grad)
        k = put([a[1] for a, _ in kv], B, H // G, grad)
        v = put([a[2] for a, _ in kv], B, H // G, grad)
        leaves, opts = [q, k, v], {}
        if "scale" in names:
            s = 1.0 if scale is None else float(scale)
            opts["scale"] = s
            q = q / s if s != 1.0 else q
        elif scale is not None:
            raise TypeError("scale declared, but the function takes no 'scale'")
        norm = "normalize" if "normalize" in names else "normalized" if "normalized" in names else None
        for name, value, neutral in ((norm, kw.get("normalized", False), False), ("eps", kw.get("eps", 0.0), 0.0),
                                     ("ridge", kw.get("ridge", 0.0), 0.0)):
            if name in names:
                opts[name] = value
            elif value != neutral:
                raise TypeError(f"the function takes no keyword for this option (value {value!r})")
        gammas = [x.get("gamma", 1.0) for x in kws]
        if np.ndim(gammas[0]) == 1:
            g = put(gammas, B, H, grad)  # [B, T, H] or [B, H, T]
            leaves.append(g)
            if "g" in names:
                opts["g"] = torch.log(g)
            elif "gamma" in names:
                opts["gamma"] = g
            else:
                raise TypeError("gates=True, but the function takes no 'g' (log-gates) or 'gamma'")
        elif any(x != 1.0 for x in gammas):
            raise TypeError("a decay gamma, but the function takes no gates")
        if state:
            opts["output_final_state"] = True
            if "state_v_first" in names:
                opts["state_v_first"] = state_v_first
            if kws[0].get("initial_state") is not None:
                inits = [x["initial_state"] for x in kws]
                opts["initial_state"] = tuple(v_first(
                    p, torch.from_numpy(np.stack([st[p] for st in inits])).reshape(B, H, *inits[0][p].shape).to(dev))
                    for p in parts)
        out = fn(q, k, v, **opts)
        o, final = out if isinstance(out, tuple) else (out, None)
        answers = [[x] for x in take(o, B, H)]
        if grad:
            # L = sum <do, o>. With GQA a key/value head's gradient sums over its G query heads: one backward per
            # r < G, with do kept at the query heads h = r (mod G) alone, gives each case its own dk, dv.
            do = put([a[3] for a, _ in items], B, H)
            heads = torch.arange(H, device=dev) % G
            grads = [None] * (B * H)
            for r in range(G):
                mask = (heads == r).to(do.dtype)
                mask = mask[None, None, :, None] if layout == "bthk" else mask[None, :, None, None]
                got = torch.autograd.grad(o, leaves, do * mask, retain_graph=r < G - 1, allow_unused=True)
                # an input autograd did not reach (the op ignores it) has the zero gradient
                got = [torch.zeros_like(x) if d is None else d for x, d in zip(leaves, got)]
                per = [take(x, B, H if j in (0, 3) else H // G, what) for j, (x, what) in
                       enumerate(zip(got, ("dq", "dk", "dv", "dgamma")))]
                for i in range(B * H):
                    if i % G == r:
                        j = i // G
                        grads[i] = [per[0][i], per[1][j], per[2][j]] + ([per[3][i]] if len(per) > 3 else [])
            for i in range(B * H):
                answers[i] += grads[i]
        if state:
            if final is None or len(final) != len(parts):
                raise ValueError(f"final_state must be a tuple of the {len(parts)} parts {parts}")
            for i in range(B * H):
                answers[i].append({p: v_first(p, x.detach().to("cpu"))[i // H, i % H].numpy()
                                   for p, x in zip(parts, final)})
        return [x[0] if len(x) == 1 else tuple(x) for x in answers]

    return signature, pack
)python";
// clang-format on

// The adapter's (signature, pack) for fn (kFlaAdapter).
std::pair<py::object, py::object> fla_adapter(py::object fn, const std::string& op, const std::string& layout,
                                              const py::object& scale, const std::string& device, bool state,
                                              bool state_v_first) {
  py::dict scope;
  py::exec(kFlaAdapter, scope);
  py::list parts, kv_parts;  // every part; those of shape [K, V] (d × dv)
  for (const PartShape& p : state_layout(op, 2, 3)) {
    parts.append(p.name);
    if (p.rows == 2 && p.cols == 3) kv_parts.append(p.name);
  }
  const py::tuple both =
      scope["fla_adapter"](fn, py::tuple(parts), py::tuple(kv_parts), layout, scale, device, state, state_v_first);
  return {both[0], both[1]};
}

py::object verify_callable(py::object fn, const std::string& op, const py::object& gamma, bool normalized,
                           const py::object& eps, const py::object& ridge, const std::string& dtype, bool state,
                           long max_n, long d, long dv, std::uint64_t seed, int shrink_rounds, bool diagnose,
                           bool fixed_d, long n_multiple, const std::string& precision, bool grad, double timeout,
                           bool gates, std::pair<double, double> gate_range, const std::string& layout,
                           const py::object& scale, const std::string& device, long gqa, bool state_v_first) {
  if (!PyCallable_Check(fn.ptr())) throw InputError("verify: fn must be callable");
  if (gqa < 1 || gqa > 8) throw InputError("verify: gqa (query heads per key/value head) must be 1 to 8");
  if (gqa > 1 && layout.empty()) throw InputError("verify: gqa= goes with layout= (fla's calling convention)");
  check_thread_environment();
  py::object packer = py::none();
  if (!layout.empty()) {
    std::tie(fn, packer) = fla_adapter(fn, op, layout, scale, device, state, state_v_first);
  } else if (!scale.is_none() || !device.empty() || state_v_first) {
    throw InputError("verify: scale=, device= and state_v_first= go with layout= (fla's calling convention)");
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
  // a full call for every short shape: 3 × 4 cases, or with GQA 2 batches of 2 key/value heads of gqa query heads
  if (!packer.is_none()) req.per_shape = gqa == 1 ? kPackedCall : 4 * gqa;
  req.shared_kv = gqa;
  CallableImplementation impl(fn, checked_timeout(timeout), packer);
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
        py::arg("scale") = py::none(), py::arg("device") = "", py::arg("gqa") = 1, py::arg("state_v_first") = false,
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
        "else the CPU); scale= declares the scale fn applies to q (passed as 1.0 when not declared); gqa=G: fn takes "
        "G query heads per key/value head (q [B, T, G*H, K], k and v [B, T, H, ...]); state_v_first=True: fn's "
        "state keeps its [K, V] parts as [V, K] (fla's keyword of that name).");
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
