// The black-box protocol (`hla verify --exec CMD`): any language, through files.
//
// Per round the harness makes a fresh directory DIR holding one subdirectory per case:
//   DIR/<case>/q.npy, k.npy (n×d), v.npy (n×dv)   C order, the requested dtype
//   DIR/<case>/case.json                          op, n, d, dv, gamma, normalized, eps, ridge (as the dtype's
//                                                 values; "exact" holds the rationals), dtype, kind, state,
//                                                 state_parts (name → shape), state_in (names present)
//   DIR/<case>/state_in/<part>.npy                some cases, with --state
//   DIR/<case>/gamma.npy (n,)                     with --gates: the per-token gates γ_t (case.json "gates": true;
//                                                 its "gamma" is then 1, the decay being the gates')
// and hands DIR to the command: `CMD DIR` (DIR appended as the last argument, through /bin/sh), or, when the
// command answered the previous round on fd 3, the line DIR on its fd 4 (CommandSession below). The command writes
//   DIR/<case>/o.npy                              n×dv, same dtype, for every case
//   DIR/<case>/state_out/<part>.npy               when case.json says "state": true
// DIR holds nothing but case directories; the command's stdout and stderr go elsewhere.
#pragma once

#include <signal.h>

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/implementation.hpp"

namespace hla::verify::ext {

// A command's run: how it ended and the tail of what it printed on stderr.
struct ProcessResult {
  bool timed_out = false;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal ended it
  double seconds = 0;
  std::string stderr_tail;
  std::string protocol_error;    // a kept command's wrong answer on fd 3 (CommandSession)
  std::string describe() const;  // "" for exit 0: what went wrong, then "; stderr ends with:\n" and the tail
  std::string headline() const;  // what went wrong alone
  // A case's error when its round failed: the command's headline, then the case's own error if any (a failed
  // command's outputs are not trusted: every case of the round carries the failure). Unchanged when the round passed.
  std::string case_error(const std::string& own) const;
};

// SIGINT, SIGTERM or SIGHUP received while a command ran (or its round was being prepared): the command's
// process group has been sent the signal and then ended, and the exception unwinds the round, removing its
// temporary directories. `hla` exits with 128 + signal (130, 143, 129).
struct Interrupted : std::runtime_error {
  int signal;
  explicit Interrupted(int sig);
};

// While one exists, SIGINT, SIGTERM and SIGHUP are caught (not fatal) and remembered: run_command forwards
// them to the command's process group (which a terminal's Ctrl-C never reaches: it has its own) and
// throws Interrupted. The previous handlers are restored when it goes. Guards nest (a session's around each
// round's): an inner one keeps a signal the outer one caught.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // Throws Interrupted if a signal came since the guard was made.
  static void check();

 private:
  struct sigaction previous_[3];  // SIGINT, SIGTERM, SIGHUP as they were
};

// A command's process group dies with hla, however hla dies (SIGKILL, the OOM killer, a crash): a guardian, a process
// of its own forked from hla before the command and outside its group, reads a socket whose other ends are hla's and,
// until it execs, the command's. The command's first process sends its group before it execs; when the socket
// reaches its end without hla having sent "stand down" (hla is gone), the guardian kills the whole group. A
// parent-death signal alone reaches only the direct child, /bin/sh, which (Debian's dash) forks even a simple command
// line. One guardian per started process; it holds nothing of hla's but its end of the socket, and ignores the signals
// a terminal sends its foreground group.
class GroupGuardian {
 public:
  GroupGuardian() = default;
  ~GroupGuardian() { release(); }
  GroupGuardian(const GroupGuardian&) = delete;
  GroupGuardian& operator=(const GroupGuardian&) = delete;
  void start();                            // forks the guardian (before the command it guards)
  int command_end() const { return fd_; }  // where the command's first process sends its group (close-on-exec)
  void release();                          // the command has ended (hla killed and reaped it): the guardian exits
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

// Runs `command 'dir'` through /bin/sh in its own process group (one round, one process: --fresh-process); after
// `timeout` seconds the whole group is killed. stdin is /dev/null; stdout and stderr go to files in log_dir. Under an
// InterruptGuard a signal is forwarded to the group, which gets 2 s to exit before it is killed, then Interrupted is
// thrown.
ProcessResult run_command(const std::string& command, const std::filesystem::path& dir, double timeout,
                          const std::filesystem::path& log_dir);

// The command across a battery's rounds. Each round it is started as `CMD DIR` (through /bin/sh, in its own
// process group, stdin /dev/null) with HLA_VERIFY_REPLY_FD=3 and HLA_VERIFY_ROUND_FD=4 in its environment: fd 3 the
// write end of a pipe to hla, fd 4 the read end of a socket from hla. A command that writes the line DIR to fd 3 once
// that round's outputs are in place is kept running: each later round is sent to it as the line DIR on fd 4, and the
// end of fd 4 means there are no more (examples/protocol.py does this). A command that exits instead has served its
// one round, and the next round starts it again, so a script written for one round per process works unchanged.
// Which of the two a round was changes nothing in its verdict: the same files, the same time-out, the same failures
// (an exit, a signal, a time-out fail the round and end the process; the next round starts a fresh one). A line on
// fd 3 that is not the round's DIR fails the round at once (ProcessResult::protocol_error); a kept command that exits
// cleanly as a round is sent to it has the round re-sent to a fresh process. PyTorch's import, 1-1.5 s, is then paid
// once per battery instead of once per round. fresh: run_command for every round (no fds 3 and 4).
class CommandSession {
 public:
  CommandSession(std::string command, bool fresh);
  ~CommandSession();  // a kept command gets the end of its fd 4 and 2 s to exit, then its group is killed
  CommandSession(const CommandSession&) = delete;
  CommandSession& operator=(const CommandSession&) = delete;
  ProcessResult round(const std::filesystem::path& dir, double timeout);
  int starts() const { return starts_; }  // processes started so far

 private:
  void start(const std::filesystem::path& dir);
  void end_process(bool reaped);
  std::string command_;
  bool fresh_;
  TempDir logs_;
  GroupGuardian guardian_;  // the kept command's (run_command has its own per round)
  pid_t pid_ = -1;
  int rounds_ = -1, reply_ = -1;  // hla's ends of the command's fd 4 and fd 3
  std::string pending_;           // what fd 3 gave that is not yet a whole line
  int starts_ = 0;
};

// A round's time-out in seconds, checked: NaN, infinities, zero and anything above a week (604800 s, more
// than any round needs) are refused with an InputError (a NaN would never expire).
double checked_timeout(double seconds);

// The .npy dtype of a request's dtype.
npy::DType npy_dtype(DType t);

// Writes one case's files into dir/<case.name>/ (the protocol above).
void write_case(const std::filesystem::path& dir, const Case& c, const Request& req);
// Reads what the command wrote for the case: an Outcome with an error for every way it can be wrong
// (missing, a symlink loop, not a regular file, unreadable, malformed, another dtype or shape). A file
// is read header first and only when its header promises the case's shape.
Outcome read_outcome(const std::filesystem::path& dir, const Case& c, const Request& req);

// Runs `write` (the round's case files), a filesystem error in it (a full disk) as an InputError naming TMPDIR.
void write_cases(const std::filesystem::path& dir, const std::function<void()>& write);

// An NpyError's message without the file's path (a temporary directory, gone by the time anyone reads it).
std::string problem_in(const std::exception& e, const std::filesystem::path& file);

class ExecImplementation : public Implementation {
 public:
  // keep_dir: leave the rounds' directories in place (their paths are printed) for debugging. fresh_process: a new
  // process for every round (CommandSession).
  ExecImplementation(std::string command, double timeout_seconds, bool keep_dirs = false, bool fresh_process = false)
      : session_(std::move(command), fresh_process), timeout_(timeout_seconds), keep_(keep_dirs) {}
  std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog& log) override;

 private:
  // Signals are caught for the whole session, between rounds too (a SIGTERM while the harness computed killed it by
  // the default action, leaving its log directory and a kept command running): the next round, or the caller's
  // InterruptGuard::check() after the battery, throws Interrupted. Declared first, so it goes last: after the
  // session has ended its command.
  InterruptGuard session_guard_;
  CommandSession session_;
  double timeout_;
  bool keep_;
};

}  // namespace hla::verify::ext
