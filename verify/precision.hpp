// Reduced precisions for `hla verify --precision tf32|bf16|fp16`, emulated inside the harness.
//
// A kernel that declares a narrow format is judged as a kernel in that format: its inputs and the operands of
// its matrix products are in the format, its accumulation and state in fp32 (how tensor-core kernels
// compute), and its outputs may be rounded to the format. No worst-case bound separates such a kernel from
// one that also *accumulates* in the format: the operand roundings alone allow γ_h(u)·2A, which on random
// inputs (whose sums cancel, A ≫ |o|) is far above what either kernel errs. So for these formats the bound is
// calibrated instead of proven, on the same inputs as each case:
//   bound         kCalibrationFactor × the error of an emulated correct kernel (inputs rounded to the format,
//                 the operator's associative fold in fp32 — fast/scan's corrected operator —, read out from its
//                 inclusive state rounded to the format, as a matrix-product operand is, outputs rounded to
//                 the format), + the output's own rounding
//   format bound  the same for an emulated kernel that accumulates in the format (its state kept in the format
//                 after every token): an error beyond it (and beyond 5%) is no precision problem — `differs`
// Operators without a scan operator (hla3-unmasked) fall back to the proven, loose γ_h bound.
// Exact cases at γ = 1 stay exact for any arithmetic in the format (every partial sum an integer or half the
// format holds, exact_magnitude) and are judged sharply; decayed exact cases, whose γ^k the format cannot
// hold, are judged like random ones. `hla verify --calibrate` prints, per format and n, how the two emulated
// kernels fall against the bound (docs/verify.md "Reduced precisions").
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "verify/cases.hpp"

namespace hla::verify::ext {

// How many times an emulated correct kernel's error the operand part of the bound allows: real kernels round
// at more places than the emulation does (intermediate products cast to the format before the next product),
// each a few more roundings of the same size (docs/verify.md "Reduced precisions" has the measured ratios).
constexpr double kCalibrationFactor = 4;

// x rounded to nearest (ties to even) in the format: significand bits of precision_model(p); fp16 also
// overflows past 65504 and has subnormals below 2^-14; bf16 and tf32 have fp32's exponent range.
double round_to_format(double x, Precision p);
Mat<double> round_to_format(const Mat<double>& m, Precision p);

// The outputs (and final state) of an emulated correct kernel in format p, from the zero state (see above); with
// `gates` (--gates, one per token, opt.gamma 1) the gated scan operator's fold, its gates in fp32.
Run<double> emulate_format_kernel(const std::string& op, const Problem<double>& p, const Options& opt, Precision prec,
                                  const ColVec<double>* gates = nullptr);
// The same with the state rounded to p after every token: a kernel that accumulates in the format.
Run<double> emulate_format_accumulation(const std::string& op, const Problem<double>& p, const Options& opt,
                                        Precision prec, const ColVec<double>* gates = nullptr);

// The arithmetics a kernel may compute in, each emulated here: a difference that one of them explains is a lower
// precision, named in the report ("consistent with TF32 products"), not another function.
struct EmulatedFormat {
  Precision precision = Precision::fp32;  // of the inputs, the outputs and every matrix product's operands
  bool state_in_format = false;           // the carried state kept in the format too (else in fp32)
  std::string key() const;                // "tf32", "bf16-state", ...
  std::string description() const;        // "TF32 products (fp32 accumulation)", ...
};
// The formats coarser than `declared`, finest first: fp32 arithmetic (below fp64); TF32, fp16 and bf16 products
// with fp32 accumulation; a bf16 state.
std::vector<EmulatedFormat> coarser_formats(Precision declared);
// The emulated kernel in format f (emulate_format_kernel, or emulate_format_accumulation for a state in the format).
Run<double> emulate_format(const std::string& op, const Problem<double>& p, const Options& opt, const EmulatedFormat& f,
                           const ColVec<double>* gates = nullptr);

// How many times an emulated fp32 kernel's error the level of a correct fp32 implementation allows (random cases
// and file mode; precision.cpp's calibration and docs/verify.md "Reduced precisions" give the measured ratios): an
// error above it is lower precision even when the proven bound, which on long random cases allows ~10^5 u, is not
// reached. TF32 products err ~2^13 times more than fp32 arithmetic, bf16 ~2^16.
constexpr double kFp32LevelFactor = 16;

// `hla verify --calibrate`: for each narrow format and n, the normwise error of the two emulations against
// MPFR-256 and against the battery's bound, on the battery's random cases for `op` and options `opt`.
nlohmann::json calibration(const std::string& op, const Options& opt, long max_n, long d, long dv,
                           std::ostream* progress);
std::string calibration_text(const nlohmann::json& c);

}  // namespace hla::verify::ext
