// Provenance recorded in every result file (ledger, sweep CSV, benchmark JSON): one place for it, so the
// three agree. The build flags are fixed when CMake configures; the commit is asked of git when the
// program runs, because a build folder configured at one commit keeps building later ones.
#pragma once

#include <string>

namespace hla::build_info {

std::string configured_commit();  // HEAD when CMake configured this build folder ("unknown" outside git)
std::string head_commit();        // HEAD of the working directory's repository now (configured_commit() if none)
std::string source_tree();        // head_commit(), plus "-dirty" when code folders have uncommitted changes
std::string cxx_flags();          // CMAKE_CXX_FLAGS and the build type's flags
std::string build_type();         // Release, Debug, ...
std::string compiler();           // e.g. "gcc 12.2.0"
std::string cpu_model();          // /proc/cpuinfo's first "model name"
std::string utc_now();            // ISO 8601, seconds, Z
// The machine's load when a result was measured: /proc/loadavg's 1-minute average (runnable and uninterruptible
// tasks, this process's included), NaN where there is none. On a machine with fewer cores than that, timings share.
double load_1min();

}  // namespace hla::build_info
