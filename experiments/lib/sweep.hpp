// The sweep engine behind `hla sweep` and `hla merge` (experiments/README.md documents the user side).
//
//   config (TOML) ──parse_config──▶ Config ──enumerate──▶ points (cartesian product minus unsupported
//   combinations, each skip counted by reason) ──shard_points──▶ this shard's points ──run_sweep──▶
//   <out>/points.csv + points.jsonl, one whole line per point, appended and fsynced, resumable.
//
// Per point: runtime over repeats (median, min, max, IQR), peak-RSS delta of the work, bytes of the
// state the form returns, error against an MPFR-256 reference of the same inputs (cached per inputs in
// <out>/refcache/), a rounding-error bound for the form and the observed/bound ratio, and metadata.
// Backward points (axis `backward`, sweep_backward.cpp): the same for the gradients of L = Σ⟨dO, O⟩,
// plus the checkpoints and states the pass keeps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace hla::sweep {

// How far the MPFR reference goes (config table [reference]).
struct ReferenceLimits {
  long direct_max_n = 128;          // SPEC's literal sums in MPFR-256 (O(n^3) for every operator) up to here
  long proxy_max_n = 16384;         // beyond: MPFR-256 run of a streaming form verified exact in fp61, up to here
  long form_reference_max_n = 256;  // points whose *swept* form is "reference" are skipped above this n
                                    // (the literal sums are O(n^3) — ahla O(n^3 dv): 70 s per call at n = 1024)
  long gradient_max_n = 1024;  // backward points: MPFR-256 reference gradient (the serial backward in MPFR) up to here
};

// One cartesian product. A config has one ([axes]) or several ([[axes]], their union).
struct Axes {
  std::vector<std::string> operators, forms, variants, scalars;
  std::vector<long> n, d, dv;
  std::vector<rational> gamma, eps, ridge;
  std::vector<std::string> gates;  // core/gates.hpp GateSpecs: none | range:LO,HI | strength:S
  std::vector<bool> normalized;
  std::vector<int> chunk, threads, repeats;
  std::vector<std::uint64_t> seeds;
  std::vector<std::string> backward;  // "none" (the forward pass of `form`), "serial", "checkpointed", "scan"
};

struct Config {
  std::string source;  // file name (for messages)
  std::string name, description;
  std::vector<Axes> blocks;
  ReferenceLimits limits;
};

struct Point {
  std::size_t index = 0;  // position among all kept points of the config (shards split on it)
  std::string op, form, variant, scalar;
  long n = 0, d = 0, dv = 0;
  rational gamma{1}, eps{0}, ridge{0};
  std::string gates = "none";  // per-token gates drawn from this GateSpec (with the input seed), or none
  bool normalized = false;
  int chunk = 16, threads = 1, repeats = 1;
  std::uint64_t seed = 1;
  std::string backward = "none";  // a backward pass through the serial form (form = serial), or none

  bool is_backward() const { return backward != "none"; }
  bool is_gated() const { return gates != "none"; }
  Options options() const;
  std::string key() const;  // identifies the point in a CSV (resume, merge)
};

struct Enumeration {
  std::vector<Point> points;
  std::size_t combinations = 0;                // size of the full cartesian product
  std::map<std::string, std::size_t> skipped;  // reason → count
};

// Throws InputError "<source>: <key>: <problem>" for anything wrong; touches no file.
Config parse_config(const std::string& toml_text, const std::string& source);
Config load_config(const std::filesystem::path& path);
// Also validates names against the registry (unknown operator/form/variant/scalar → InputError).
Enumeration enumerate(const Config& c);

struct Shard {
  int index = 1, count = 1;  // 1-based: shard i of N takes the points with index % N == i − 1
};
Shard parse_shard(const std::string& text);  // "i/N"
std::vector<Point> shard_points(const std::vector<Point>& points, Shard s);
std::string shard_file_stem(Shard s);  // "points" or "points-shard-i-of-N"

struct SweepOptions {
  std::filesystem::path out_dir;  // default results/<config name>
  Shard shard;
  std::ostream* progress = nullptr;  // stderr in the CLI; nullptr = silent
  std::size_t max_points = 0;        // stop after this many new points (0 = all); used to simulate a crash
  bool one_per_host = false;         // under mpirun: at most one point timed per host at a time
  bool same_build = false;  // resume only from points of this source tree, compiler, flags, CPU and host; else refuse
};
struct SweepSummary {
  std::size_t points = 0, already_done = 0, ran = 0, failed = 0;
  std::filesystem::path csv, jsonl;
};
SweepSummary run_sweep(const Config& c, const SweepOptions& o);

// ---- CSV / JSON-lines output -------------------------------------------------------------------------
const std::vector<std::string>& columns();
std::string csv_line(const std::vector<std::string>& fields);  // quoted as RFC 4180, with '\n'
std::vector<std::string> parse_csv_line(const std::string& line);
std::string json_line(const std::vector<std::string>& fields);  // numbers as numbers, "" as null
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
CsvTable read_csv(const std::filesystem::path& p);
// A points CSV in this version's columns. A file of an earlier version whose columns are all still
// columns (a subset, e.g. before `backward` existed) is read into the current columns: the new ones
// empty, `backward` = "none". `upgraded` tells whether that happened. Other headers: InputError.
CsvTable read_points(const std::filesystem::path& p, bool* upgraded = nullptr);

// Combines shard outputs (directories: every points*.csv in them; or files) into `out` (CSV + JSONL
// beside it), ordered by point index, each key once. Returns the number of rows written.
std::size_t merge_outputs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out,
                          std::ostream* report);

}  // namespace hla::sweep
