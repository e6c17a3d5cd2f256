// `hla verify --combine` (combine.hpp): cases, rounds, checks and the report.
#include "verify/combine.hpp"
#include "core/operators.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "core/inputs.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "fast/scan/operators.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/driver.hpp"
#include "verify/exec.hpp"

namespace hla::verify::ext {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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

void write_summary(const fs::path& dir, const Summary& s, DType t) {
  fs::create_directories(dir);
  for (const Part& p : s) npy::write(dir / (p.name + ".npy"), p.shape, p.values.data(), npy_dtype(t));
}

// The largest part read back: more values than any state part has at the widest width (256 x 256), so no
// file can claim more; and at most 64 parts (a summary has fewer than 10).
constexpr std::size_t kMaxPartValues = std::size_t{1} << 20;
constexpr std::size_t kMaxParts = 64;
// The longest part name: the harness writes parts back as <name>.npy through a temporary name beside it, which a
// 250-character name took past the file system's 255 (E7: "File name too long" and no report).
constexpr std::size_t kMaxPartName = 64;

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
    if (f.stem().string().size() > kMaxPartName) {
      error = fmt::format("{}/ holds a part named with {} characters, more than the {} a part name may have", label,
                          f.stem().string().size(), kMaxPartName);
      return {};
    }
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
  TempDir tmp_dir("hla-combine");
  const fs::path& dir = tmp_dir.path();
  const npy::DType t = npy_dtype(req.dtype);
  write_cases(dir, [&] {
    for (const CombineCase& c : cases) {
      const fs::path cd = dir / c.name;
      fs::create_directories(cd);
      json j = {{"op", req.op},
                {"case", c.name},
                {"kind", to_string(c.kind)},
                {"dtype", dtype_name(req.dtype)},
                {"d", c.d},
                {"dv", c.dv},
                {"gamma", round_to(req.dtype, from_rational<double>(c.opt.gamma))},
                {"exact", {{"gamma", format_rational(c.opt.gamma)}}}};
      if (c.kind == CombineKind::segment) {
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
  const ProcessResult pr = session_.round(dir, timeout_);
  log.seconds = pr.seconds;
  log.failure = pr.describe();
  std::vector<CombineOutcome> out(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string label = cases[i].kind == CombineKind::segment ? "summary" : "ab";
    out[i].summary = read_summary(dir / cases[i].name / label, label, req.dtype, out[i].error);
    out[i].error = pr.case_error(out[i].error);
  }
  InterruptGuard::check();
  if (keep_) {
    tmp_dir.release();
    log.what += " (kept in " + dir.string() + ")";
  }
  return out;
}

PartMap read_part_map(const std::string& file) {
  json j;
  try {
    j = json::parse(read_regular_file(file, 1 << 20));  // a regular file only: a FIFO never blocks (io/files.hpp)
  } catch (const InputError& e) {
    throw InputError(std::string("--parts: ") + e.what());
  } catch (const json::exception& e) { throw InputError("--parts: '" + file + "' is not JSON: " + e.what()); }
  if (!j.is_object() || j.empty())
    throw InputError("--parts: expected an object {\"your part\": \"SPEC part\" | null}");
  PartMap map;
  for (auto& [user, target] : j.items()) {
    if (user.empty() || user.find('/') != std::string::npos || user.size() > kMaxPartName)
      throw InputError("--parts: '" + user + "' is not a part name (a file name without '/')");
    if (!target.is_null() && !target.is_string())
      throw InputError("--parts: the value of '" + user + "' must be a SPEC part name or null");
    map.emplace_back(user, target.is_null() ? "" : target.get<std::string>());
  }
  return map;
}

constexpr NameTable<CombineKind, 2> name_table(CombineKind) {
  return {"combine case kind", {{{CombineKind::segment, "segment"}, {CombineKind::combine, "combine"}}}};
}
std::string to_string(CombineKind k) { return name_of(k); }
CombineKind parse_combine_kind(const std::string& text) { return parse<CombineKind>(text); }

std::vector<std::string> spec_segment_parts(const std::string& op) {
  return scan::with_scan_op<double>(op, scan::Variant::corrected, Options{}, [](const auto& o) {
    std::vector<std::string> names;
    for (const auto& [name, m] : o.identity(2, 3).named().parts) names.push_back(name);
    return names;
  });
}

namespace {

// ---- the driver: rounds → tally → verdict → shrink → diagnose → report -------------------------------------

// One check of the algebra (associativity, identity, segments, the operator): its tally, and every triple that
// failed it with what it showed, in the order met (the shrink phase picks the smallest).
struct Check {
  std::string name, what;
  int cases = 0, failed = 0, over = 0;
  double worst = 0;
  std::vector<std::pair<const Triple*, json>> failures;
};

// SPEC's part names as a list: "S, C, m, ...".
std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& x : names) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string combine_summary_text(const json& r);

class CombineBattery {
 public:
  CombineBattery(CombineImplementation& impl, const Request& req, const PartMap& given_map, std::ostream* progress)
      : impl_(impl), req_(req), given_map_(given_map), rounds_("verify --combine", progress) {}

  json run() {
    run_rounds();
    tally();
    decide();
    shrink();
    diagnose_combine();
    return report();
  }

 private:
  // The request and --parts: an operator with a scan operator, each SPEC part one of the command's at most.
  void check_request() {
    validate_request(req_);
    if (!operator_info(req_.op).scan)
      throw InputError("--combine: " + req_.op + " has no scan operator to compare with (" +
                       operator_names([](const OperatorInfo& o) { return o.scan; }) + " have one)");
    spec_ = spec_segment_parts(req_.op);
    map_ = given_map_;
    for (std::size_t i = 0; i < map_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (!map_[i].second.empty() && map_[i].second == map_[j].second)
          throw InputError("--parts: '" + map_[j].first + "' and '" + map_[i].first + "' both map onto SPEC's '" +
                           map_[i].second + "' (each SPEC part is one of yours)");
    for (const auto& [user, target] : map_)
      if (!target.empty() && std::find(spec_.begin(), spec_.end(), target) == spec_.end())
        throw InputError("--parts: '" + target + "' is not a segment part of " + req_.op +
                         " (they are: " + listed(spec_) + ")");
  }

  // One round of combine cases; its protocol findings are noted, by message. A part declared in --parts as one of
  // SPEC's and missing from an answer is a finding of that case (the declaration, or the command, is wrong), not a
  // wrong value.
  std::vector<CombineOutcome> round(const std::vector<CombineCase>& cases, const std::string& what) {
    std::vector<CombineOutcome> out = rounds_.run(impl_, cases, req_, what);
    out.resize(cases.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      for (const auto& [user, target] : given_map_)
        if (out[i].error.empty() && !target.empty() && !find_part(out[i].summary, user))
          out[i].error = fmt::format("{} has no part '{}' (declared in --parts as SPEC's '{}')",
                                     cases[i].kind == CombineKind::segment ? "the summary" : "ab/", user, target);
    json found = findings_of(cases, out);
    std::sort(found.begin(), found.end(), [](const json& a, const json& b) {
      return a["error"].get<std::string>() < b["error"].get<std::string>();
    });
    for (auto& f : found) findings_.push_back(std::move(f));
    return out;
  }

  static CombineCase segment_case(const Triple& t, const Problem<double>& p, const std::string& tag,
                                  std::size_t index) {
    CombineCase c;
    c.kind = CombineKind::segment;
    c.group = t.group;
    c.opt = t.opt;
    c.tokens = p;
    c.d = p.d();
    c.dv = p.dv();
    c.name = fmt::format("segment-{:03d}-{}-{}-n{}", index, t.group, tag, p.n());
    return c;
  }
  static CombineCase combine_case(const Triple& t, const CombineOutcome& a, long na, const CombineOutcome& b, long nb,
                                  const std::string& tag, std::size_t index) {
    CombineCase c;
    c.kind = CombineKind::combine;
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
  }

  // Rounds: the segments, then (while the protocol holds) the pairwise combines, then the triple ones.
  void run_rounds() {
    check_request();
    triples_ = make_triples(req_);
    // Round 1: the summaries of A, B, C, ABC and of the empty segment.
    std::vector<CombineCase> r1;
    for (Triple& t : triples_) {
      t.seg_a = r1.size(), r1.push_back(segment_case(t, t.a, "A", r1.size()));
      t.seg_b = r1.size(), r1.push_back(segment_case(t, t.b, "B", r1.size()));
      t.seg_c = r1.size(), r1.push_back(segment_case(t, t.c, "C", r1.size()));
      t.seg_abc = r1.size(), r1.push_back(segment_case(t, concat3(t.a, t.b, t.c), "ABC", r1.size()));
      t.identity = r1.size(), r1.push_back(segment_case(t, slice_rows(t.a, 0, 0), "empty", r1.size()));
    }
    o1_ = round(r1, "segments");
    // Without --parts, the command's parts that bear SPEC's names are SPEC's; any other is its own.
    if (map_.empty() && !o1_.empty())
      for (const Part& p : o1_.front().summary)
        map_.emplace_back(p.name, std::find(spec_.begin(), spec_.end(), p.name) != spec_.end() ? p.name : "");
    if (!findings_.empty()) return;
    // Round 2: A ⊕ B, B ⊕ C and the identity on either side of A.
    std::vector<CombineCase> r2;
    for (Triple& t : triples_) {
      const long na = t.a.n(), nb = t.b.n(), nc = t.c.n();
      t.ab = r2.size(), r2.push_back(combine_case(t, o1_[t.seg_a], na, o1_[t.seg_b], nb, "AB", r2.size()));
      t.bc = r2.size(), r2.push_back(combine_case(t, o1_[t.seg_b], nb, o1_[t.seg_c], nc, "BC", r2.size()));
      t.ia = r2.size(), r2.push_back(combine_case(t, o1_[t.identity], 0, o1_[t.seg_a], na, "IA", r2.size()));
      t.ai = r2.size(), r2.push_back(combine_case(t, o1_[t.seg_a], na, o1_[t.identity], 0, "AI", r2.size()));
    }
    o2_ = round(r2, "combine A⊕B, B⊕C, identity");
    if (!findings_.empty()) return;
    // Round 3: (A ⊕ B) ⊕ C and A ⊕ (B ⊕ C).
    std::vector<CombineCase> r3;
    for (Triple& t : triples_) {
      const long na = t.a.n(), nb = t.b.n(), nc = t.c.n();
      t.ab_c = r3.size(), r3.push_back(combine_case(t, o2_[t.ab], na + nb, o1_[t.seg_c], nc, "(AB)C", r3.size()));
      t.a_bc = r3.size(), r3.push_back(combine_case(t, o1_[t.seg_a], na, o2_[t.bc], nb + nc, "A(BC)", r3.size()));
    }
    o3_ = round(r3, "combine (A⊕B)⊕C, A⊕(B⊕C)");
  }

  // Tally: every check on every triple. Tolerance h·u of the part's size: u the dtype's (float32's at least on
  // exact tokens, as the forward's exact cases), h = 4(n + d + dv); beyond it on a sharp triple, or beyond the
  // coarsest plausible arithmetic (bf16's u) on a random one, the check fails; beyond only the dtype's on a random
  // one, it is a precision problem.
  void tally() {
    mapped_fully_ = [&] {
      for (const std::string& s : spec_) {
        if (s == "rho") continue;
        bool found = false;
        for (const auto& [user, target] : map_) found = found || target == s;
        if (!found) return false;
      }
      return true;
    }();
    const char* what[4][2] = {
        {"associativity", "(A ⊕ B) ⊕ C = A ⊕ (B ⊕ C)"},
        {"identity", "I ⊕ A = A = A ⊕ I (I: the summary of the empty segment)"},
        {"segments", "(A ⊕ B) ⊕ C = segment(ABC)"},
        {"operator", "segment(X) and A ⊕ B equal the harness's exact operator (parts mapped onto SPEC's)"}};
    for (int i = 0; i < 4; ++i) checks_[i].name = what[i][0], checks_[i].what = what[i][1];
    if (!findings_.empty()) return;
    const double u_dtype = unit_roundoff(req_.dtype);
    for (const Triple& t : triples_) {
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
        json shown = detail;
        shown["difference"] = diff.detail;
        shown["part"] = diff.part;
        shown["group"] = t.group;
        shown["gamma"] = format_rational(t.opt.gamma);
        shown["A"] = tokens_json(t.a);
        shown["B"] = tokens_json(t.b);
        shown["C"] = tokens_json(t.c);
        c.failures.emplace_back(&t, std::move(shown));
      };
      const Summary &ab_c = o3_[t.ab_c].summary, &a_bc = o3_[t.a_bc].summary, &a = o1_[t.seg_a].summary;
      judge(checks_[0], ab_c, a_bc, {{"left", summary_json(ab_c)}, {"right", summary_json(a_bc)}});
      judge(checks_[1], o2_[t.ia].summary, a, {{"I+A", summary_json(o2_[t.ia].summary)}, {"A", summary_json(a)}});
      judge(checks_[1], o2_[t.ai].summary, a, {{"A+I", summary_json(o2_[t.ai].summary)}, {"A", summary_json(a)}});
      judge(checks_[2], ab_c, o1_[t.seg_abc].summary,
            {{"(AB)C", summary_json(ab_c)}, {"segment(ABC)", summary_json(o1_[t.seg_abc].summary)}});
      if (!mapped_fully_) continue;
      scan::with_scan_op<double>(req_.op, scan::Variant::corrected, t.opt, [&](const auto& op) {
        using Op = std::decay_t<decltype(op)>;
        // segment(X) against the harness's exact summary of X (computed in double from exact tokens)
        const std::vector<std::pair<const Problem<double>*, std::size_t>> segs{
            {&t.a, t.seg_a}, {&t.b, t.seg_b}, {&t.c, t.seg_c}};
        for (const auto& [p, at] : segs) {
          const Summary want = renamed(to_summary(op, scan::segment(op, *p, 0, p->n())), map_);
          judge(checks_[3], o1_[at].summary, want,
                {{"segment", summary_json(o1_[at].summary)}, {"expected", summary_json(want)}});
        }
        // A ⊕ B on the command's own A and B against the exact combine of them, and which variant it equals
        std::string why;
        const auto A = from_summary(op, o1_[t.seg_a].summary, map_, t.a.n(), t.opt, t.a.d(), t.a.dv(), &why);
        const auto B = from_summary(op, o1_[t.seg_b].summary, map_, t.b.n(), t.opt, t.a.d(), t.a.dv(), &why);
        if (!A || !B) return 0;
        const Summary want = renamed(to_summary(op, op.combine(*A, *B)), map_);
        judge(checks_[3], o2_[t.ab].summary, want,
              {{"A+B", summary_json(o2_[t.ab].summary)}, {"expected", summary_json(want)}});
        ++combine_compared_;
        for (scan::Variant v : {scan::Variant::paper, scan::Variant::corrected})
          scan::with_scan_op<double>(req_.op, v, t.opt, [&](const auto& vop) {
            using V = std::decay_t<decltype(vop)>;
            if constexpr (std::is_same_v<V, Op>) {
              const Summary w = renamed(to_summary(vop, vop.combine(*A, *B)), map_);
              if (compare(o2_[t.ab].summary, w, h * u).ratio <= 1) ++combine_equals_[scan::variant_name(v)];
            }
            return 0;
          });
        return 0;
      });
    }
  }

  // Verdict: a failed check differs, a check over the dtype's bound only is a lower precision.
  void decide() {
    bool failed = false, over = false;
    for (const Check& c : checks_) {
      failed = failed || c.failed > 0;
      over = over || c.over > 0;
    }
    verdict_ = decide_verdict(!findings_.empty(), failed, over);
  }

  // Shrink: the triples are already as small as a check can take (single tokens and up): the counterexample is the
  // smallest failing triple, exact ones first, of the first check that fails.
  void shrink() {
    for (const Check& c : checks_) {
      if (!c.failed) continue;
      const Triple* smallest = nullptr;
      for (const auto& [t, shown] : c.failures)
        if (!smallest || t->total() < smallest->total() || (t->sharp && !smallest->sharp)) {
          smallest = t;
          counterexample_ = shown;
        }
      counterexample_["check"] = c.name;
      return;
    }
  }

  // Diagnose: which printed combine the command's equals, when it is not the exact one.
  void diagnose_combine() {
    if (combine_compared_ > 0 && checks_[3].failed > 0 && combine_equals_["paper"] == combine_compared_ &&
        combine_equals_["corrected"] < combine_compared_) {
      const OperatorInfo& info = operator_info(req_.op);
      matches_.push_back(
          {{"key", req_.op + "/scan/paper"},
           {"description",
            "the paper's printed decayed concatenation" +
                (info.monoid_formula.empty() ? std::string() : " (" + std::string(info.monoid_formula) + ")")},
           {"claim", std::string(info.monoid_claim)},
           {"cases", combine_compared_}});
    }
  }

  // Report: the whole report (combine.hpp), and its summary.
  json report() const {
    json jchecks = json::object();
    for (const Check& c : checks_) {
      if (c.name == "operator" && !mapped_fully_) {
        jchecks[c.name] = {{"checked", false},
                           {"why", "the parts do not map onto every one of SPEC's (" + listed(spec_) +
                                       "; declare them with --parts)"}};
        continue;
      }
      jchecks[c.name] = {{"checked", true},    {"what", c.what},       {"cases", c.cases},
                         {"failed", c.failed}, {"over_bound", c.over}, {"worst_ratio", c.worst}};
    }
    json parts = json::object();
    for (const auto& [user, target] : map_) parts[user] = target.empty() ? json(nullptr) : json(target);
    json report = report_core(verdict_, req_, matches_, counterexample_, findings_);
    report["mode"] = "combine";
    report["options"] = {{"gamma", format_rational(req_.opt.gamma)}};
    report["parts"] = parts;
    report["checks"] = jchecks;
    rounds_.write(report);
    report["summary"] = combine_summary_text(report);
    return report;
  }

  CombineImplementation& impl_;
  const Request& req_;
  const PartMap& given_map_;
  Rounds rounds_;
  std::vector<std::string> spec_;  // SPEC's segment part names
  PartMap map_;                    // --parts, or the command's parts that bear SPEC's names
  std::vector<Triple> triples_;
  std::vector<CombineOutcome> o1_, o2_, o3_;  // the answers of the rounds
  json findings_ = json::array();
  bool mapped_fully_ = false;
  std::array<Check, 4> checks_;
  std::map<std::string, int> combine_equals_;  // variant → combine cases it equals
  int combine_compared_ = 0;
  Verdict verdict_ = Verdict::computes;
  json counterexample_ = nullptr;
  json matches_ = json::array();
};

std::string combine_summary_text(const json& r) {
  std::ostringstream s;
  s << "hla verify --combine: " << r["op"].get<std::string>() << " (gamma=" << r["options"]["gamma"].get<std::string>()
    << "), " << r["dtype"].get<std::string>() << "\n";
  s << "verdict: " << r["verdict"].get<std::string>() << "\n";
  for (auto& [name, c] : r["checks"].items()) {
    if (!c["checked"].get<bool>()) {
      s << "  " << name << ": not checked — " << c["why"].get<std::string>() << "\n";
      continue;
    }
    s << fmt::format("  {:<14} {} cases, {} fail, {} over the dtype's bound only; worst {:.3g} x the tolerance  ({})\n",
                     name, c["cases"].get<int>(), c["failed"].get<int>(), c["over_bound"].get<int>(),
                     c["worst_ratio"].get<double>(), c["what"].get<std::string>());
  }
  for (const auto& m : r["matches"]) s << match_text("  combine matches ", m);
  const json& counterexample = r["counterexample"];
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
  s << findings_text(r["findings"]);
  s << timings_text(r);
  return s.str();
}

}  // namespace

json run_combine_battery(CombineImplementation& impl, const Request& req, const PartMap& given_map,
                         std::ostream* progress) {
  return CombineBattery(impl, req, given_map, progress).run();
}

}  // namespace hla::verify::ext
