#include "core/build_info.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

namespace hla::build_info {
namespace {
std::string run(const char* cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}
}  // namespace

// Only this translation unit sees the configure-time defines (CMakeLists.txt), so a re-configure at a new
// commit recompiles one file, not the library.
std::string configured_commit() { return HLA_GIT_COMMIT; }
std::string cxx_flags() { return HLA_CXX_FLAGS; }
std::string build_type() { return HLA_BUILD_TYPE; }

std::string head_commit() {
  const std::string head = run("git rev-parse --short=12 HEAD 2>/dev/null");
  return head.empty() ? configured_commit() : head;
}

std::string source_tree() {
  const std::string dirty =
      run("git status --porcelain -- core fast reference verify cli experiments CMakeLists.txt 2>/dev/null");
  return dirty.empty() ? head_commit() : head_commit() + "-dirty";
}

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#else
  return "gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#endif
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double load_1min() {
  std::ifstream in("/proc/loadavg");
  double load = NAN;
  if (!(in >> load)) return NAN;
  return load;
}

}  // namespace hla::build_info
