// The verification battery: runs an implementation over the cases, decides the verdict, searches the
// smallest counterexample, diagnoses what the implementation computes instead, and writes the report.
//
// Verdicts (docs/verify.md):
//   computes         within the rounding bound on every exact, random and carry case
//   lower-precision  right on the exact cases, but random-case error above the dtype's bound while still
//                    small relative to the outputs (float32 arithmetic behind a float64 interface, TF32
//                    products, a lossy accumulation)
//   differs          beyond the bound on an exact case, a carry case, or by more than any rounding could
//                    explain on a random one: a different function, with the smallest counterexample
//   error            the protocol failed (crash, time-out, missing or malformed output, wrong shape, ...);
//                    NaN or Inf where the operator is finite is a wrong value: differs
// Exit codes: 0 computes, 1 differs or lower-precision, 2 error or bad input.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "verify/implementation.hpp"

namespace hla::verify::ext {

struct BatteryOptions {
  int shrink_rounds = 8;  // rounds of the counterexample search (each re-runs the implementation once)
  bool diagnose = true;   // compare with the registered forms and the catalogue of mistakes
  std::ostream* progress = nullptr;
};

// The whole report (the `--json` file, the Python dict): verdict, matches, counterexample, per-n error
// ratios, carry checks, protocol findings, rounds and timings.
nlohmann::json run_battery(Implementation& impl, const Request& req, const BatteryOptions& opts = {});

// The readable summary printed to stdout.
std::string summary_text(const nlohmann::json& report);

// 0 computes, 1 differs / lower-precision, 2 error.
int exit_code_for(const std::string& verdict);

// Outputs already computed elsewhere (file mode): the given inputs and outputs against the MPFR reference
// and its bound, and the candidates they match. No exact cases: it measures, and says so.
// With req.gates, `gates` holds the per-token γ_t (checked: one per token, each in (0, 1]).
nlohmann::json judge_given(const Request& req, const Problem<double>& in, const Mat<double>& out,
                           const ColVec<double>& gates = {});

}  // namespace hla::verify::ext
