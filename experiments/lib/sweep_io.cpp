// Sweep output: the column list, RFC 4180 CSV lines, JSON lines, reading a CSV back, and `hla merge`.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "experiments/lib/sweep.hpp"
#include "io/files.hpp"

namespace hla::sweep {

namespace {
// The CSV's columns in order, each marked numeric (N) or text (T): numeric ones are checked to parse as numbers.
enum Kind : bool { T = false, N = true };
struct Column {
  const char* name;
  Kind kind;
};
// clang-format off
constexpr Column kColumns[] = {
    {"index", N}, {"key", T}, {"config", T}, {"operator", T}, {"form", T}, {"variant", T}, {"scalar", T}, {"n", N},
    {"d", N}, {"dv", N}, {"gamma", T}, {"gates", T}, {"eps", T}, {"ridge", T}, {"normalized", N}, {"chunk", N},
    {"threads", N}, {"seed", N}, {"repeats", N}, {"backward", T},
    {"status", T}, {"note", T},
    {"time_median_s", N}, {"time_min_s", N}, {"time_max_s", N}, {"time_iqr_s", N}, {"tokens_per_s", N},
    {"cpu_time_median_s", N}, {"threads_used", N}, {"peak_rss_delta_bytes", N}, {"state_numbers", N}, {"state_bytes", N},
    {"checkpoints", N}, {"stored_states", N}, {"stored_bytes", N},
    {"exact_fp61", T}, {"ref_method", T},
    {"err_max_abs", N}, {"err_max_rel", N}, {"err_normwise_rel", N}, {"err_units_u", N},
    {"bound_h", N}, {"bound_normwise_rel", N}, {"bound_units_u", N}, {"err_over_bound", N},
    {"commit", T}, {"source_tree", T}, {"compiler", T}, {"flags", T}, {"cpu", T}, {"host", T}, {"rank", N},
    {"ranks_on_host", N}, {"load_1min", N}, {"date", T}};
// clang-format on
}  // namespace

const std::vector<std::string>& columns() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> names;
    for (const Column& col : kColumns) names.emplace_back(col.name);
    return names;
  }();
  return c;
}

static bool numeric_column(const std::string& name) {
  static const std::set<std::string> s = [] {
    std::set<std::string> numeric;
    for (const Column& col : kColumns)
      if (col.kind == N) numeric.emplace(col.name);
    return numeric;
  }();
  return s.count(name) > 0;
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\n\r") == std::string::npos) {
      out += f;
    } else {
      out += '"';
      for (char ch : f) {
        if (ch == '"') out += '"';
        out += ch == '\n' || ch == '\r' ? ' ' : ch;  // one point = one physical line
      }
      out += '"';
    }
  }
  out += '\n';
  return out;
}

std::vector<std::string> parse_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (ch == '"')
        quoted = false;
      else
        out.back() += ch;
    } else if (ch == '"')
      quoted = true;
    else if (ch == ',')
      out.emplace_back();
    else if (ch != '\n' && ch != '\r')
      out.back() += ch;
  }
  return out;
}

std::string json_line(const std::vector<std::string>& fields) {
  nlohmann::ordered_json j;
  const auto& cols = columns();
  for (std::size_t i = 0; i < cols.size() && i < fields.size(); ++i) {
    const std::string& f = fields[i];
    if (numeric_column(cols[i])) {
      if (f.empty()) {
        j[cols[i]] = nullptr;
        continue;
      }
      if (f == "inf") {
        j[cols[i]] = "inf";
        continue;
      }  // JSON has no infinity
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(f, &used);
      } catch (const std::exception&) { used = 0; }
      if (used == f.size()) {
        if (f.find_first_of(".eE") == std::string::npos)
          j[cols[i]] = static_cast<long long>(v);
        else
          j[cols[i]] = v;
      } else {
        j[cols[i]] = f;
      }
    } else {
      j[cols[i]] = f;
    }
  }
  return json_text(j) + "\n";  // a byte that is not UTF-8 (a file name, a forged field) is U+FFFD, not a lost row
}

CsvTable read_csv(const std::filesystem::path& p) {
  std::istringstream in(read_regular_file(p));  // a FIFO named points-x.csv blocked `hla merge`
  CsvTable t;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (first) {
      t.header = parse_csv_line(line);
      first = false;
      continue;
    }
    t.rows.push_back(parse_csv_line(line));
  }
  return t;
}

CsvTable read_points(const std::filesystem::path& p, bool* upgraded) {
  CsvTable t = read_csv(p);
  if (upgraded) *upgraded = false;
  const auto& cols = columns();
  if (t.header == cols) return t;
  std::map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < t.header.size(); ++i) at[t.header[i]] = i;
  bool subset = at.size() == t.header.size() && at.count("key") && at.count("index");
  for (const auto& h : t.header) subset = subset && std::find(cols.begin(), cols.end(), h) != cols.end();
  if (!subset)
    throw InputError(p.string() + ": its columns differ from this version's (written by another version of hla?)");
  // Columns added since: empty, except that rows from before backward passes (gates) were forward (gate-free).
  static const std::map<std::string, std::string> added_default{{"backward", "none"}, {"gates", "none"}};
  CsvTable out;
  out.header = cols;
  for (const auto& row : t.rows) {
    if (row.size() != t.header.size()) continue;  // a torn or malformed row: dropped, as the callers do
    std::vector<std::string> r;
    for (const auto& c : cols) {
      auto it = at.find(c);
      auto def = added_default.find(c);
      r.push_back(it != at.end() ? row[it->second] : def != added_default.end() ? def->second : "");
    }
    out.rows.push_back(std::move(r));
  }
  if (upgraded) *upgraded = true;
  return out;
}

namespace {
// A row's point index: decimal digits within [0, 2^63 - 1], else an InputError naming the file ('abc', '' and 1e20
// ended `hla merge` as an internal error).
long long point_index(const std::string& text, const std::filesystem::path& file) {
  long long v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
    throw InputError(file.string() + ": a row's index '" + (text.size() <= 24 ? text : text.substr(0, 24) + "...") +
                     "' is not a point index (an integer >= 0)");
  return v;
}
}  // namespace

std::size_t merge_outputs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out,
                          std::ostream* report) {
  namespace fs = std::filesystem;
  {
    // The CSV and its JSON lines are two files: an --out that is itself the JSON lines' name (o.jsonl) would be
    // written twice, the CSV lost under the JSON lines.
    fs::path jsonl = out;
    jsonl.replace_extension(".jsonl");
    if (jsonl == out)
      throw InputError("--out '" + out.string() +
                       "': the merged CSV's JSON lines go beside it as <name>.jsonl; give the CSV's name (e.g. "
                       "points.csv)");
  }
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::directory_iterator(in)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("points", 0) == 0 && entry.path().extension() == ".csv") found.push_back(entry.path());
      }
      std::sort(found.begin(), found.end());
      if (found.empty()) throw InputError(in.string() + ": no points*.csv in this directory");
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in)) {
      files.push_back(in);
    } else {
      throw InputError(in.string() + ": no such file or directory");
    }
  }
  const std::string expected = csv_line(columns());        // earlier versions' files are read into these columns
  std::map<long long, std::vector<std::string>> by_index;  // rows ordered by point index
  std::map<std::string, long long> index_of_key;
  std::size_t duplicates = 0, conflicts = 0;
  const std::size_t key_col = 1, index_col = 0;
  for (const auto& f : files) {
    CsvTable t = read_points(f);
    for (auto& row : t.rows) {
      if (row.size() != t.header.size()) {
        if (report) *report << "merge: " << f.string() << ": skipping a malformed row\n";
        continue;
      }
      const std::string& key = row[key_col];
      const long long idx = point_index(row[index_col], f);
      auto it = index_of_key.find(key);
      if (it != index_of_key.end()) {
        ++duplicates;
        if (by_index[it->second] != row) ++conflicts;
        continue;
      }
      if (by_index.count(idx)) {
        // The same index with another key: the shards came from different configs.
        throw InputError(f.string() + ": point index " + row[index_col] + " has key '" + key + "' here but '" +
                         by_index[idx][key_col] + "' in an earlier file (outputs of different configs?)");
      }
      index_of_key.emplace(key, idx);
      by_index.emplace(idx, std::move(row));
    }
  }
  // Write both files next to each other, atomically (a merge that dies leaves the old outputs).
  fs::path jsonl = out;
  jsonl.replace_extension(".jsonl");
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  check_writable(out, "--out");
  check_writable(jsonl, "--out's JSON lines");
  std::string csv_text = expected, jsonl_text;
  for (const auto& [idx, row] : by_index) {
    csv_text += csv_line(row);
    jsonl_text += json_line(row);
  }
  write_file_atomically(out, csv_text, "merged CSV");
  write_file_atomically(jsonl, jsonl_text, "merged JSON lines");
  if (report)
    *report << "merge: " << files.size() << " file(s) → " << out.string() << ": " << by_index.size() << " points ("
            << duplicates << " duplicate rows dropped, " << conflicts
            << " of them with different measurements: kept the first)\n";
  return by_index.size();
}

}  // namespace hla::sweep
