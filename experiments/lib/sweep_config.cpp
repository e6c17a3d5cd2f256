// Sweep configs: TOML → Config (every problem is an InputError naming the file and the key), the
// cartesian product of the axes, and sharding.
#include <fmt/core.h>

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/dispatch.hpp"
#include "core/gates.hpp"
#include "core/limits.hpp"
#include "core/memory.hpp"
#include "core/names.hpp"
#include "core/operators.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"
#include "experiments/lib/sweep.hpp"
#include "fast/backward/passes.hpp"
#include "io/files.hpp"

namespace hla::sweep {
namespace {

struct Reader {
  const std::string& source;
  std::string prefix = "axes";
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw InputError(source + ": " + key + ": " + problem);
  }

  // A scalar or a list of scalars, each converted by `conv(node, key_for_messages)`.
  template <class V, class Conv>
  std::vector<V> axis(const toml::table& t, const std::string& key, std::vector<V> fallback, Conv conv) const {
    const toml::node* node = t.get(key);
    const std::string full = prefix + "." + key;
    if (!node) return fallback;
    std::vector<V> out;
    if (const toml::array* arr = node->as_array()) {
      if (arr->empty()) fail(full, "empty list (give at least one value)");
      for (std::size_t i = 0; i < arr->size(); ++i)
        out.push_back(conv(*arr->get(i), full + "[" + std::to_string(i) + "]"));
    } else {
      out.push_back(conv(*node, full));
    }
    return out;
  }

  std::string str(const toml::node& n, const std::string& key) const {
    if (auto s = n.value<std::string>()) return *s;
    fail(key, "expected a string");
  }
  long integer(const toml::node& n, const std::string& key, long min, long max = LONG_MAX) const {
    if (!n.is_integer()) fail(key, "expected an integer");
    const long v = static_cast<long>(*n.value<std::int64_t>());
    if (v < min) fail(key, "must be >= " + std::to_string(min) + ", got " + std::to_string(v));
    if (v > max) fail(key, "must be <= " + std::to_string(max) + ", got " + std::to_string(v));
    return v;
  }
  bool boolean(const toml::node& n, const std::string& key) const {
    if (auto b = n.value<bool>()) return *b;
    fail(key, "expected true or false");
  }
  // Numbers exactly: integers as they are, TOML floats through their shortest round-trip decimal (so
  // 0.99 means 99/100, not the double nearest to it), strings such as "3/4" or "1e-6" parsed exactly.
  rational number(const toml::node& n, const std::string& key) const {
    std::string text;
    if (n.is_integer())
      text = std::to_string(*n.value<std::int64_t>());
    else if (n.is_floating_point()) {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, *n.value<double>());
      text.assign(buf, res.ptr);
    } else if (auto s = n.value<std::string>())
      text = *s;
    else
      fail(key, "expected a number (e.g. 0.99, 1e-6 or \"3/4\")");
    return parse_rational(text, source + ": " + key);
  }
};

// toml++ parses nested tables, arrays and dotted keys recursively: a 70 KB config of 35,000 levels overflows
// the stack. So the text's size and nesting are checked before it is parsed, by a scan that knows TOML's
// strings and comments: at most 1 MiB, 64 levels of [ and {, 64 dots in one key or table header.
constexpr std::size_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxNesting = 64;

void check_nesting(const std::string& text, const std::string& source) {
  if (text.size() > kMaxConfigBytes)
    throw InputError(source + ": " + std::to_string(text.size()) + " bytes; a sweep config may have at most " +
                     std::to_string(kMaxConfigBytes));
  enum class In { code, comment, basic, literal, multiline_basic, multiline_literal } in = In::code;
  int depth = 0, dots = 0, line = 1;
  auto too_deep = [&](const std::string& what) {
    throw InputError(source + ":" + std::to_string(line) + ": " + what + " nested more than " +
                     std::to_string(kMaxNesting) + " levels deep");
  };
  auto at = [&](std::size_t i, const char* s) { return text.compare(i, std::strlen(s), s) == 0; };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    switch (in) {
      case In::code:
        if (c == '#')
          in = In::comment;
        else if (at(i, "\"\"\""))
          in = In::multiline_basic, i += 2;
        else if (at(i, "'''"))
          in = In::multiline_literal, i += 2;
        else if (c == '"')
          in = In::basic;
        else if (c == '\'')
          in = In::literal;
        else if (c == '[' || c == '{') {
          dots = 0;
          if (++depth > kMaxNesting) too_deep("tables or arrays");
        } else if (c == ']' || c == '}') {
          dots = 0;
          depth = std::max(depth - 1, 0);
        } else if (c == '.') {
          if (++dots > kMaxNesting) too_deep("a dotted key or table header");
        } else if (c == '=' || c == ',' || c == '\n') {
          dots = 0;
        }
        break;
      case In::comment:
        if (c == '\n') in = In::code, dots = 0;
        break;
      case In::basic:
        if (c == '\\')
          ++i;
        else if (c == '"' || c == '\n')
          in = In::code;
        break;
      case In::literal:
        if (c == '\'' || c == '\n') in = In::code;
        break;
      case In::multiline_basic:
        if (c == '\\')
          ++i;
        else if (at(i, "\"\"\""))
          in = In::code, i += 2;
        break;
      case In::multiline_literal:
        if (at(i, "'''")) in = In::code, i += 2;
        break;
    }
  }
}

const std::set<std::string>& axis_keys() {
  static const std::set<std::string> k{"operator", "form",    "variant", "scalar",  "n",       "d",
                                       "dv",       "gamma",   "gates",   "eps",     "ridge",   "normalized",
                                       "chunk",    "threads", "seeds",   "repeats", "backward"};
  return k;
}

Axes parse_axes(const Reader& r, const toml::table& axes) {
  Axes a;
  for (const auto& [k, v] : axes) {
    if (k.str() == "lambda")  // its name before λ was called ridge everywhere (CLI, configs, CSV, JSON)
      r.fail(r.prefix + ".lambda", "λ is now called 'ridge' (write ridge = [...])");
    if (!axis_keys().count(std::string(k.str())))
      r.fail(r.prefix + "." + std::string(k.str()),
             "unknown axis (allowed: operator form variant scalar n d dv gamma gates eps ridge "
             "normalized chunk threads seeds repeats backward)");
  }
  auto strs = [&](const char* key, std::vector<std::string> def) {
    return r.axis<std::string>(axes, key, def, [&](const toml::node& n, const std::string& k) { return r.str(n, k); });
  };
  auto ints = [&](const char* key, std::vector<long> def, long min, long max = LONG_MAX) {
    return r.axis<long>(axes, key, def,
                        [&](const toml::node& n, const std::string& k) { return r.integer(n, k, min, max); });
  };
  auto nums = [&](const char* key, std::vector<rational> def) {
    return r.axis<rational>(axes, key, def, [&](const toml::node& n, const std::string& k) { return r.number(n, k); });
  };
  if (!axes.get("operator")) r.fail(r.prefix + ".operator", "missing (e.g. operator = \"hla2\")");
  if (!axes.get("form")) r.fail(r.prefix + ".form", "missing (e.g. form = [\"serial\"])");
  if (!axes.get("n")) r.fail(r.prefix + ".n", "missing (e.g. n = [64, 128])");
  a.operators = strs("operator", {});
  a.forms = strs("form", {});
  a.variants = strs("variant", {"default"});
  a.scalars = strs("scalar", {"double"});
  a.n = ints("n", {}, 1);
  // Widths past 4096 hold states of d² numbers per copy that no sweep here needs (and d = 2^32 was a bad_alloc).
  a.d = ints("d", {8}, 1, kMaxWidth);
  a.dv = ints("dv", {8}, 1, kMaxWidth);
  a.gamma = nums("gamma", {rational(1)});
  a.gates = strs("gates", {"none"});
  for (const auto& g : a.gates) {
    try {
      (void)parse_gate_spec(g);
    } catch (const InputError& e) { r.fail(r.prefix + ".gates", e.what()); }
  }
  a.eps = nums("eps", {rational(0)});
  a.ridge = nums("ridge", {rational(0)});
  a.normalized = r.axis<bool>(axes, "normalized", {false},
                              [&](const toml::node& n, const std::string& k) { return r.boolean(n, k); });
  // Held as int: a larger value is refused here, never wrapped around to 0 or a negative number.
  for (long v : ints("chunk", {16}, 1, INT_MAX)) a.chunk.push_back(static_cast<int>(v));
  for (long v : ints("threads", {1}, 1, INT_MAX)) a.threads.push_back(static_cast<int>(v));
  for (long v : ints("repeats", {3}, 1, INT_MAX)) a.repeats.push_back(static_cast<int>(v));
  for (long v : ints("seeds", {1}, 0)) a.seeds.push_back(static_cast<std::uint64_t>(v));
  a.backward = strs("backward", {"none"});
  for (const auto& b : a.backward)
    if (b != "none" && !try_parse<backward::Pass>(b))
      r.fail(r.prefix + ".backward", "'" + b + "' is not a backward pass (use none, serial, checkpointed, scan)");

  for (std::size_t i = 0; i < a.gamma.size(); ++i)
    if (a.gamma[i] <= 0 || a.gamma[i] > 1)
      r.fail(r.prefix + ".gamma", "decay must lie in (0, 1], got " + format_rational(a.gamma[i]));
  for (const auto& e : a.eps)
    if (e < 0) r.fail(r.prefix + ".eps", "must be >= 0, got " + format_rational(e));
  for (const auto& l : a.ridge)
    if (l < 0) r.fail(r.prefix + ".ridge", "must be >= 0, got " + format_rational(l));
  for (const auto& s : a.scalars)
    if (s != "float" && s != "double" && s != "mpfr256")
      r.fail(r.prefix + ".scalar",
             "'" + s + "' is not swept (use float, double, mpfr256; exact scalars are the ledger's job)");
  for (long n : a.n)
    if (n > (1L << 26)) r.fail(r.prefix + ".n", "n = " + std::to_string(n) + " is larger than 2^26");

  return a;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source) {
  Reader r{source};
  check_nesting(text, source);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column
        << ": TOML syntax: " << e.description();
    throw InputError(msg.str());
  }
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "name" && key != "description" && key != "axes" && key != "reference")
      r.fail(key, "unknown key (allowed: name, description, [axes], [reference])");
  }
  Config c;
  c.source = source;
  std::string stem = std::filesystem::path(source).stem().string();
  c.name = root.get("name") ? r.str(*root.get("name"), "name") : stem;
  // The name becomes a folder name: no control character (a NUL would cut the path short).
  const auto control = std::find_if(c.name.begin(), c.name.end(),
                                    [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
  if (control != c.name.end())
    r.fail("name", fmt::format("control character 0x{:02x} at byte {} (the name becomes a folder name)",
                               static_cast<unsigned char>(*control), control - c.name.begin()));
  if (c.name.empty() || c.name.find_first_of("/\\ \t") != std::string::npos || c.name == "." || c.name == "..")
    r.fail("name", "must be a non-empty word without slashes or spaces, got '" + c.name + "'");
  if (root.get("description")) c.description = r.str(*root.get("description"), "description");

  const toml::node* axes_node = root.get("axes");
  if (!axes_node) r.fail("axes", "missing table [axes] (or [[axes]] blocks)");
  std::vector<std::pair<const toml::table*, std::string>> tables;
  if (const toml::table* t = axes_node->as_table())
    tables.emplace_back(t, "axes");
  else if (const toml::array* a = axes_node->as_array()) {
    if (a->empty()) r.fail("axes", "no [[axes]] blocks");
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::table* t = a->get(i)->as_table();
      if (!t) r.fail("axes[" + std::to_string(i) + "]", "must be a table");
      tables.emplace_back(t, "axes[" + std::to_string(i) + "]");
    }
  } else {
    r.fail("axes", "must be a table [axes] or blocks [[axes]]");
  }
  for (const auto& [axes, prefix] : tables) {
    r.prefix = prefix;
    c.blocks.push_back(parse_axes(r, *axes));
  }

  if (const toml::node* ref = root.get("reference")) {
    const toml::table* t = ref->as_table();
    if (!t) r.fail("reference", "must be a table [reference]");
    for (const auto& [k, v] : *t) {
      const std::string key(k.str()), full = "reference." + key;
      if (key == "direct_max_n")
        c.limits.direct_max_n = r.integer(v, full, 0);
      else if (key == "proxy_max_n")
        c.limits.proxy_max_n = r.integer(v, full, 0);
      else if (key == "form_reference_max_n")
        c.limits.form_reference_max_n = r.integer(v, full, 0);
      else if (key == "gradient_max_n")
        c.limits.gradient_max_n = r.integer(v, full, 0);
      else
        r.fail(full, "unknown key (allowed: direct_max_n, proxy_max_n, form_reference_max_n, gradient_max_n)");
    }
  }
  return c;
}

Config load_config(const std::filesystem::path& path) {
  // A regular file only (a FIFO blocked here), read whole up to one byte past the size parse_config accepts.
  return parse_config(read_regular_file(path, kMaxConfigBytes + 1), path.string());
}

Options Point::options() const {
  Options o;
  o.gamma = gamma;
  o.eps = eps;
  o.ridge = ridge;
  o.normalized = normalized;
  o.chunk = chunk;
  o.threads = threads;
  return o;
}

std::string Point::key() const {
  std::ostringstream k;
  k << op << "|" << form << "|" << variant << "|" << scalar << "|n=" << n << "|d=" << d << "|dv=" << dv
    << "|g=" << format_rational(gamma) << "|eps=" << format_rational(eps)
    << "|lam=" << format_rational(ridge)  // "lam": the key of runs before λ was named ridge everywhere
    << "|norm=" << (normalized ? 1 : 0) << "|w=" << chunk << "|thr=" << threads << "|seed=" << seed
    << "|rep=" << repeats;
  if (is_backward()) k << "|bw=" << backward;  // forward keys are those of versions before backward passes
  if (is_gated()) k << "|gates=" << gates;     // and gate-free keys those of versions before gates
  return k.str();
}

// The registry entry a point runs, or nullptr. "default" is the paper's formula or the definition.
static const Entry<double>* lookup(const std::string& op, const std::string& form, const std::string& variant) {
  return registry<double>().try_find(op, form, variant == "default" ? "" : variant);
}

// Whether the entry also exists for the point's scalar (fast paths may be float/double only).
static bool registered_for(const std::string& scalar, const std::string& op, const std::string& form,
                           const std::string& variant) {
  return with_scalar(scalar, [&]<class T>() {
    return registry<T>().try_find(op, form, variant == "default" ? "" : variant) != nullptr;
  });
}

namespace {

// A few lines of config can ask for 10^12 points, and each point enumerated holds about 1 KB: the axes'
// product is counted before anything is expanded.
constexpr std::uint64_t kMaxCombinations = 1'000'000;

void check_combinations(const Config& c) {
  std::uint64_t total = 0;
  for (const Axes& a : c.blocks) {
    std::uint64_t k = 1;
    for (std::size_t size :
         {a.operators.size(), a.forms.size(), a.variants.size(), a.scalars.size(), a.n.size(), a.d.size(), a.dv.size(),
          a.gamma.size(), a.gates.size(), a.eps.size(), a.ridge.size(), a.normalized.size(), a.chunk.size(),
          a.threads.size(), a.seeds.size(), a.repeats.size(), a.backward.size()})
      k = saturating_mul(k, size);
    total = saturating_add(total, k);
  }
  if (total > kMaxCombinations)
    throw InputError(
        fmt::format("{}: the axes multiply out to {} combinations, more than the {} a sweep may have "
                    "(split it into several configs)",
                    c.source, total == UINT64_MAX ? "more than 2^64" : std::to_string(total), kMaxCombinations));
}

// Calls f(i) for every index vector i of the product of `sizes` (i[k] < sizes[k]), the last index varying
// fastest, as nested loops would; nothing when a size is 0.
template <class F> void for_each_combination(const std::vector<std::size_t>& sizes, F&& f) {
  for (std::size_t s : sizes)
    if (s == 0) return;
  std::vector<std::size_t> i(sizes.size(), 0);
  while (true) {
    f(static_cast<const std::vector<std::size_t>&>(i));
    std::size_t k = sizes.size();
    while (k > 0 && ++i[k - 1] == sizes[k - 1]) i[--k] = 0;
    if (k == 0) return;
  }
}

}  // namespace

Enumeration enumerate(const Config& c) {
  check_combinations(c);
  const auto& reg = registry<double>();
  std::string known_forms;
  std::set<std::string> forms_seen;
  for (const auto& e : reg.entries())
    if (forms_seen.insert(e.form).second) known_forms += " " + e.form;
  Enumeration out;
  auto skip = [&](const std::string& why) { ++out.skipped[why]; };
  for (std::size_t b = 0; b < c.blocks.size(); ++b) {
    const Axes& a = c.blocks[b];
    const std::string prefix = c.blocks.size() == 1 ? "axes" : "axes[" + std::to_string(b) + "]";
    auto fail = [&](const std::string& key, const std::string& problem) {
      throw InputError(c.source + ": " + prefix + "." + key + ": " + problem);
    };
    for (const auto& op : a.operators)
      if (!find_operator(op))
        fail("operator",
             "unknown operator '" + op + "' (" + operator_names([](const OperatorInfo&) { return true; }) + ")");
    for (const auto& f : a.forms) {
      bool any = false;
      for (const auto& op : a.operators)
        for (const auto& e : reg.entries()) any = any || (e.op == op && e.form == f);
      if (!any)
        fail("form", "no registered form '" + f + "' for the configured operators (registered:" + known_forms + ")");
    }
    for (const auto& v : a.variants) {
      bool any = false;
      for (const auto& op : a.operators)
        for (const auto& f : a.forms) any = any || lookup(op, f, v) != nullptr;
      if (!any)
        fail("variant", "no configured operator/form has variant '" + v + "' (use default, paper, corrected, spec)");
    }
    for (const auto& b : a.backward) {
      const auto pass = try_parse<backward::Pass>(b);
      if (!pass) continue;  // none
      if (std::find(a.forms.begin(), a.forms.end(), "serial") == a.forms.end())
        fail("backward", "backward passes differentiate the serial form: add \"serial\" to form");
      bool any = false;
      for (const auto& op : a.operators) any = any || backward::has_pass(op, *pass);
      if (!any)
        fail("backward", "no configured operator has a " + b + " backward (serial, checkpointed: " +
                             operator_names([](const OperatorInfo& o) { return o.backward; }) +
                             "; scan: " + operator_names([](const OperatorInfo& o) { return o.scan_backward; }) + ")");
    }
    // The product of the axes, the last axis varying fastest (the order points have always had, so that
    // indices, shards and resumed files stay as they were).
    const std::vector<std::size_t> sizes{a.operators.size(), a.forms.size(),   a.variants.size(), a.scalars.size(),
                                         a.n.size(),         a.d.size(),       a.dv.size(),       a.gamma.size(),
                                         a.gates.size(),     a.eps.size(),     a.ridge.size(),    a.normalized.size(),
                                         a.chunk.size(),     a.threads.size(), a.seeds.size(),    a.repeats.size(),
                                         a.backward.size()};
    for_each_combination(sizes, [&](const std::vector<std::size_t>& i) {
      const std::string &op = a.operators[i[0]], &form = a.forms[i[1]], &variant = a.variants[i[2]],
                        &scalar = a.scalars[i[3]];
      const long n = a.n[i[4]], d = a.d[i[5]], dv = a.dv[i[6]];
      const rational &gamma = a.gamma[i[7]], &eps = a.eps[i[9]], &ridge = a.ridge[i[10]];
      const std::string& gates = a.gates[i[8]];
      const bool normalized = a.normalized[i[11]];
      const int chunk = a.chunk[i[12]], threads = a.threads[i[13]], repeats = a.repeats[i[15]];
      const std::uint64_t seed = a.seeds[i[14]];
      const std::string& bw = a.backward[i[16]];
      ++out.combinations;
      const Entry<double>* e = lookup(op, form, variant);
      if (!e) {
        skip("no such operator/form/variant");
        return;
      }
      const auto pass = try_parse<backward::Pass>(bw);
      if (pass) {
        if (form != "serial") {
          skip("backward passes run through the serial form only");
          return;
        }
        if (!backward::has_pass(op, *pass)) {
          skip("no such backward for this operator");
          return;
        }
        if (scalar == "mpfr256") {
          skip("backward passes are swept in float and double");
          return;
        }
        // A pass that differentiates only the corrected decay rule, of a serial form computing the paper's rule.
        if (backward::backward_registry<double>().find(op, *pass).caps.corrected_decay &&
            e->target == Target::paper_formula && gamma != 1) {
          skip("scan backward needs the corrected rule when gamma < 1");
          return;
        }
        if (*pass == backward::Pass::serial && chunk != a.chunk.front()) {
          skip("chunk unused by the serial backward");
          return;
        }
        if (threads != a.threads.front()) {
          skip("threads unused by backward passes");
          return;
        }
      }
      if (!registered_for(scalar, op, form, variant)) {
        skip("form not registered for this scalar");
        return;
      }
      if (gamma != 1 && !e->caps.decay) {
        skip("form has no decay");
        return;
      }
      if (gates != "none") {
        if (!e->caps.gates) {
          skip("form takes no gates");
          return;
        }
        if (gamma != 1) {
          skip("gates with a fixed decay (the decay is the gates')");
          return;
        }
        if (pass) {
          skip("backward passes take no gates yet");
          return;
        }
      }
      if (normalized && !e->caps.normalized) {
        skip("form has no normalized output");
        return;
      }
      if (ridge != 0 && !e->caps.ridge) {
        skip("form has no ridge");
        return;
      }
      if (!normalized && eps != a.eps.front()) {
        skip("eps unused (not normalized)");
        return;
      }
      if (!pass && !e->caps.chunk && chunk != a.chunk.front()) {
        skip("chunk unused by form");
        return;
      }
      if (!pass && !e->caps.threads && threads != a.threads.front()) {
        skip("threads unused by form");
        return;
      }
      if (form == "reference" && n > c.limits.form_reference_max_n) {
        skip("reference form above form_reference_max_n");
        return;
      }
      Point p;
      p.op = op;
      p.form = form;
      p.variant = e->variant;
      p.scalar = scalar;
      p.n = n;
      p.d = d;
      p.dv = dv;
      p.gamma = gamma;
      p.eps = normalized ? eps : rational(0);
      p.ridge = ridge;
      p.gates = gates;
      p.normalized = normalized;
      p.chunk = (pass ? *pass != backward::Pass::serial : e->caps.chunk) ? chunk : a.chunk.front();
      p.threads = !pass && e->caps.threads ? threads : a.threads.front();
      p.backward = bw;
      p.seed = seed;
      p.repeats = repeats;
      out.points.push_back(std::move(p));
    });
  }
  // Two config variants can name the same entry ("default" and "paper"), blocks can overlap: keep the first.
  std::set<std::string> keys;
  std::vector<Point> unique;
  for (auto& p : out.points) {
    if (!keys.insert(p.key()).second) {
      skip("duplicate of an earlier point");
      continue;
    }
    p.index = unique.size();
    unique.push_back(std::move(p));
  }
  out.points = std::move(unique);
  return out;
}

Shard parse_shard(const std::string& text) {
  Shard s;
  const auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    std::size_t used = 0;
    s.index = std::stoi(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("junk");
    s.count = std::stoi(text.substr(slash + 1), &used);
    if (used != text.size() - slash - 1) throw std::invalid_argument("junk");
  } catch (const std::exception&) { throw InputError("--shard: expected i/N (e.g. 2/4), got '" + text + "'"); }
  if (s.count < 1 || s.index < 1 || s.index > s.count)
    throw InputError("--shard: need 1 <= i <= N, got '" + text + "'");
  return s;
}

std::vector<Point> shard_points(const std::vector<Point>& points, Shard s) {
  std::vector<Point> out;
  for (const auto& p : points)
    if (static_cast<int>(p.index % static_cast<std::size_t>(s.count)) == s.index - 1) out.push_back(p);
  return out;
}

std::string shard_file_stem(Shard s) {
  if (s.count == 1) return "points";
  return "points-shard-" + std::to_string(s.index) + "-of-" + std::to_string(s.count);
}

}  // namespace hla::sweep
