// What the two batteries of `hla verify` share. The forward battery (battery.cpp) and the combine battery
// (combine.cpp) each run in phases, rounds → tally → verdict → shrink → diagnose → report; the parts of those
// phases that are the same for both are written here once: the rounds' timing and log, the protocol findings of
// a tally, the verdict a tally decides, and the report's common keys and lines.
#pragma once

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "verify/cases.hpp"
#include "verify/implementation.hpp"
#include "verify/verdict.hpp"

namespace hla::verify::ext {

using DriverClock = std::chrono::steady_clock;

// The rounds of one battery: each is timed and logged (a progress line, an entry of the report's "rounds"), and
// the implementation's time is kept apart from the harness's, which runs from the Rounds' construction (the
// battery's start) to the report.
class Rounds {
 public:
  Rounds(std::string label, std::ostream* progress) : label_(std::move(label)), progress_(progress) {}

  // One round: the implementation runs `cases` (Implementation or CombineImplementation); its answers are
  // returned as it gave them, for the caller to check.
  template <class Impl, class C>
  auto run(Impl& impl, const std::vector<C>& cases, const Request& req, const std::string& what) {
    RoundLog log = begin(what, cases.size());
    const auto t0 = DriverClock::now();
    auto out = impl.run(cases, req, log);
    end(log, t0);
    return out;
  }

  const nlohmann::json& log() const { return log_; }
  // The report's "rounds" and "timings": the harness's time is all since the start but the implementation's.
  void write(nlohmann::json& report) const;

 private:
  RoundLog begin(const std::string& what, std::size_t cases);
  void end(RoundLog& log, DriverClock::time_point t0);

  DriverClock::time_point start_ = DriverClock::now();
  std::string label_;  // the progress lines' prefix: "verify", "verify --combine"
  std::ostream* progress_;
  nlohmann::json log_ = nlohmann::json::array();
  double impl_seconds_ = 0;
};

// The protocol findings of a round's answers: one per distinct error message (a failed round gives every case the
// same one), with the first case that has it and how many do, in order of first appearance.
template <class C, class O> nlohmann::json findings_of(const std::vector<C>& cases, const std::vector<O>& outs) {
  std::vector<std::string> errors, first;
  std::vector<int> count;
  for (std::size_t i = 0; i < cases.size() && i < outs.size(); ++i) {
    if (outs[i].error.empty()) continue;
    const auto it = std::find(errors.begin(), errors.end(), outs[i].error);
    if (it != errors.end()) {
      ++count[static_cast<std::size_t>(it - errors.begin())];
      continue;
    }
    errors.push_back(outs[i].error);
    first.push_back(cases[i].name);
    count.push_back(1);
  }
  nlohmann::json findings = nlohmann::json::array();
  for (std::size_t e = 0; e < errors.size(); ++e)
    findings.push_back({{"case", first[e]}, {"cases", count[e]}, {"error", errors[e]}});
  return findings;
}

// The verdict of a tally: any protocol finding is an error; else a proven difference (beyond what any rounding
// explains) differs; else an excess over the bound alone is a lower precision.
Verdict decide_verdict(bool protocol_failed, bool proven_difference, bool over_bound);

// The keys every report has: verdict, op, dtype, matches, counterexample, findings, harness.
nlohmann::json report_core(Verdict verdict, const Request& req, nlohmann::json matches, nlohmann::json counterexample,
                           nlohmann::json findings);

// The summary's lines shared by the batteries: a match ("<lead><key>: <description> (see claim <claim>)"), the
// findings ("error in <case> (and N more cases): <error>"), the time spent in the implementation and the harness.
std::string match_text(const std::string& lead, const nlohmann::json& match);
std::string findings_text(const nlohmann::json& findings);
std::string timings_text(const nlohmann::json& report);

}  // namespace hla::verify::ext
