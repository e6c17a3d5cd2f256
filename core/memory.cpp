#include "core/memory.hpp"

#include "core/limits.hpp"  // defined here, beside the memory estimate it builds on

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "core/types.hpp"

namespace hla {

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return saturating_mul(kib, 1024);
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? saturating_mul(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page))
                               : 0;
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 7> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  std::size_t u = 0;
  while (value >= 1024 && u + 1 < units.size()) value /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[u]);
}

void require_memory(std::uint64_t needed, const std::string& what) {
  const std::uint64_t available = available_memory_bytes();
  if (needed > available)
    throw InputError(fmt::format(
        "{} needs {}, {} available (MemAvailable)", what,
        needed == std::numeric_limits<std::uint64_t>::max() ? "more than 16 EiB" : "at least " + format_bytes(needed),
        format_bytes(available)));
}

// ---- the limits layer (core/limits.hpp): the environment OpenMP and OpenBLAS read, and shapes -------------
int max_threads() {
  // Oversubscription measures something; tens of thousands of threads only crash libgomp or the process.
  static const int limit = static_cast<int>(std::max(64u, 4 * std::thread::hardware_concurrency()));  // read once
  return limit;
}

namespace {

// Blanks around `text` dropped, as libgomp skips them (isspace) before and after a number.
std::string_view trimmed(std::string_view text) {
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

// A non-negative decimal as libgomp's strtoul reads it (a '+' first is accepted), saturating at UINT64_MAX; nothing
// when `text` is not one.
std::optional<std::uint64_t> unsigned_number(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : text) v = saturating_add(saturating_mul(v, 10), static_cast<std::uint64_t>(c - '0'));
  return v;
}

void check_thread_counts(const char* name, const std::string& text) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = trimmed(std::string_view(text).substr(start, comma - start));
    const std::optional<std::uint64_t> count = unsigned_number(item);
    if (!count || *count == 0)
      throw InputError(std::string(name) + "='" + text + "' is not a thread count (a number >= 1, or a list a,b,...)");
    if (*count > static_cast<std::uint64_t>(max_threads()))
      throw InputError(std::string(name) + "='" + text + "' asks for more than the " + std::to_string(max_threads()) +
                       " threads this machine can run (4 per hardware thread, at least 64)");
    start = comma + 1;
  }
}

// libgomp's stack size: a number, an optional unit B, K, M or G (K when none), blanks around either.
void check_stack_size(const char* name, const std::string& text) {
  std::string_view t = trimmed(text);
  std::uint64_t unit = 1024;
  if (!t.empty() && std::isalpha(static_cast<unsigned char>(t.back()))) {
    switch (std::toupper(static_cast<unsigned char>(t.back()))) {
      case 'B':
        unit = 1;
        break;
      case 'K':
        unit = 1ULL << 10;
        break;
      case 'M':
        unit = 1ULL << 20;
        break;
      case 'G':
        unit = 1ULL << 30;
        break;
      default:
        unit = 0;
    }
    t = trimmed(t.substr(0, t.size() - 1));
  }
  const std::optional<std::uint64_t> number = unit ? unsigned_number(t) : std::nullopt;
  if (!number)
    throw InputError(fmt::format("{}='{}' is not a stack size (a number with an optional B, K, M or G)", name, text));
  const std::uint64_t bytes = saturating_mul(*number, unit);
  require_memory(bytes, fmt::format("{}='{}' (the stack of each OpenMP thread)", name, text));
}

}  // namespace

void check_thread_environment() {
  // OpenBLAS (LIBXSMM's fallback) reads its own counts, as a single number or the same list; held to the same limit.
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"})
    if (const char* env = std::getenv(name); env && *env) check_thread_counts(name, env);
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"})
    if (const char* env = std::getenv(name); env && *env) check_stack_size(name, env);
}

std::uint64_t run_bytes(const Shape& shape, std::uint64_t value_bytes, std::uint64_t reference_value_bytes) {
  const auto n = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.n, 0)),
             d = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.d, 0)),
             dv = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.dv, 0));
  const std::uint64_t inputs = saturating_mul(n, saturating_add(saturating_mul(2, d), dv)),
                      outputs = saturating_mul(n, dv);
  // Every operator's state is made of d x d and d x dv parts (and vectors); a form holds a few copies of it at once
  // (the previous and the next, a chunk's): counted as 4, so that d = 100000 is refused, not a bad_alloc.
  const std::uint64_t state = saturating_mul(4, saturating_add(saturating_mul(d, d), saturating_mul(d, dv)));
  // The inputs are drawn in double, converted to the scalar, and the form returns n x dv outputs.
  std::uint64_t needed =
      saturating_add(saturating_mul(inputs, sizeof(double)),
                     saturating_mul(saturating_add(saturating_add(inputs, outputs), state), value_bytes));
  if (reference_value_bytes > 0)  // the reference converts the inputs again and returns its own outputs
    needed = saturating_add(needed, saturating_mul(saturating_add(inputs, outputs), reference_value_bytes));
  return needed;
}

std::uint64_t literal_reference_bytes(const Shape& shape, std::uint64_t value_bytes) {
  const auto n = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.n, 0)),
             d = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.d, 0)),
             dv = static_cast<std::uint64_t>(std::max<Eigen::Index>(shape.dv, 0));
  const std::uint64_t values = saturating_add(saturating_mul(2, saturating_mul(n, n)),
                                              saturating_mul(n, saturating_add(saturating_mul(2, d), 2 * dv)));
  return saturating_mul(values, value_bytes);
}

void require_shape(const Shape& shape, const std::string& what, std::uint64_t value_bytes,
                   std::uint64_t reference_value_bytes, std::int64_t max_width,
                   std::uint64_t literal_reference_value_bytes) {
  if (shape.n < 1 || shape.d < 1 || shape.dv < 1)
    throw InputError(
        fmt::format("{}: n, d and dv must be >= 1 (got n={} d={} dv={})", what, shape.n, shape.d, shape.dv));
  if (shape.d > max_width || shape.dv > max_width)
    throw InputError(
        fmt::format("{}: d and dv must lie in [1, {}] (got d={} dv={})", what, max_width, shape.d, shape.dv));
  const std::uint64_t literal =
      literal_reference_value_bytes > 0 ? literal_reference_bytes(shape, literal_reference_value_bytes) : 0;
  require_memory(saturating_add(run_bytes(shape, value_bytes, reference_value_bytes), literal),
                 fmt::format("{} at n={} d={} dv={}", what, shape.n, shape.d, shape.dv));
}

}  // namespace hla
