#include "core/memory.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <limits>
#include <sstream>

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

}  // namespace hla
