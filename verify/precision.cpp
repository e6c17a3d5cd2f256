// Reduced-precision emulation (precision.hpp).
#include "verify/precision.hpp"

#include <fmt/core.h>

#include <cmath>
#include <sstream>

#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "fast/scan/gated.hpp"
#include "fast/scan/operators.hpp"
#include "verify/battery.hpp"
#include "verify/implementation.hpp"

namespace hla::verify::ext {

double round_to_format(double x, Precision p) {
  if (!std::isfinite(x) || x == 0) return x;
  const int bits = precision_model(p, DType::float64).significand_bits;
  if (p == Precision::fp64) return x;
  if (p == Precision::fp32) return static_cast<double>(static_cast<float>(x));
  // Exponent range: fp16 is normal from 2^-14 to 65504 (subnormal quantum 2^-24); bf16 and tf32 have fp32's.
  const int min_exp = p == Precision::fp16 ? -14 : -126;
  const double max_finite = p == Precision::fp16 ? 65504.0 : static_cast<double>(std::numeric_limits<float>::max());
  int e = 0;
  std::frexp(x, &e);                                // |x| = f · 2^e, f ∈ [0.5, 1)
  const int lsb = std::max(e, min_exp + 1) - bits;  // the quantum of x's binade (or of the subnormals)
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -lsb)), lsb);  // nearbyint: ties to even
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}

Mat<double> round_to_format(const Mat<double>& m, Precision p) {
  return m.unaryExpr([p](double x) { return round_to_format(x, p); });
}

namespace {

Problem<float> in_format(const Problem<double>& p, Precision prec) {
  auto f = [prec](const Mat<double>& m) { return Mat<float>(round_to_format(m, prec).cast<float>()); };
  return {f(p.Q), f(p.K), f(p.V)};
}

NamedState<double> widened(const NamedState<float>& s) {
  NamedState<double> out;
  for (const auto& [name, m] : s.parts) out.parts.emplace_back(name, Mat<double>(m.cast<double>()));
  return out;
}

// The emulations as an implementation, so that the calibration runs them through the battery itself.
class EmulatedImplementation : public Implementation {
 public:
  EmulatedImplementation(Precision p, bool accumulate) : prec_(p), accumulate_(accumulate) {}
  std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog&) override {
    std::vector<Outcome> out(cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      try {
        const ColVec<double>* gates = cases[i].gamma.size() ? &cases[i].gamma : nullptr;
        out[i].O = (accumulate_ ? emulate_format_accumulation : emulate_format_kernel)(req.op, cases[i].in,
                                                                                       cases[i].opt, prec_, gates)
                       .O;
      } catch (const std::exception& e) { out[i].error = e.what(); }
    }
    return out;
  }

 private:
  Precision prec_;
  bool accumulate_;
};

}  // namespace

namespace {

// The operator's fold I_t = I_{t−1} ⊕ T_t in fp32 (fast/scan: the corrected operator, which the tests prove
// equal to the serial form and the reference), read out from I_t rounded to the format — the inclusive state
// as the operand of the read-out's products — and, when `accumulate`, with I_t itself kept in the format.
template <class Op> Run<double> emulate_fold(const Op& op, const Problem<double>& p, Precision prec, bool accumulate) {
  using Serial = typename Op::Serial;
  const Problem<float> x = in_format(p, prec);
  auto rounded = [&](const Serial& st) {
    NamedState<float> named = export_state<Serial, float>(st);
    for (auto& [name, m] : named.parts)
      m = round_to_format(Mat<double>(m.template cast<double>()), prec).template cast<float>();
    return load_state<Serial>(&named, p.d(), p.dv());
  };
  Mat<float> O(p.n(), p.dv());
  typename Op::Seg I = op.identity(p.d(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    const scan::TokenRows<float> token(x, t);
    I = op.combine(I, op.token(token));
    if (accumulate) I.st = rounded(I.st);
    typename Op::Seg operand = I;
    operand.st = rounded(I.st);
    op.read(operand, token, t, O.row(t));
  }
  if (!O.allFinite())
    throw NumericalError("the emulated kernel's output is not finite (a vanishing normalizer in the format)");
  return {round_to_format(Mat<double>(O.cast<double>()), prec), widened(export_state<Serial, float>(I.st))};
}

// With per-token gates (--gates): the gated scan operator (fast/scan/gated.hpp: the same fold, each token's segment
// carrying its own gate as ρ), the gates in fp32 (the accumulation's format: a kernel forms its gate products there).
Run<double> emulate(const std::string& op, const Problem<double>& p, const Options& opt, Precision prec,
                    bool accumulate, const ColVec<double>* gates) {
  if (gates) {
    if (gates->size() != p.n()) throw InputError("emulated kernel: one gate per token");
    const ColVec<float> g = gates->cast<float>();
    return scan::with_gated_scan_op<float>(op, opt, g,
                                           [&](const auto& o) { return emulate_fold(o, p, prec, accumulate); });
  }
  return scan::with_scan_op<float>(op, scan::Variant::corrected, opt,
                                   [&](const auto& o) { return emulate_fold(o, p, prec, accumulate); });
}

}  // namespace

Run<double> emulate_format_kernel(const std::string& op, const Problem<double>& p, const Options& opt, Precision prec,
                                  const ColVec<double>* gates) {
  return emulate(op, p, opt, prec, false, gates);
}

Run<double> emulate_format_accumulation(const std::string& op, const Problem<double>& p, const Options& opt,
                                        Precision prec, const ColVec<double>* gates) {
  return emulate(op, p, opt, prec, true, gates);
}

std::string EmulatedFormat::key() const { return precision_name(precision) + (state_in_format ? "-state" : ""); }

std::string EmulatedFormat::description() const {
  const std::string names[] = {"fp64", "fp32", "TF32", "bf16", "fp16"};
  const std::string name = names[static_cast<int>(precision)];
  if (state_in_format) return "a " + name + " state (the recurrent state kept in " + name + ")";
  if (precision == Precision::fp32 || precision == Precision::fp64) return name + " arithmetic";
  return name + " products with fp32 accumulation";
}

std::vector<EmulatedFormat> coarser_formats(Precision declared) {
  const int bits = precision_model(declared, DType::float64).significand_bits;
  std::vector<EmulatedFormat> out;
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16})
    if (precision_model(p, DType::float64).significand_bits < bits) out.push_back({p, false});
  out.push_back({Precision::bf16, true});
  return out;
}

Run<double> emulate_format(const std::string& op, const Problem<double>& p, const Options& opt, const EmulatedFormat& f,
                           const ColVec<double>* gates) {
  return emulate(op, p, opt, f.precision, f.state_in_format, gates);
}

nlohmann::json calibration(const std::string& op, const Options& opt, long max_n, long d, long dv,
                           std::ostream* progress) {
  nlohmann::json rows = nlohmann::json::array();
  for (Precision p : {Precision::tf32, Precision::bf16, Precision::fp16}) {
    for (bool accumulate : {false, true}) {
      Request req;
      req.op = op;
      req.opt = opt;
      req.dtype = DType::float32;
      req.precision = p;
      req.max_n = max_n;
      req.d = d;
      req.dv = dv;
      EmulatedImplementation impl(p, accumulate);
      BatteryOptions bo;
      bo.diagnose = false;
      bo.shrink_rounds = 0;
      const std::string kernel = accumulate ? "accumulates in the format" : "correct (fp32 accumulation)";
      if (progress) *progress << "calibrate: " << precision_name(p) << ", " << kernel << " ...\n";
      const nlohmann::json rep = run_battery(impl, req, bo);
      nlohmann::json row = {{"precision", precision_name(p)},
                            {"kernel", kernel},
                            {"verdict", rep["verdict"]},
                            {"exact_failed", rep["exact"]["failed"]},
                            {"random", rep["random"]}};
      rows.push_back(row);
    }
  }
  return {{"op", op},
          {"options",
           {{"gamma", format_rational(opt.gamma)},
            {"normalized", opt.normalized},
            {"eps", format_rational(opt.eps)},
            {"ridge", format_rational(opt.ridge)}}},
          {"d", d},
          {"dv", dv},
          {"calibration_factor", kCalibrationFactor},
          {"rows", rows}};
}

std::string calibration_text(const nlohmann::json& c) {
  std::ostringstream s;
  s << fmt::format(
      "calibration of --precision for {} (gamma={}{}), d = {}, dv = {}: error in units of the format's u "
      "and as a multiple of the bound\n",
      c["op"].get<std::string>(), c["options"]["gamma"].get<std::string>(),
      c["options"]["normalized"].get<bool>() ? ", normalized eps=" + c["options"]["eps"].get<std::string>() : "",
      c["d"].get<long>(), c["dv"].get<long>());
  for (const auto& r : c["rows"]) {
    s << fmt::format("  {:<5} {:<28} verdict {:<16}", r["precision"].get<std::string>(), r["kernel"].get<std::string>(),
                     r["verdict"].get<std::string>());
    for (const auto& x : r["random"]) {
      auto num = [](const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; };
      s << fmt::format(" n={}: {:.3g} u ({:.2g}x)", x["n"].get<long>(), num(x["error_in_u"]), num(x["worst_ratio"]));
    }
    s << "\n";
  }
  return s.str();
}

}  // namespace hla::verify::ext
