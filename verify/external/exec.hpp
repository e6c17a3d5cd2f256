// The black-box protocol (`hla verify --exec CMD`): any language, through files.
//
// Per round the harness makes a fresh directory DIR holding one subdirectory per case:
//   DIR/<case>/q.npy, k.npy (n×d), v.npy (n×dv)   C order, the requested dtype
//   DIR/<case>/case.json                          op, n, d, dv, gamma, normalized, eps, ridge (as the dtype's
//                                                 values; "exact" holds the rationals), dtype, kind, state,
//                                                 state_parts (name → shape), state_in (names present)
//   DIR/<case>/state_in/<part>.npy                some cases, with --state
// and runs `CMD DIR` (DIR appended as the last argument, through /bin/sh) once. The command writes
//   DIR/<case>/o.npy                              n×dv, same dtype, for every case
//   DIR/<case>/state_out/<part>.npy               when case.json says "state": true
// DIR holds nothing but case directories; the command's stdout and stderr go elsewhere.
#pragma once

#include <filesystem>
#include <string>

#include "verify/external/implementation.hpp"

namespace hla::verify::ext {

// A command's run: how it ended and the tail of what it printed on stderr.
struct ProcessResult {
  bool timed_out = false;
  int exit_code = 0;     // when it exited
  int signal = 0;        // when a signal ended it
  double seconds = 0;
  std::string stderr_tail;
  std::string describe() const;  // "" for exit 0
};

// Runs `command 'dir'` through /bin/sh in its own process group; after `timeout` seconds the whole group
// is killed. stdin is /dev/null; stdout and stderr go to files in log_dir.
ProcessResult run_command(const std::string& command, const std::filesystem::path& dir, double timeout,
                          const std::filesystem::path& log_dir);

// Writes one case's files into dir/<case.name>/ (the protocol above).
void write_case(const std::filesystem::path& dir, const Case& c, const Request& req);
// Reads what the command wrote for the case: an Outcome with an error for every way it can be wrong.
Outcome read_outcome(const std::filesystem::path& dir, const Case& c, const Request& req);

class ExecImplementation : public Implementation {
 public:
  // keep_dir: leave the rounds' directories in place (their paths are printed) for debugging.
  ExecImplementation(std::string command, double timeout_seconds, bool keep_dirs = false)
      : command_(std::move(command)), timeout_(timeout_seconds), keep_(keep_dirs) {}
  std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog& log) override;

 private:
  std::string command_;
  double timeout_;
  bool keep_;
};

}  // namespace hla::verify::ext
