// `hla verify --combine` (combine.hpp): cases, rounds, checks and the report.
#include "verify/combine.hpp"
#include "core/operators.hpp"

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "core/build_info.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "fast/scan/operators.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/exec.hpp"

namespace hla::verify::ext {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// ---- SPEC's summaries as parts ------------------------------------------------------------------------------
// A part's shape as it travels: a scalar (ρ) 0-d, a vector (m, h, z, …) 1-D, every other part 2-D. Which is
// which is a property of the part, read off the identity at widths where no matrix part has one column.
template <class Op> std::map<std::string, int> part_ranks(const Op& op) {
  std::map<std::string, int> rank;
  for (const auto& [name, m] : op.identity(2, 3).named().parts) rank[name] = m.size() == 1 ? 0 : m.cols() == 1 ? 1 : 2;
  return rank;
}

template <class Op> Summary to_summary(const Op& op, const typename Op::Seg& s) {
  const auto rank = part_ranks(op);
  Summary out;
  for (const auto& [name, m] : s.named().parts) {
    Part p{name, {}, {}};
    const int r = rank.at(name);
    if (r == 1) p.shape = {static_cast<std::size_t>(m.rows())};
    if (r == 2) p.shape = {static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols())};
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) p.values.push_back(to_double(m(i, j)));
    out.push_back(std::move(p));
  }
  return out;
}

const Part* find_part(const Summary& s, const std::string& name) {
  for (const Part& p : s)
    if (p.name == name) return &p;
  return nullptr;
}

// The user's summary as the harness's segment (parts mapped onto SPEC's names; ρ, when not given, is γ^length).
// nullopt, with the reason, when a part is missing or has another size.
template <class Op> std::optional<typename Op::Seg> from_summary(const Op& op, const Summary& s, const PartMap& map,
                                                                 long tokens, const Options& opt, Eigen::Index d,
                                                                 Eigen::Index dv, std::string* why) {
  typename Op::Seg seg = op.identity(d, dv);
  bool ok = true;
  Op::Seg::fields(seg, [&](const char* spec, auto& part) {
    if (!ok) return;
    const Part* p = nullptr;
    for (const auto& [user, target] : map)
      if (target == spec) p = find_part(s, user);
    using P = std::decay_t<decltype(part)>;
    if constexpr (std::is_same_v<P, double>) {
      if (!p) {
        if (std::string(spec) == "rho") {
          part = std::pow(from_rational<double>(opt.gamma), static_cast<double>(tokens));
          return;
        }
        ok = false;
        *why = fmt::format("no part maps onto '{}'", spec);
        return;
      }
      if (p->values.size() != 1) {
        ok = false;
        *why = fmt::format("part '{}' ({}) has {} values, expected 1", p->name, spec, p->values.size());
        return;
      }
      part = p->values[0];
    } else {
      if (!p) {
        ok = false;
        *why = fmt::format("no part maps onto '{}'", spec);
        return;
      }
      if (p->values.size() != static_cast<std::size_t>(part.size())) {
        ok = false;
        *why = fmt::format("part '{}' ({}) has {} values, expected {}", p->name, spec, p->values.size(), part.size());
        return;
      }
      for (Eigen::Index i = 0; i < part.rows(); ++i)
        for (Eigen::Index j = 0; j < part.cols(); ++j)
          part(i, j) = p->values[static_cast<std::size_t>(i * part.cols() + j)];
    }
  });
  if (!ok) return std::nullopt;
  return seg;
}

// The harness's summary in the user's names (the mapped parts only).
Summary renamed(const Summary& spec, const PartMap& map) {
  Summary out;
  for (const auto& [user, target] : map)
    if (const Part* p = find_part(spec, target)) {
      Part q = *p;
      q.name = user;
      out.push_back(std::move(q));
    }
  return out;
}

// ---- comparing two summaries ---------------------------------------------------------------------------------
struct Difference {
  double ratio = 0;  // worst |x − y| / tolerance over parts
  double normwise = 0;
  std::string part, detail;
};

// Part by part (only the parts of `want`): |x − y| ≤ tol_rel · max(max|x|, max|y|) + tiny.
Difference compare(const Summary& got, const Summary& want, double tol_rel) {
  Difference r;
  for (const Part& w : want) {
    const Part* g = find_part(got, w.name);
    if (!g) {
      r.ratio = INFINITY;
      r.part = w.name;
      r.detail = "no part '" + w.name + "'";
      return r;
    }
    if (g->values.size() != w.values.size()) {
      r.ratio = INFINITY;
      r.part = w.name;
      r.detail = fmt::format("part '{}' has {} values, expected {}", w.name, g->values.size(), w.values.size());
      return r;
    }
    double scale = 0, worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < w.values.size(); ++i)
      scale = std::max({scale, std::fabs(w.values[i]), std::fabs(g->values[i])});
    for (std::size_t i = 0; i < w.values.size(); ++i) {
      const double e = std::isfinite(g->values[i]) ? std::fabs(g->values[i] - w.values[i]) : INFINITY;
      if (e > worst) {
        worst = e;
        at = i;
      }
    }
    const double tol = tol_rel * scale + 1e-300;
    const double ratio = worst / tol;
    if (ratio > r.ratio) {
      r.ratio = ratio;
      r.normwise = scale > 0 ? worst / scale : worst;
      r.part = w.name;
      const bool finite = std::isfinite(g->values[at]) && std::isfinite(w.values[at]);
      r.detail = fmt::format("part '{}' entry {}{}: {:.17g} vs {:.17g}", w.name, at, finite ? "" : " is not finite",
                             g->values[at], w.values[at]);
    }
  }
  return r;
}

json summary_json(const Summary& s) {
  json j = json::object();
  for (const Part& p : s) j[p.name] = {{"shape", p.shape}, {"values", p.values}};
  return j;
}
json tokens_json(const Problem<double>& p) {
  auto m = [](const Mat<double>& x) {
    json rows = json::array();
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      json r = json::array();
      for (Eigen::Index j = 0; j < x.cols(); ++j) r.push_back(x(i, j));
      rows.push_back(r);
    }
    return rows;
  };
  return {{"q", m(p.Q)}, {"k", m(p.K)}, {"v", m(p.V)}};
}

// ---- the cases ------------------------------------------------------------------------------------------------
Problem<double> ternary(long n, Eigen::Index d, Eigen::Index dv, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-1, 1);
  Problem<double> p{Mat<double>(n, d), Mat<double>(n, d), Mat<double>(n, dv)};
  for (Mat<double>* m : {&p.Q, &p.K, &p.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) (*m)(i) = pick(rng);
  return p;
}

struct Triple {
  std::string group;
  Options opt;
  Problem<double> a, b, c;
  bool sharp = false;  // exact tokens at a dyadic γ: any excess is another function
  // indices of the cases in each round
  std::size_t seg_a = 0, seg_b = 0, seg_c = 0, seg_abc = 0, identity = 0;
  std::size_t ab = 0, bc = 0, ia = 0, ai = 0, ab_c = 0, a_bc = 0;
  long total() const { return static_cast<long>(a.n() + b.n() + c.n()); }
};

Problem<double> concat3(const Problem<double>& a, const Problem<double>& b, const Problem<double>& c) {
  Problem<double> p{Mat<double>(a.n() + b.n() + c.n(), a.d()), Mat<double>(a.n() + b.n() + c.n(), a.d()),
                    Mat<double>(a.n() + b.n() + c.n(), a.dv())};
  p.Q << a.Q, b.Q, c.Q;
  p.K << a.K, b.K, c.K;
  p.V << a.V, b.V, c.V;
  return p;
}

std::vector<Triple> make_triples(const Request& r) {
  std::vector<Triple> out;
  std::uint64_t seed = r.seed * 7777ULL + 1;
  struct Group {
    std::string name;
    rational gamma;
    bool sharp;
    Eigen::Index widen = 0;  // exact widths d0 + widen, dv0 + widen (free widths only)
  };
  // The exact groups follow the options asked for, as in the forward battery: decayed groups only when a γ < 1
  // is asked (an undecayed scan, exact at γ = 1, is never sent a γ it was not built for), and none for an
  // operator without decay (hla3), whose case.json never carries a γ it does not define.
  const bool decays = registry<double>().reference(r.op).caps.decay && r.opt.gamma != 1;
  std::vector<Group> groups{{"base", 1, true}};
  if (decays)
    groups.push_back({"decay-half", rational(1, 2), true});
  else
    groups.push_back({"base-wide", 1, true, 2});  // as many exact triples as a decaying operator gets, at other widths
  if (decays) groups.push_back({"decay", rational(3, 4), true});
  groups.push_back({"user", r.opt.gamma, false});
  const Eigen::Index d0 = r.fixed_widths ? r.d : 2, dv0 = r.fixed_widths ? r.dv : 3;
  for (const Group& g : groups) {
    const bool exact = g.sharp;
    const std::vector<std::array<long, 3>> lengths =
        exact ? std::vector<std::array<long, 3>>{{1, 1, 1}, {1, 2, 1}, {2, 1, 3}, {3, 3, 2}, {4, 2, 5}}
              : std::vector<std::array<long, 3>>{{1, 1, 1}, {2, 3, 1}, {5, 4, 6}, {16, 9, 21}, {40, 33, 27}};
    const Eigen::Index widen = r.fixed_widths ? 0 : g.widen;
    const Eigen::Index d = exact ? d0 + widen : r.d, dv = exact ? dv0 + widen : r.dv;
    for (const auto& len : lengths) {
      Triple t;
      t.group = g.name;
      t.opt.gamma = g.gamma;
      t.sharp = exact;
      Problem<double>* parts[3] = {&t.a, &t.b, &t.c};
      for (int i = 0; i < 3; ++i) {
        const long n = r.fit_n(len[i]);
        *parts[i] = exact ? ternary(n, d, dv, ++seed) : gaussian_problem({n, d, dv}, ++seed);
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

// ---- the file protocol ---------------------------------------------------------------------------------------
npy::DType npy_dtype(DType t) { return t == DType::float64 ? npy::DType::f64 : npy::DType::f32; }

void write_summary(const fs::path& dir, const Summary& s, DType t) {
  fs::create_directories(dir);
  for (const Part& p : s) npy::write(dir / (p.name + ".npy"), p.shape, p.values.data(), npy_dtype(t));
}

// The largest part read back: more values than any state part has at the widest width (256 x 256), so no
// file can claim more; and at most 64 parts (a summary has fewer than 10).
constexpr std::size_t kMaxPartValues = std::size_t{1} << 20;
constexpr std::size_t kMaxParts = 64;

// Every .npy file of the folder as a part (the command's own names and shapes).
Summary read_summary(const fs::path& dir, const std::string& label, DType t, std::string& error) {
  Summary out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    error = "missing " + label + "/ (the command did not write it)";
    return out;
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".npy") files.push_back(it->path());
  if (ec) {
    error = "cannot read " + label + "/: " + ec.message();
    return out;
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    error = label + "/ holds no .npy part";
    return out;
  }
  if (files.size() > kMaxParts) {  // each may hold kMaxPartValues: thousands would exhaust memory
    error = fmt::format("{}/ holds {} .npy parts, more than the {} any summary has", label, files.size(), kMaxParts);
    return out;
  }
  for (const fs::path& f : files) {
    try {
      npy::Array a = npy::read(f, kMaxPartValues);
      if (a.dtype != npy_dtype(t)) {
        error = fmt::format("{}/{} is {}, expected {}", label, f.filename().string(),
                            a.dtype == npy::DType::f64 ? "float64" : "float32", dtype_name(t));
        return {};
      }
      if (a.shape.size() > 2) {
        error = fmt::format("{}/{} has {} dimensions (a part is a scalar, a vector or a matrix)", label,
                            f.filename().string(), a.shape.size());
        return {};
      }
      out.push_back({f.stem().string(), a.shape, std::move(a.data)});
    } catch (const InputError& e) {
      error = "malformed " + label + "/" + f.filename().string() + ": " + problem_in(e, f);
      return {};
    }
  }
  return out;
}

}  // namespace

std::vector<CombineOutcome> ExecCombine::run(const std::vector<CombineCase>& cases, const Request& req, RoundLog& log) {
  const InterruptGuard guard;
  TempDir tmp_dir("hla-combine"), tmp_logs("hla-combine-log");
  const fs::path &dir = tmp_dir.path(), &logs = tmp_logs.path();
  const npy::DType t = npy_dtype(req.dtype);
  write_cases(dir, [&] {
    for (const CombineCase& c : cases) {
      const fs::path cd = dir / c.name;
      fs::create_directories(cd);
      json j = {{"op", req.op},
                {"case", c.name},
                {"kind", c.kind},
                {"dtype", dtype_name(req.dtype)},
                {"d", c.d},
                {"dv", c.dv},
                {"gamma", round_to(req.dtype, from_rational<double>(c.opt.gamma))},
                {"exact", {{"gamma", format_rational(c.opt.gamma)}}}};
      if (c.kind == "segment") {
        npy::write(cd / "q.npy", c.tokens.Q, t);
        npy::write(cd / "k.npy", c.tokens.K, t);
        npy::write(cd / "v.npy", c.tokens.V, t);
        j["n"] = c.tokens.n();
      } else {
        write_summary(cd / "a", c.a, req.dtype);
        write_summary(cd / "b", c.b, req.dtype);
        j["a_tokens"] = c.a_tokens;
        j["b_tokens"] = c.b_tokens;
      }
      write_file_atomically(cd / "case.json", j.dump(2) + "\n", "case file");
    }
  });
  const ProcessResult pr = run_command(command_, dir, timeout_, logs);
  log.seconds = pr.seconds;
  log.failure = pr.describe();
  std::vector<CombineOutcome> out(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string label = cases[i].kind == "segment" ? "summary" : "ab";
    out[i].summary = read_summary(dir / cases[i].name / label, label, req.dtype, out[i].error);
    if (!log.failure.empty())
      out[i].error = "the command " + log.failure.substr(0, log.failure.find(';')) +
                     (out[i].error.empty() ? "" : "; " + out[i].error);
  }
  InterruptGuard::check();
  if (keep_) {
    tmp_dir.release();
    log.what += " (kept in " + dir.string() + ")";
  }
  return out;
}

PartMap read_part_map(const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw InputError("--parts: '" + file + "' is not a file");
  std::ifstream in(file);
  if (!in) throw InputError("--parts: cannot read '" + file + "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) { throw InputError("--parts: '" + file + "' is not JSON: " + e.what()); }
  if (!j.is_object() || j.empty())
    throw InputError("--parts: expected an object {\"your part\": \"SPEC part\" | null}");
  PartMap map;
  for (auto& [user, target] : j.items()) {
    if (user.empty() || user.find('/') != std::string::npos || user.size() > 64)
      throw InputError("--parts: '" + user + "' is not a part name (a file name without '/')");
    if (!target.is_null() && !target.is_string())
      throw InputError("--parts: the value of '" + user + "' must be a SPEC part name or null");
    map.emplace_back(user, target.is_null() ? "" : target.get<std::string>());
  }
  return map;
}

std::vector<std::string> spec_segment_parts(const std::string& op) {
  return scan::with_scan_op<double>(op, scan::Variant::corrected, Options{}, [](const auto& o) {
    std::vector<std::string> names;
    for (const auto& [name, m] : o.identity(2, 3).named().parts) names.push_back(name);
    return names;
  });
}

namespace {

// Runs one round of combine cases (timed, logged). A part declared in --parts as one of SPEC's and missing from
// an answer is a protocol finding of that case (the declaration, or the command, is wrong), not a wrong value.
std::vector<CombineOutcome> round(CombineImplementation& impl, const std::vector<CombineCase>& cases,
                                  const Request& req, const PartMap& declared, const std::string& what, json& rounds,
                                  double& seconds, std::ostream* progress) {
  RoundLog log;
  log.what = what;
  log.cases = cases.size();
  if (progress) *progress << "verify --combine: " << what << ": " << cases.size() << " cases ..." << std::flush;
  const auto t0 = Clock::now();
  std::vector<CombineOutcome> out = impl.run(cases, req, log);
  if (log.seconds == 0) log.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  seconds += log.seconds;
  out.resize(cases.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    for (const auto& [user, target] : declared)
      if (out[i].error.empty() && !target.empty() && !find_part(out[i].summary, user))
        out[i].error = fmt::format("{} has no part '{}' (declared in --parts as SPEC's '{}')",
                                   cases[i].kind == "segment" ? "the summary" : "ab/", user, target);
  if (progress) *progress << fmt::format(" {:.2f} s{}\n", log.seconds, log.failure.empty() ? "" : " — " + log.failure);
  rounds.push_back({{"what", log.what}, {"cases", log.cases}, {"seconds", log.seconds}, {"failure", log.failure}});
  return out;
}

}  // namespace

json run_combine_battery(CombineImplementation& impl, const Request& req, const PartMap& given_map,
                         std::ostream* progress) {
  const auto t0 = Clock::now();
  validate_request(req);
  if (!operator_info(req.op).scan)
    throw InputError("--combine: " + req.op + " has no scan operator to compare with (" +
                     operator_names([](const OperatorInfo& o) { return o.scan; }) + " have one)");
  const std::vector<std::string> spec = spec_segment_parts(req.op);
  PartMap map = given_map;
  for (std::size_t i = 0; i < map.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (!map[i].second.empty() && map[i].second == map[j].second)
        throw InputError("--parts: '" + map[j].first + "' and '" + map[i].first + "' both map onto SPEC's '" +
                         map[i].second + "' (each SPEC part is one of yours)");
  for (const auto& [user, target] : map)
    if (!target.empty() && std::find(spec.begin(), spec.end(), target) == spec.end())
      throw InputError("--parts: '" + target + "' is not a segment part of " + req.op + " (they are: " + [&] {
        std::string s;
        for (const auto& x : spec) s += (s.empty() ? "" : ", ") + x;
        return s;
      }() + ")");

  std::vector<Triple> triples = make_triples(req);
  json rounds = json::array(), findings = json::array();
  double impl_seconds = 0;
  auto note_errors = [&](const std::vector<CombineCase>& cs, const std::vector<CombineOutcome>& os) {
    std::map<std::string, std::pair<std::string, int>> by_error;
    for (std::size_t i = 0; i < cs.size(); ++i)
      if (!os[i].error.empty()) {
        auto& e = by_error[os[i].error];
        if (e.first.empty()) e.first = cs[i].name;
        ++e.second;
      }
    for (const auto& [error, first] : by_error)
      findings.push_back({{"case", first.first}, {"cases", first.second}, {"error", error}});
  };
  auto segment_case = [&](const Triple& t, const Problem<double>& p, const std::string& tag, std::size_t index) {
    CombineCase c;
    c.kind = "segment";
    c.group = t.group;
    c.opt = t.opt;
    c.tokens = p;
    c.d = p.d();
    c.dv = p.dv();
    c.name = fmt::format("segment-{:03d}-{}-{}-n{}", index, t.group, tag, p.n());
    return c;
  };
  // Round 1: the summaries of A, B, C, ABC and of the empty segment.
  std::vector<CombineCase> r1;
  for (Triple& t : triples) {
    t.seg_a = r1.size(), r1.push_back(segment_case(t, t.a, "A", r1.size()));
    t.seg_b = r1.size(), r1.push_back(segment_case(t, t.b, "B", r1.size()));
    t.seg_c = r1.size(), r1.push_back(segment_case(t, t.c, "C", r1.size()));
    t.seg_abc = r1.size(), r1.push_back(segment_case(t, concat3(t.a, t.b, t.c), "ABC", r1.size()));
    t.identity = r1.size(), r1.push_back(segment_case(t, slice_rows(t.a, 0, 0), "empty", r1.size()));
  }
  const std::vector<CombineOutcome> o1 = round(impl, r1, req, given_map, "segments", rounds, impl_seconds, progress);
  note_errors(r1, o1);
  // Without --parts, the command's parts that bear SPEC's names are SPEC's; any other is its own.
  if (map.empty() && !o1.empty())
    for (const Part& p : o1.front().summary)
      map.emplace_back(p.name, std::find(spec.begin(), spec.end(), p.name) != spec.end() ? p.name : "");
  auto combine_case = [&](const Triple& t, const CombineOutcome& a, long na, const CombineOutcome& b, long nb,
                          const std::string& tag, std::size_t index) {
    CombineCase c;
    c.kind = "combine";
    c.group = t.group;
    c.opt = t.opt;
    c.a = a.summary;
    c.b = b.summary;
    c.a_tokens = na;
    c.b_tokens = nb;
    c.d = t.a.d();
    c.dv = t.a.dv();
    c.name = fmt::format("combine-{:03d}-{}-{}", index, t.group, tag);
    return c;
  };
  std::vector<CombineCase> r2, r3;
  std::vector<CombineOutcome> o2, o3;
  if (findings.empty()) {
    // Round 2: A ⊕ B, B ⊕ C and the identity on either side of A.
    for (Triple& t : triples) {
      const long na = t.a.n(), nb = t.b.n(), nc = t.c.n();
      t.ab = r2.size(), r2.push_back(combine_case(t, o1[t.seg_a], na, o1[t.seg_b], nb, "AB", r2.size()));
      t.bc = r2.size(), r2.push_back(combine_case(t, o1[t.seg_b], nb, o1[t.seg_c], nc, "BC", r2.size()));
      t.ia = r2.size(), r2.push_back(combine_case(t, o1[t.identity], 0, o1[t.seg_a], na, "IA", r2.size()));
      t.ai = r2.size(), r2.push_back(combine_case(t, o1[t.seg_a], na, o1[t.identity], 0, "AI", r2.size()));
    }
    o2 = round(impl, r2, req, given_map, "combine A⊕B, B⊕C, identity", rounds, impl_seconds, progress);
    note_errors(r2, o2);
  }
  if (findings.empty()) {
    // Round 3: (A ⊕ B) ⊕ C and A ⊕ (B ⊕ C).
    for (Triple& t : triples) {
      const long na = t.a.n(), nb = t.b.n(), nc = t.c.n();
      t.ab_c = r3.size(), r3.push_back(combine_case(t, o2[t.ab], na + nb, o1[t.seg_c], nc, "(AB)C", r3.size()));
      t.a_bc = r3.size(), r3.push_back(combine_case(t, o1[t.seg_a], na, o2[t.bc], nb + nc, "A(BC)", r3.size()));
    }
    o3 = round(impl, r3, req, given_map, "combine (A⊕B)⊕C, A⊕(B⊕C)", rounds, impl_seconds, progress);
    note_errors(r3, o3);
  }

  // The checks. Tolerance h·u of the part's size: u the dtype's (float32's at least on exact tokens, as the
  // forward's exact cases), h = 4(n + d + dv); beyond it on a sharp triple, or beyond the coarsest plausible
  // arithmetic (bf16's u) on a random one, the check fails; beyond only the dtype's on a random one, it is a
  // precision problem.
  const bool mapped_fully = [&] {
    for (const std::string& s : spec) {
      if (s == "rho") continue;
      bool found = false;
      for (const auto& [user, target] : map) found = found || target == s;
      if (!found) return false;
    }
    return true;
  }();
  struct Check {
    std::string name, what;
    int cases = 0, failed = 0, over = 0;
    double worst = 0;
    const Triple* smallest = nullptr;
    json counterexample;
  };
  std::vector<Check> checks(4);
  const char* what[4][2] = {
      {"associativity", "(A ⊕ B) ⊕ C = A ⊕ (B ⊕ C)"},
      {"identity", "I ⊕ A = A = A ⊕ I (I: the summary of the empty segment)"},
      {"segments", "(A ⊕ B) ⊕ C = segment(ABC)"},
      {"operator", "segment(X) and A ⊕ B equal the harness's exact operator (parts mapped onto SPEC's)"}};
  for (int i = 0; i < 4; ++i) checks[i].name = what[i][0], checks[i].what = what[i][1];
  json matches = json::array();
  std::map<std::string, int> combine_equals;  // variant → combine cases it equals
  int combine_compared = 0;
  if (findings.empty()) {
    const double u_dtype = unit_roundoff(req.dtype);
    for (const Triple& t : triples) {
      const double u = t.sharp ? std::max(u_dtype, hla::unit_roundoff<float>()) : u_dtype;
      const double h = 4.0 * static_cast<double>(t.total() + t.a.d() + t.a.dv());
      auto judge = [&](Check& c, const Summary& got, const Summary& want, const json& detail) {
        ++c.cases;
        const Difference diff = compare(got, want, h * u);
        c.worst = std::max(c.worst, diff.ratio);
        if (diff.ratio <= 1) return;
        const bool fails = t.sharp || !(compare(got, want, h * std::ldexp(1.0, -8)).ratio <= 1);
        if (!fails) {
          ++c.over;
          return;
        }
        ++c.failed;
        if (!c.smallest || t.total() < c.smallest->total() || (t.sharp && !c.smallest->sharp)) {
          c.smallest = &t;
          c.counterexample = detail;
          c.counterexample["difference"] = diff.detail;
          c.counterexample["part"] = diff.part;
          c.counterexample["group"] = t.group;
          c.counterexample["gamma"] = format_rational(t.opt.gamma);
          c.counterexample["A"] = tokens_json(t.a);
          c.counterexample["B"] = tokens_json(t.b);
          c.counterexample["C"] = tokens_json(t.c);
        }
      };
      judge(checks[0], o3[t.ab_c].summary, o3[t.a_bc].summary,
            {{"left", summary_json(o3[t.ab_c].summary)}, {"right", summary_json(o3[t.a_bc].summary)}});
      judge(checks[1], o2[t.ia].summary, o1[t.seg_a].summary,
            {{"I+A", summary_json(o2[t.ia].summary)}, {"A", summary_json(o1[t.seg_a].summary)}});
      judge(checks[1], o2[t.ai].summary, o1[t.seg_a].summary,
            {{"A+I", summary_json(o2[t.ai].summary)}, {"A", summary_json(o1[t.seg_a].summary)}});
      judge(checks[2], o3[t.ab_c].summary, o1[t.seg_abc].summary,
            {{"(AB)C", summary_json(o3[t.ab_c].summary)}, {"segment(ABC)", summary_json(o1[t.seg_abc].summary)}});
      if (!mapped_fully) continue;
      scan::with_scan_op<double>(req.op, scan::Variant::corrected, t.opt, [&](const auto& op) {
        using Op = std::decay_t<decltype(op)>;
        // segment(X) against the harness's exact summary of X (computed in double from exact tokens)
        const std::vector<std::pair<const Problem<double>*, std::size_t>> segs{
            {&t.a, t.seg_a}, {&t.b, t.seg_b}, {&t.c, t.seg_c}};
        for (const auto& [p, at] : segs) {
          const Summary want = renamed(to_summary(op, scan::segment(op, *p, 0, p->n())), map);
          judge(checks[3], o1[at].summary, want,
                {{"segment", summary_json(o1[at].summary)}, {"expected", summary_json(want)}});
        }
        // A ⊕ B on the command's own A and B against the exact combine of them, and which variant it equals
        std::string why;
        const auto A = from_summary(op, o1[t.seg_a].summary, map, t.a.n(), t.opt, t.a.d(), t.a.dv(), &why);
        const auto B = from_summary(op, o1[t.seg_b].summary, map, t.b.n(), t.opt, t.a.d(), t.a.dv(), &why);
        if (!A || !B) return 0;
        const Summary want = renamed(to_summary(op, op.combine(*A, *B)), map);
        judge(checks[3], o2[t.ab].summary, want,
              {{"A+B", summary_json(o2[t.ab].summary)}, {"expected", summary_json(want)}});
        ++combine_compared;
        for (scan::Variant v : {scan::Variant::paper, scan::Variant::corrected})
          scan::with_scan_op<double>(req.op, v, t.opt, [&](const auto& vop) {
            using V = std::decay_t<decltype(vop)>;
            if constexpr (std::is_same_v<V, Op>) {
              const Summary w = renamed(to_summary(vop, vop.combine(*A, *B)), map);
              if (compare(o2[t.ab].summary, w, h * u).ratio <= 1) ++combine_equals[scan::variant_name(v)];
            }
            return 0;
          });
        return 0;
      });
    }
  }
  // Which printed combine the command's equals, when it is not the exact one.
  if (combine_compared > 0 && checks[3].failed > 0 && combine_equals["paper"] == combine_compared &&
      combine_equals["corrected"] < combine_compared)
    matches.push_back({{"key", req.op + "/scan/paper"},
                       {"description", "the paper's printed decayed concatenation" +
                                           (operator_info(req.op).monoid_formula.empty()
                                                ? std::string()
                                                : " (" + std::string(operator_info(req.op).monoid_formula) + ")")},
                       {"claim", std::string(operator_info(req.op).monoid_claim)},
                       {"cases", combine_compared}});

  std::string verdict = "computes";
  bool over = false;
  for (const Check& c : checks) {
    if (c.failed) verdict = "differs";
    over = over || c.over > 0;
  }
  if (verdict == "computes" && over) verdict = "lower-precision";
  if (!findings.empty()) verdict = "error";
  json jchecks = json::object();
  json counterexample = nullptr;
  for (const Check& c : checks) {
    if (c.name == "operator" && !mapped_fully) {
      jchecks[c.name] = {{"checked", false}, {"why", "the parts do not map onto every one of SPEC's (" + [&] {
                                                std::string s;
                                                for (const auto& x : spec) s += (s.empty() ? "" : ", ") + x;
                                                return s;
                                              }() + "; declare them with --parts)"}};
      continue;
    }
    jchecks[c.name] = {{"checked", true},    {"what", c.what},       {"cases", c.cases},
                       {"failed", c.failed}, {"over_bound", c.over}, {"worst_ratio", c.worst}};
    if (c.failed && counterexample.is_null()) {
      counterexample = c.counterexample;
      counterexample["check"] = c.name;
    }
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  json report = {
      {"verdict", verdict},
      {"mode", "combine"},
      {"op", req.op},
      {"options", {{"gamma", format_rational(req.opt.gamma)}}},
      {"dtype", dtype_name(req.dtype)},
      {"parts",
       [&] {
         json m = json::object();
         for (const auto& [user, target] : map) m[user] = target.empty() ? json(nullptr) : json(target);
         return m;
       }()},
      {"checks", jchecks},
      {"matches", matches},
      {"counterexample", counterexample},
      {"findings", findings},
      {"rounds", rounds},
      {"timings",
       {{"total_seconds", total}, {"implementation_seconds", impl_seconds}, {"harness_seconds", total - impl_seconds}}},
      {"harness", {{"commit", build_info::source_tree()}}}};
  std::ostringstream s;
  s << "hla verify --combine: " << req.op << " (gamma=" << format_rational(req.opt.gamma) << "), "
    << dtype_name(req.dtype) << "\n";
  s << "verdict: " << verdict << "\n";
  for (auto& [name, c] : jchecks.items()) {
    if (!c["checked"].get<bool>()) {
      s << "  " << name << ": not checked — " << c["why"].get<std::string>() << "\n";
      continue;
    }
    s << fmt::format("  {:<14} {} cases, {} fail, {} over the dtype's bound only; worst {:.3g} x the tolerance  ({})\n",
                     name, c["cases"].get<int>(), c["failed"].get<int>(), c["over_bound"].get<int>(),
                     c["worst_ratio"].get<double>(), c["what"].get<std::string>());
  }
  for (const auto& m : matches)
    s << "  combine matches " << m["key"].get<std::string>() << ": " << m["description"].get<std::string>()
      << (m["claim"].get<std::string>().empty() ? "" : " (see claim " + m["claim"].get<std::string>() + ")") << "\n";
  if (!counterexample.is_null()) {
    auto len = [](const json& t) { return t["q"].size(); };
    const std::string check = counterexample["check"];
    // The identity check involves A alone; the others the whole triple.
    const std::string segments = check == "identity"
                                     ? fmt::format("I ⊕ A and A ⊕ I with A of {} tokens", len(counterexample["A"]))
                                     : fmt::format("segments of {}, {}, {} tokens", len(counterexample["A"]),
                                                   len(counterexample["B"]), len(counterexample["C"]));
    s << fmt::format("  smallest counterexample ({} check, {} tokens, gamma={}): {}; {}\n", check,
                     counterexample["group"].get<std::string>() == "user" ? "random" : "exact",
                     counterexample["gamma"].get<std::string>(), segments,
                     counterexample["difference"].get<std::string>());
  }
  for (const auto& f : findings)
    s << "  error in " << f["case"].get<std::string>()
      << (f["cases"].get<int>() > 1 ? fmt::format(" (and {} more cases)", f["cases"].get<int>() - 1) : "") << ": "
      << f["error"].get<std::string>() << "\n";
  s << fmt::format("  time: {:.3g} s in the implementation ({} round{}), {:.3g} s in the harness\n", impl_seconds,
                   rounds.size(), rounds.size() == 1 ? "" : "s", total - impl_seconds);
  report["summary"] = s.str();
  return report;
}

}  // namespace hla::verify::ext
