// The parts the batteries share (driver.hpp), and the verdict's names and exit codes (verdict.hpp).
#include "verify/driver.hpp"

#include <fmt/core.h>

#include "core/build_info.hpp"
#include "core/names.hpp"

namespace hla::verify::ext {

using json = nlohmann::json;

constexpr NameTable<Verdict, 5> name_table(Verdict) {
  return {"verdict",
          {{{Verdict::computes, "computes"},
            {Verdict::lower_precision, "lower-precision"},
            {Verdict::differs, "differs"},
            {Verdict::error, "error"},
            {Verdict::incomplete, "incomplete"}}}};
}
std::string to_string(Verdict v) { return name_of(v); }
Verdict parse_verdict(const std::string& text) { return parse<Verdict>(text); }

int exit_code_for(Verdict v) {
  switch (v) {
    case Verdict::computes:
      return 0;
    case Verdict::differs:
    case Verdict::lower_precision:
      return 1;
    default:
      return 2;
  }
}

RoundLog Rounds::begin(const std::string& what, std::size_t cases) {
  RoundLog log;
  log.what = what;
  log.cases = cases;
  if (progress_) *progress_ << label_ << ": " << what << ": " << cases << " cases ..." << std::flush;
  return log;
}

void Rounds::end(RoundLog& log, DriverClock::time_point t0) {
  // an implementation that does not time itself is timed here
  if (log.seconds == 0) log.seconds = std::chrono::duration<double>(DriverClock::now() - t0).count();
  impl_seconds_ += log.seconds;
  if (progress_)
    *progress_ << fmt::format(" {:.2f} s{}\n", log.seconds, log.failure.empty() ? "" : " — " + log.failure);
  log_.push_back({{"what", log.what}, {"cases", log.cases}, {"seconds", log.seconds}, {"failure", log.failure}});
}

void Rounds::write(json& report) const {
  const double total = std::chrono::duration<double>(DriverClock::now() - start_).count();
  report["rounds"] = log_;
  report["timings"] = {
      {"total_seconds", total}, {"implementation_seconds", impl_seconds_}, {"harness_seconds", total - impl_seconds_}};
}

Verdict decide_verdict(bool protocol_failed, bool proven_difference, bool over_bound) {
  if (protocol_failed) return Verdict::error;
  if (proven_difference) return Verdict::differs;
  if (over_bound) return Verdict::lower_precision;
  return Verdict::computes;
}

json report_core(Verdict verdict, const Request& req, json matches, json counterexample, json findings) {
  return {{"verdict", to_string(verdict)},
          {"op", req.op},
          {"dtype", dtype_name(req.dtype)},
          {"matches", std::move(matches)},
          {"counterexample", std::move(counterexample)},
          {"findings", std::move(findings)},
          {"harness", {{"commit", build_info::source_tree()}}}};
}

std::string match_text(const std::string& lead, const json& m) {
  const std::string claim = m["claim"].get<std::string>();
  return lead + m["key"].get<std::string>() + ": " + m["description"].get<std::string>() +
         (claim.empty() ? "" : " (see claim " + claim + ")") + "\n";
}

std::string findings_text(const json& findings) {
  std::string s;
  for (const auto& f : findings) {
    const long count = f.value("cases", 1L);
    s += "  error in " + f["case"].get<std::string>() +
         (count > 1 ? fmt::format(" (and {} more cases)", count - 1) : "") + ": " + f["error"].get<std::string>() +
         "\n";
  }
  return s;
}

std::string timings_text(const json& r) {
  // three significant digits: a fast implementation's 0.04 s is not "0.0 s"
  return fmt::format("  time: {:.3g} s in the implementation ({} round{}), {:.3g} s in the harness\n",
                     r["timings"]["implementation_seconds"].get<double>(), r["rounds"].size(),
                     r["rounds"].size() == 1 ? "" : "s", r["timings"]["harness_seconds"].get<double>());
}

}  // namespace hla::verify::ext
