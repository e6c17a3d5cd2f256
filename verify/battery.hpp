// The verification battery: runs an implementation over the cases, decides the verdict, searches the
// smallest counterexample, diagnoses what the implementation computes instead, and writes the report. The verdicts and
// their exit codes are verdict.hpp's; the phases the battery runs in are battery.cpp's (driver.hpp, what they share).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "verify/implementation.hpp"
#include "verify/verdict.hpp"

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

// Outputs already computed elsewhere (file mode): the given inputs and outputs against the MPFR reference
// and its bound, and the candidates they match. No exact cases: it measures, and says so.
// With req.gates, `gates` holds the per-token γ_t (checked: one per token, each in (0, 1]).
nlohmann::json judge_given(const Request& req, const Problem<double>& in, const Mat<double>& out,
                           const ColVec<double>& gates = {});

}  // namespace hla::verify::ext
