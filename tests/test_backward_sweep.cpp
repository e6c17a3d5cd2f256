// Backward passes in the sweep engine (axis `backward`): a tiny config through run_sweep, as
// configs/backward.toml runs at scale. Checks that every (operator, pass) gets its rows, that every
// gradient is exact in fp61 and within its rounding-error bound against the MPFR-256 reference, that the
// checkpointed gradients are the serial ones bit for bit, the stored-state counts, that the paper's decayed
// rule is flagged, that checkpointing saves memory (stored states and peak RSS), and that bad values of
// the axis are config errors (exit code 2).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "experiments/lib/measure.hpp"
#include "experiments/lib/sweep.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace hla::sweep;

namespace {

const char* tiny_config = R"(
name = "backward-ci"
[reference]
direct_max_n = 0
proxy_max_n = 256
gradient_max_n = 256

[[axes]]
operator = "hla2"
form = "serial"
variant = "corrected"
scalar = ["float", "double"]
n = [64, 200]
d = 4
dv = 3
gamma = [1, 0.75]
normalized = [false, true]
eps = 0.5
backward = ["none", "serial", "checkpointed", "scan"]
chunk = [5, 16]
repeats = 1

[[axes]]
operator = ["ahla", "linear"]
form = "serial"
scalar = ["float", "double"]
n = [64, 200]
d = 4
dv = 3
gamma = [1, 0.75]
normalized = [false, true]
eps = 0.5
backward = ["serial", "checkpointed"]
chunk = [5, 16]
repeats = 1

[[axes]]   # the paper's decayed rule at gamma < 1: not SPEC's operator, so not SPEC's gradient
operator = "hla2"
form = "serial"
variant = "paper"
n = 64
d = 4
dv = 3
gamma = 0.75
backward = "serial"
repeats = 1

[[axes]]   # memory: beyond gradient_max_n (no reference), large enough for pages to show
operator = "hla2"
form = "serial"
variant = "corrected"
n = 8192
d = 8
dv = 8
backward = ["serial", "checkpointed"]
chunk = 64
repeats = 1
)";

struct Table {
  CsvTable t;
  std::map<std::string, std::size_t> col;
  explicit Table(CsvTable tab) : t(std::move(tab)) {
    for (std::size_t i = 0; i < t.header.size(); ++i) col[t.header[i]] = i;
  }
  const std::string& at(const std::vector<std::string>& row, const std::string& c) const { return row.at(col.at(c)); }
  double num(const std::vector<std::string>& row, const std::string& c) const { return std::stod(at(row, c)); }
};

}  // namespace

TEST_CASE("backward sweep: rows for every pass, exact, within bound, checkpointing saves memory", "[sweep][backward]") {
  const Config c = parse_config(tiny_config, "backward-ci.toml");
  const Enumeration en = enumerate(c);
  const fs::path dir = fresh_dir("bwsweep-tiny");
  SweepOptions o;
  o.out_dir = dir;
  const SweepSummary s = run_sweep(c, o);
  CHECK(s.failed == 0);
  const Table tab(read_csv(s.csv));
  REQUIRE(tab.t.rows.size() == en.points.size());

  std::map<std::string, std::size_t> per_pass;    // "op/backward" → rows
  std::map<std::string, std::string> serial_err;  // the serial backward's error, by the point minus pass and w
  std::map<std::string, double> stored, rss;      // the n = 8192 memory points, by pass
  for (const auto& row : tab.t.rows) {
    const std::string bw = tab.at(row, "backward"), op = tab.at(row, "operator");
    INFO("point " << tab.at(row, "key") << ": status " << tab.at(row, "status") << ", err/bound "
                  << tab.at(row, "err_over_bound") << ", note " << tab.at(row, "note"));
    ++per_pass[op + "/" + bw];
    if (bw == "none") continue;
    const long n = std::stol(tab.at(row, "n")), w = std::stol(tab.at(row, "chunk"));
    // What the pass kept: checkpoints X_0, X_w, … (⌈n/w⌉) or just X_0; the serial pass all n + 1 states.
    const long checkpoints = std::stol(tab.at(row, "checkpoints")), states = std::stol(tab.at(row, "stored_states"));
    if (bw == "serial") {
      CHECK(checkpoints == 1);
      CHECK(states == n + 2);  // X_0 as the checkpoint, and X_0 … X_n recomputed
    } else {
      CHECK(checkpoints == (n + w - 1) / w);
      CHECK(states <= checkpoints + 2 * w + 1);
    }
    CHECK(tab.num(row, "stored_bytes") ==
          Approx(double(states) * tab.num(row, "state_numbers") * (tab.at(row, "scalar") == "float" ? 4 : 8)));
    if (n == 8192) {
      CHECK(tab.at(row, "status") == "no reference");
      stored[bw] = tab.num(row, "stored_bytes");
      if (kPeakRssMeasured)
        rss[bw] = tab.num(row, "peak_rss_delta_bytes");
      else
        CHECK(tab.at(row, "peak_rss_delta_bytes").empty());  // the sanitizer's heap is not measured as the work's
      continue;
    }
    if (op == "hla2" && tab.at(row, "variant") == "paper") {
      CHECK(tab.at(row, "exact_fp61") == "no");
      CHECK(tab.at(row, "status") == "differs in exact arithmetic");
      CHECK(tab.num(row, "err_normwise_rel") > 1e-3);  // far above rounding: the formula's difference
      continue;
    }
    CHECK(tab.at(row, "exact_fp61") == "yes");
    CHECK(tab.at(row, "status") == "ok");
    CHECK(tab.at(row, "ref_method").rfind("mpfr-backward:serial", 0) == 0);
    REQUIRE(!tab.at(row, "err_normwise_rel").empty());
    CHECK(tab.num(row, "err_units_u") < 1e4);
    if (tab.at(row, "normalized") == "0") {
      REQUIRE(!tab.at(row, "err_over_bound").empty());
      CHECK(tab.num(row, "err_over_bound") <= 1.0);
      CHECK(tab.num(row, "err_over_bound") > 0.0);  // rounding happened: the check is not vacuous
    }
    // The checkpointed backward runs the serial backward's operations in the same order: same gradients.
    std::string k = tab.at(row, "key");
    k = k.substr(0, k.find("|w=")) + k.substr(k.find("|thr="));
    k = k.substr(0, k.find("|bw="));
    if (bw == "serial") serial_err[k] = tab.at(row, "err_max_abs");
  }
  for (const auto& row : tab.t.rows) {
    if (tab.at(row, "backward") != "checkpointed" || tab.at(row, "n") == "8192") continue;
    std::string k = tab.at(row, "key");
    k = k.substr(0, k.find("|w=")) + k.substr(k.find("|thr="));
    k = k.substr(0, k.find("|bw="));
    INFO(k);
    REQUIRE(serial_err.count(k));
    CHECK(tab.at(row, "err_max_abs") == serial_err[k]);
  }
  // hla2: forward and the three passes; ahla, linear: serial and checkpointed.
  for (const std::string p : {"hla2/none", "hla2/serial", "hla2/checkpointed", "hla2/scan", "ahla/serial",
                              "ahla/checkpointed", "linear/serial", "linear/checkpointed"}) {
    INFO(p);
    CHECK(per_pass[p] > 0);
  }
  CHECK(per_pass.count("ahla/scan") == 0);
  // n = 8192, d = dv = 8: the serial pass holds 8194 states of 208 numbers (13.6 MB), checkpointing
  // (128 checkpoints + 65 recomputed states) 0.3 MB; peak RSS also holds the gradients (1.2 MB) either way.
  REQUIRE(stored.size() == 2);
  CHECK(stored["checkpointed"] * 20 < stored["serial"]);
  if (kPeakRssMeasured) {  // the release build (make test) checks what the process really held
    CHECK(rss["checkpointed"] * 3 < rss["serial"]);
    CHECK(rss["serial"] > 0.5 * stored["serial"]);
  }
  fs::remove_all(dir);
}

TEST_CASE("backward sweep: bad backward values are config errors, and resume keeps working", "[sweep][backward]") {
  const std::string base = "[axes]\noperator = 'hla2'\nform = 'serial'\nn = 8\n";
  const std::vector<std::pair<std::string, std::string>> bad{
      {base + "backward = 'reverse'\n", "axes.backward"},
      {base + "backward = ['serial', 3]\n", "axes.backward"},
      {base + "backward = []\n", "axes.backward"},
      {"[axes]\noperator = 'linear'\nform = 'serial'\nn = 8\nbackward = 'scan'\n", "axes.backward"},
      {"[axes]\noperator = 'hla3'\nform = 'serial'\nn = 8\nbackward = 'serial'\n", "axes.backward"},
      {"[axes]\noperator = 'hla2'\nform = 'chunked'\nvariant = 'corrected'\nn = 8\nbackward = 'serial'\n",
       "axes.backward"},
      {base + "[reference]\ngradient_max_n = -1\n", "reference.gradient_max_n"},
  };
  for (const auto& [text, key] : bad) {
    INFO("config:\n" << text);
    std::string message;
    try {
      enumerate(parse_config(text, "bad.toml"));
    } catch (const hla::InputError& e) { message = e.what(); }
    CHECK_THAT(message, Catch::Contains("bad.toml") && Catch::Contains(key));
  }
#ifdef HLA_CLI
  const fs::path dir = fresh_dir("bwsweep-cli");
  fs::create_directories(dir);
  std::ofstream(dir / "bad.toml") << base << "backward = 'reverse'\n";
  const int rc = std::system((std::string(HLA_CLI) + " sweep " + (dir / "bad.toml").string() + " --out " +
                              (dir / "out").string() + " >/dev/null 2>&1")
                                 .c_str());
  CHECK((WIFEXITED(rc) ? WEXITSTATUS(rc) : -1) == 2);
  CHECK(!fs::exists(dir / "out"));
  fs::remove_all(dir);
#endif

  // Resume: a crash after 3 points, then the rest, then nothing; forward and backward keys differ.
  const Config c = parse_config(
      "[axes]\noperator = 'hla2'\nform = 'serial'\nn = [16, 32]\nd = 3\ndv = 2\nchunk = [4, 8]\n"
      "repeats = 1\nbackward = ['none', 'serial', 'checkpointed', 'scan']\n",
      "resume.toml");
  const Enumeration en = enumerate(c);
  CHECK(en.points.size() == 2 * (1 + 1 + 2 + 2));  // forward (w unused), serial (w unused), 2 w each
  const fs::path rdir = fresh_dir("bwsweep-resume");
  SweepOptions o;
  o.out_dir = rdir;
  o.max_points = 3;
  CHECK(run_sweep(c, o).ran == 3);
  o.max_points = 0;
  const SweepSummary second = run_sweep(c, o);
  CHECK(second.already_done == 3);
  CHECK(second.ran == en.points.size() - 3);
  CHECK(run_sweep(c, o).ran == 0);
  const CsvTable t = read_csv(second.csv);
  std::set<std::string> keys;
  for (const auto& row : t.rows) keys.insert(row[1]);
  CHECK(keys.size() == en.points.size());
  CHECK(t.rows.size() == en.points.size());
  fs::remove_all(rdir);
}
