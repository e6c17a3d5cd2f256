// Running a sweep: per point runtime, memory, state bytes, error against MPFR-256 and the rounding-error
// bound; the reference cache; resumable, fsynced output. experiments/README.md explains the numbers.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "core/build_info.hpp"
#include "core/dispatch.hpp"
#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/limits.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "experiments/lib/measure.hpp"
#include "experiments/lib/reference_cache.hpp"
#include "experiments/lib/sweep.hpp"
#include "experiments/lib/sweep_backward.hpp"
#include "io/files.hpp"
#include "mpi/comm.hpp"
#include "mpi/farm.hpp"
#include "numerics/bounds.hpp"
#include "numerics/compare.hpp"
#include "numerics/exactness.hpp"

namespace hla::sweep {
namespace fs = std::filesystem;
namespace {

// ---- metadata: core/build_info.hpp ---------------------------------------------------------------------
using build_info::compiler;
using build_info::cpu_model;
using build_info::source_tree;
using build_info::utc_now;

// ---- operators --------------------------------------------------------------------------------------------
using bounds::abs_operator;
using bounds::augmented;
using bounds::order_of;
using verify::base_options;
using verify::ExactnessOracle;

// ---- the MPFR reference of a point's inputs: RefData, cached per inputs (experiments/lib/reference_cache.hpp) ----
class ReferenceStore {
 public:
  ReferenceStore(fs::path dir, const ReferenceLimits& lim, ExactnessOracle& oracle)
      : dir_(std::move(dir)), lim_(lim), oracle_(oracle) {}

  const RefData& get(const Point& pt, const Problem<double>& inputs) {
    std::ostringstream k;
    k << pt.op << "_n" << pt.n << "_d" << pt.d << "_dv" << pt.dv << "_s" << pt.seed << "_g" << format_rational(pt.gamma)
      << "_l" << format_rational(pt.ridge);
    if (pt.is_gated()) k << "_gates-" << pt.gates;  // gate-free keys as before, so earlier caches stay valid
    std::string key = k.str();
    std::replace(key.begin(), key.end(), '/', '_');
    if (auto it = mem_.find(key); it != mem_.end()) return it->second;
    if (mem_.size() > 8) mem_.clear();  // references of large n are big; keep few in memory
    RefData r;
    const fs::path file = dir_ / (key + ".bin");
    if (!load(file, pt, r)) {
      r = compute(pt, inputs);
      if (!r.method.empty()) store(file, r);
    }
    return mem_.emplace(key, std::move(r)).first->second;
  }

 private:
  RefData compute(const Point& pt, const Problem<double>& inputs) {
    RefData r;
    const Options o = base_options(pt.gamma, pt.ridge);
    if (!operator_info(pt.op).streaming) {
      if (pt.n <= lim_.direct_max_n) {
        r.num = registry<mpfr256>().reference(pt.op)(convert_problem<mpfr256>(inputs), Options{}).O;
        r.method = "literal";
      } else {
        r.note = "reference too large (n > direct_max_n = " + std::to_string(lim_.direct_max_n) + ")";
      }
      return r;
    }
    const Problem<double> aug = augmented(inputs, false);
    if (pt.n <= lim_.direct_max_n) {
      r.num = registry<mpfr256>().reference(pt.op)(convert_problem<mpfr256>(aug), o).O;
      r.method = "literal";
    } else if (pt.n <= lim_.proxy_max_n) {
      if (auto px = oracle_.proxy(pt.op, pt.gamma, pt.ridge, pt.is_gated())) {
        r.num = registry<mpfr256>().find(pt.op, px->first, px->second)(convert_problem<mpfr256>(aug), o).O;
        r.method = "mpfr-proxy:" + px->first + "/" + px->second;
      } else {
        r.note = "no streaming form is exact for these options (fp61), and n > direct_max_n";
      }
    } else {
      r.note = "reference too large (n > proxy_max_n = " + std::to_string(lim_.proxy_max_n) + ")";
    }
    if (r.method.empty()) return r;
    // The absolute computation, in double (all terms ≥ 0, so its own relative error is ≤ γ_h(double),
    // which the 1e-9 inflation below covers for every n we sweep).
    const std::string aop = abs_operator(pt.op);
    const Problem<double> absin = augmented(inputs, true);
    if (auto px = oracle_.proxy(aop, pt.gamma, pt.ridge, pt.is_gated())) {
      r.abs = registry<double>().find(aop, px->first, px->second)(absin, o).O;
      r.abs_method = aop + "/" + px->first + "/" + px->second;
    } else if (pt.n <= 4 * lim_.direct_max_n) {
      r.abs = registry<double>().reference(aop)(absin, o).O;
      r.abs_method = aop + "/reference";
    }
    r.abs *= 1 + 1e-9;
    return r;
  }

  // The cache file, when it is exactly the point's (parse_reference_cache); anything else is computed again and
  // stored over.
  bool load(const fs::path& file, const Point& pt, RefData& r) {
    std::error_code ec;
    if (fs::symlink_status(file, ec).type() == fs::file_type::not_found) return false;
    const CacheShape shape{pt.n, pt.dv, operator_info(pt.op).streaming};
    std::optional<RefData> got;
    try {
      got = parse_reference_cache(read_regular_file(file, reference_cache_most_bytes(shape), /*follow=*/false), shape);
    } catch (const InputError&) { return false; }
    if (!got) return false;
    r = std::move(*got);
    return true;
  }

  void store(const fs::path& file, const RefData& r) {
    fs::create_directories(dir_);
    // A fresh temporary name per writer (ranks of a distributed sweep share the folder), never a planted file.
    write_file_atomically(file, reference_cache_bytes(r), "reference cache");
  }

  fs::path dir_;
  ReferenceLimits lim_;
  ExactnessOracle& oracle_;
  std::map<std::string, RefData> mem_;
};

// ---- the rounding-error bound --------------------------------------------------------------------------------
// The bound's depth h for a registered form (numerics/bounds.hpp): its own accumulation depth.
// `log_mass` = Σ_t |log γ_t| of the point's gates (bounds::log_mass): the stable gated chunk forms compute their
// gate factors from within-chunk log-gates, whose own roundings bounds::gate_factor_depth counts (per prefix-sum
// level).
template <class T> long bound_depth(const Point& pt, double log_mass) {
  // Gates are drawn float-representable (core/gates.hpp): exact in every swept scalar, but they decay like γ.
  const bool inexact = pt.gamma != 1 && to_mpfr(from_rational<T>(pt.gamma)) != from_rational<mpfr256>(pt.gamma);
  const long log_factors =
      pt.is_gated() ? bounds::order_of(pt.op) * bounds::gate_factor_depth(pt.form, pt.n, pt.chunk, log_mass) : 0;
  return log_factors + bounds::rounding_depth(pt.op, bounds::accumulation_depth(pt.form, pt.n, pt.chunk),
                                              pt.gamma != 1 || pt.is_gated(), inexact, pt.n, pt.d);
}

struct Measured {
  std::vector<std::string> fields;
  bool failed = false;
  std::string summary;  // for the progress line
};

template <class T> void evaluate_point(const Point& pt, const Problem<double>& inputs, const RefData& ref,
                                       const std::string& exact, std::map<std::string, std::string>& f) {
  const Entry<T>& e = registry<T>().find(pt.op, pt.form, pt.variant);
  const Problem<T> p = convert_problem<T>(inputs);
  const Options opt = pt.options();
  Run<T> run;
  measure_calls(
      pt.repeats, pt.n, [&] { run = e(p, opt); }, f);
  const std::size_t numbers = run.state.numbers();
  const std::size_t bytes_per = std::is_same_v<T, mpfr256> ? sizeof(T) + 5 * 8 : sizeof(T);  // + MPFR limbs
  f["state_numbers"] = std::to_string(numbers);
  f["state_bytes"] = std::to_string(numbers * bytes_per);
  f["exact_fp61"] = exact;
  f["ref_method"] = ref.method.empty() ? "none" : ref.method;
  if (ref.method.empty()) {
    f["status"] = "no reference";
    f["note"] = ref.note;
    return;
  }
  // The reference output (MPFR) and the error.
  const Eigen::Index n = pt.n, dv = pt.dv;
  Mat<mpfr256> R(n, dv);
  const mpfr256 eps = from_rational<mpfr256>(pt.eps);
  const bool streaming = operator_info(pt.op).streaming;  // softmax: its outputs themselves, no bound
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index c = 0; c < dv; ++c)
      R(t, c) = !streaming      ? ref.num(t, c)
                : pt.normalized ? mpfr256(ref.num(t, c) / (ref.num(t, dv) + eps))
                                : ref.num(t, c);
  const ErrorStats es = compare_to(run.O, R);
  const double u = unit_roundoff<T>();
  error_columns(es, u, f);
  std::string status = "ok";
  if (ref.abs.size() == 0 || !streaming) {
    f["note"] = "no error bound for this operator";
  } else {
    const long h = bound_depth<T>(pt, bounds::log_mass(inputs.gates));
    f["bound_h"] = std::to_string(h);
    const double hu = static_cast<double>(h) * u;
    if (hu >= 0.5) {
      f["note"] = "bound vacuous (h u >= 1/2)";
    } else {
      ColVec<mpfr256> den(n);
      for (Eigen::Index t = 0; t < n; ++t) den(t) = pt.normalized ? mpfr256(ref.num(t, dv) + eps) : mpfr256(1);
      long vacuous_rows = 0;
      // A form whose products round to a narrower format (the GPU forms' tf32/bf16) adds its operand roundings.
      const double gam = bounds::mixed_gamma(h, u, pt.op, operand_roundoff(e.caps.products));
      const Mat<double> B = bounds::output_bounds_for(R, ref.abs, pt.normalized, den, from_rational<double>(pt.eps), u,
                                                      gam, 0.0, &vacuous_rows);
      double max_b = 0, max_r = 0, ratio = 0;
      for (Eigen::Index t = 0; t < n; ++t)
        for (Eigen::Index c = 0; c < dv; ++c) {
          if (std::isinf(B(t, c))) continue;
          const double rv = abs(R(t, c)).template convert_to<double>();
          const double err = abs(to_mpfr(run.O(t, c)) - R(t, c)).template convert_to<double>();
          max_b = std::max(max_b, B(t, c));
          max_r = std::max(max_r, rv);
          if (err > 0) ratio = std::max(ratio, B(t, c) > 0 ? err / B(t, c) : INFINITY);
        }
      const double bn = vacuous_rows ? INFINITY : (max_r > 0 ? max_b / max_r : max_b);
      f["bound_normwise_rel"] = fmt_double(bn);
      f["bound_units_u"] = fmt_double(bn / u);
      f["err_over_bound"] = fmt_double(ratio);
      if (vacuous_rows) f["note"] = std::to_string(vacuous_rows) + " rows with den_t + eps within its error bound of 0";
      if (ratio > 1) status = "exceeds bound";
    }
  }
  if (exact == "no") status = "differs in exact arithmetic";
  f["status"] = status;
}

// ---- output files ------------------------------------------------------------------------------------------------
void write_all(int fd, const std::string& s, const fs::path& p) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot write " + p.string() + ": " + std::strerror(errno));  // a full disk: exit 2
    }
    done += static_cast<std::size_t>(w);
  }
  ::fsync(fd);
}

// Drops a torn last line (a crash mid-write) so the file ends at a complete line.
void truncate_partial_line(const fs::path& p) {
  std::error_code ec;
  if (fs::symlink_status(p, ec).type() == fs::file_type::not_found) return;
  const std::string all = read_regular_file(p, UINT64_MAX, /*follow=*/false);
  if (all.empty() || all.back() == '\n') return;
  const auto last = all.rfind('\n');
  fs::resize_file(p, last == std::string::npos ? 0 : last + 1);
}

struct Outputs {
  fs::path csv, jsonl;
  int csv_fd = -1, jsonl_fd = -1;
  std::set<std::string> done;
  bool upgraded = false;  // the CSV was an earlier version's and has been rewritten in the current columns
  ~Outputs() {
    if (csv_fd >= 0) ::close(csv_fd);
    if (jsonl_fd >= 0) ::close(jsonl_fd);
  }
  // same_build: column → this build's value (source tree, compiler, flags, CPU, host); a file holding any point with
  // another value is refused before anything is written (`hla sweep --same-build`).
  void open(const fs::path& dir, const std::string& stem, const std::map<std::string, std::string>& same_build) {
    csv = dir / (stem + ".csv");
    jsonl = dir / (stem + ".jsonl");
    const std::string header = csv_line(columns());
    truncate_partial_line(csv);
    truncate_partial_line(jsonl);
    if (fs::exists(csv) && fs::file_size(csv) > 0) {
      CsvTable t;
      try {
        t = read_points(csv, &upgraded);
      } catch (const InputError&) {
        throw InputError(csv.string() + ": exists with other columns (another version of hla?); move it away to rerun");
      }
      refuse_other_builds(t, same_build);
      for (const auto& row : t.rows)
        if (row.size() == t.header.size()) done.insert(row[1]);
      if (upgraded) {  // an earlier version's file: rewrite both files in the current columns
        std::string all = header, lines;
        for (const auto& row : t.rows) {
          all += csv_line(row);
          lines += json_line(row);
        }
        for (const auto& [path, text] : {std::pair{csv, all}, std::pair{jsonl, lines}})
          write_file_atomically(path, text, "sweep output");
      }
    }
    // The JSON lines are written before the CSV line of the same point: keep exactly the CSV's points.
    if (fs::exists(jsonl)) {
      std::istringstream in(read_regular_file(jsonl, UINT64_MAX, /*follow=*/false));
      std::string line, kept;
      std::set<std::string> seen;
      bool dropped = false;
      while (std::getline(in, line)) {
        std::string key;
        try {
          key = nlohmann::json::parse(line).at("key").get<std::string>();
        } catch (const std::exception&) {}
        if (!key.empty() && done.count(key) && seen.insert(key).second)
          kept += line + "\n";
        else
          dropped = true;
      }
      if (dropped) write_file_atomically(jsonl, kept, "sweep output");
    }
    csv_fd = open_regular_for_append(csv, "sweep output");
    jsonl_fd = open_regular_for_append(jsonl, "sweep output");
    if (fs::file_size(csv) == 0) write_all(csv_fd, header, csv);
  }
  void refuse_other_builds(const CsvTable& t, const std::map<std::string, std::string>& same_build) const {
    for (const auto& [column, mine] : same_build) {
      const auto at = std::find(t.header.begin(), t.header.end(), column) - t.header.begin();
      std::size_t others = 0;
      const std::vector<std::string>* first = nullptr;
      for (const auto& row : t.rows)
        if (row.size() == t.header.size() && row[at] != mine && ++others == 1) first = &row;
      if (others)
        throw InputError(csv.string() + ": " + std::to_string(others) + " of its " + std::to_string(t.rows.size()) +
                         " points were measured by another build or machine (" + column + " '" + (*first)[at] +
                         "', this one '" + mine +
                         "'); --same-build resumes only this build's own points: use another --out");
    }
  }
  void append(const std::vector<std::string>& fields) {
    write_all(jsonl_fd, json_line(fields), jsonl);
    write_all(csv_fd, csv_line(fields), csv);
  }
};

std::string hms(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace

// A point's estimated cost, to hand out the longest first (the last points then finish together).
double estimated_cost(const Point& pt) {
  double c = static_cast<double>(pt.repeats) * static_cast<double>(pt.n) * static_cast<double>(pt.d) *
             static_cast<double>(pt.d + pt.dv);
  if (order_of(pt.op) == 3) c *= static_cast<double>(pt.d);
  if (pt.form == "reference" || pt.form == "serial") c *= 4;
  if (pt.scalar == "mpfr256") c *= 100;
  if (pt.is_backward()) c *= 3;
  return c;
}

SweepSummary run_sweep(const Config& c, const SweepOptions& o) {
  const Enumeration en = enumerate(c);  // validates names before anything is written
  const std::vector<Point> mine = shard_points(en.points, o.shard);
  const fs::path dir = o.out_dir.empty() ? fs::path("results") / c.name : o.out_dir;
  // Under mpirun (mpi/farm.hpp) rank 0 alone reads and writes the output files; the other
  // ranks compute the points it hands them.
  const int ranks = distributed::world_size();
  const bool writer = distributed::world_rank() == 0;
  std::ostream* progress = writer ? o.progress : nullptr;
  std::optional<DirectoryLock> lock;  // one sweep per output directory at a time (two made 72 rows of 36 points)
  if (writer) {
    fs::create_directories(dir);
    lock.emplace(dir, "sweep output directory");
  }
  if (progress) {
    *progress << "sweep " << c.name << ": " << en.combinations << " combinations, " << en.points.size() << " points";
    std::size_t skipped = 0;
    for (const auto& [why, k] : en.skipped) skipped += k;
    *progress << " (" << skipped << " skipped";
    for (const auto& [why, k] : en.skipped) *progress << "; " << k << " " << why;
    *progress << ")";
    if (o.shard.count > 1)
      *progress << "; shard " << o.shard.index << "/" << o.shard.count << ": " << mine.size() << " points";
    if (ranks > 1) *progress << "; " << ranks - 1 << " worker ranks";
    *progress << "\n";
  }
  const std::string commit = build_info::head_commit(), tree = source_tree(), comp = compiler(),
                    flags = build_info::cxx_flags(), cpu = cpu_model();
  const std::string host = distributed::host_name(), rank = std::to_string(distributed::world_rank()),
                    on_host = std::to_string(distributed::ranks_on_host());
  std::map<std::string, std::string> same_build;
  if (o.same_build)
    same_build = {{"source_tree", tree}, {"compiler", comp}, {"flags", flags}, {"cpu", cpu}, {"host", host}};
  Outputs out;
  SweepSummary sum;
  sum.points = mine.size();
  std::vector<std::size_t> todo;  // positions in `mine`
  if (writer) {
    out.open(dir, shard_file_stem(o.shard), same_build);
    sum.csv = out.csv;
    sum.jsonl = out.jsonl;
    for (std::size_t k = 0; k < mine.size(); ++k)
      if (!out.done.count(mine[k].key())) todo.push_back(k);
    sum.already_done = mine.size() - todo.size();
    if (progress && out.upgraded)
      *progress << "upgraded " << out.csv.string() << " (and its JSON lines) to this version's columns\n";
    if (progress && sum.already_done)
      *progress << "resuming: " << sum.already_done << " of " << mine.size() << " points already in "
                << out.csv.string() << "\n";
    if (o.max_points && todo.size() > o.max_points) todo.resize(o.max_points);
    if (ranks > 1)
      std::stable_sort(todo.begin(), todo.end(),
                       [&](std::size_t x, std::size_t y) { return estimated_cost(mine[x]) > estimated_cost(mine[y]); });
  }
  if (ranks > 1) {  // every rank learns which points are left (the writer found them in the files)
    distributed::Bytes b(todo.size() * sizeof(std::size_t));
    if (writer) std::memcpy(b.data(), todo.data(), b.size());
    b = distributed::broadcast(MPI_COMM_WORLD, 0, std::move(b));
    todo.resize(b.size() / sizeof(std::size_t));
    std::memcpy(todo.data(), b.data(), b.size());
  }

  ExactnessOracle oracle;
  ReferenceStore refs(dir / "refcache", c.limits, oracle);
  BackwardEvaluator backward(c.limits);
  const auto start = std::chrono::steady_clock::now();
  std::string inputs_key;
  Problem<double> inputs;
  // One point's row (its fields in columns() order); "status" says whether it failed.
  auto compute_row = [&](const Point& pt) {
    std::map<std::string, std::string> f;
    f["index"] = std::to_string(pt.index);
    f["key"] = pt.key();
    f["config"] = c.name;
    f["operator"] = pt.op;
    f["form"] = pt.form;
    f["variant"] = pt.variant;
    f["scalar"] = pt.scalar;
    f["n"] = std::to_string(pt.n);
    f["d"] = std::to_string(pt.d);
    f["dv"] = std::to_string(pt.dv);
    f["gamma"] = format_rational(pt.gamma);
    f["gates"] = pt.gates;
    f["eps"] = format_rational(pt.eps);
    f["ridge"] = format_rational(pt.ridge);
    f["normalized"] = pt.normalized ? "1" : "0";
    f["chunk"] = std::to_string(pt.chunk);
    f["threads"] = std::to_string(pt.threads);
    f["seed"] = std::to_string(pt.seed);
    f["repeats"] = std::to_string(pt.repeats);
    f["backward"] = pt.backward;
    f["commit"] = commit;
    f["source_tree"] = tree;
    f["compiler"] = comp;
    f["flags"] = flags;
    f["cpu"] = cpu;
    f["host"] = host;
    f["rank"] = rank;
    f["ranks_on_host"] = on_host;
    try {
      // Before its inputs are drawn: a point that cannot fit in memory is rejected, its row says why (n = 2^26 at
      // d = dv = 4096 was a bad_alloc that ended the sweep).
      require_shape(Shape{pt.n, pt.d, pt.dv}, pt.key(),
                    with_scalar(pt.scalar, []<class T>() { return bytes_per_value<T>(); }), bytes_per_value<mpfr256>());
      const std::string ik = std::to_string(pt.n) + "/" + std::to_string(pt.d) + "/" + std::to_string(pt.dv) + "/" +
                             std::to_string(pt.seed) + "/" + pt.gates;
      if (ik != inputs_key) {
        inputs = gaussian_problem(Shape{pt.n, pt.d, pt.dv}, pt.seed);
        inputs.gates = draw_gates(parse_gate_spec(pt.gates), pt.n, pt.seed);
        inputs_key = ik;
      }
      const std::string exact = oracle.check(pt.op, pt.form, pt.variant, pt.options(), pt.d, pt.dv, pt.is_gated());
      if (pt.is_backward()) {
        backward.evaluate(pt, inputs, exact, f);
      } else {
        with_scalar(pt.scalar, [&]<class T>() {
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, mpfr256>)
            evaluate_point<T>(pt, inputs, refs.get(pt, inputs), exact, f);
          else
            throw InputError("scalar " + pt.scalar + " is not swept");
        });
      }
    } catch (const NumericalError& e) {
      f["status"] = "non-finite";
      f["note"] = e.what();
    } catch (const InputError& e) {
      f["status"] = "rejected";
      f["note"] = e.what();
    }
    f["load_1min"] = fmt_double(build_info::load_1min());
    f["date"] = utc_now();
    std::vector<std::string> fields;
    for (const auto& col : columns()) fields.push_back(f.count(col) ? f[col] : "");
    return fields;
  };
  const auto& cols = columns();
  auto field = [&](const std::vector<std::string>& fields, const char* name) -> const std::string& {
    return fields[static_cast<std::size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin())];
  };
  std::size_t delivered = 0;
  auto deliver = [&](std::size_t k, const std::vector<std::string>& fields) {
    out.append(fields);
    ++sum.ran;
    const std::string& status = field(fields, "status");
    if (status == "non-finite" || status == "rejected") ++sum.failed;
    ++delivered;
    if (progress) {
      const Point& pt = mine[k];
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta = el / static_cast<double>(delivered) * static_cast<double>(todo.size() - delivered);
      const std::string& err = field(fields, "err_units_u");
      const std::string& ratio = field(fields, "err_over_bound");
      *progress << "[" << (sum.already_done + delivered) << "/" << mine.size() << "] " << pt.op << "/" << pt.form << "/"
                << pt.variant << (pt.is_backward() ? " backward:" + pt.backward : "") << " " << pt.scalar
                << " n=" << pt.n << " d=" << pt.d << " dv=" << pt.dv << " g=" << field(fields, "gamma")
                << (pt.is_gated() ? " gates=" + pt.gates : "")
                << (pt.normalized ? " norm eps=" + field(fields, "eps") : "")
                << (pt.ridge != 0 ? " ridge=" + field(fields, "ridge") : "") << " w=" << pt.chunk
                << " thr=" << pt.threads << (ranks > 1 ? " rank=" + field(fields, "rank") : "") << ": "
                << field(fields, "time_median_s") << " s, err " << (err.empty() ? "-" : err) << " u, err/bound "
                << (ratio.empty() ? "-" : ratio) << ", " << status << " | elapsed " << hms(el) << ", ETA " << hms(eta)
                << "\n";
      progress->flush();
    }
  };
  std::vector<std::size_t> order(todo.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  distributed::farm(
      order,
      [&](std::size_t i) {
        distributed::ByteWriter w;
        for (const std::string& x : compute_row(mine[todo[i]])) w.text(x);
        return w.take();
      },
      [&](std::size_t i, const distributed::Bytes& b) {
        distributed::ByteReader r(b);
        std::vector<std::string> fields;
        while (!r.done()) fields.push_back(r.text());
        deliver(todo[i], fields);
      },
      distributed::FarmOptions{o.one_per_host, {}});
  return sum;
}

}  // namespace hla::sweep
