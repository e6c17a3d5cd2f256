// The black-box protocol: case files out, a command run with a time-out, outputs read back strictly.
#include "verify/exec.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "core/parse.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"

namespace hla::verify::ext {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// The last max_chars of what the log file holds after its first `from` bytes. The command may have replaced its log
// by a FIFO (whose open blocked forever) or a symlink: only a regular file, not through a link, is read (InputFile).
std::string tail_of(const fs::path& file, std::size_t max_chars, std::streamoff from = 0) {
  std::string s;
  try {
    InputFile in(file, /*follow=*/false);
    const auto size = static_cast<std::streamoff>(in.size());
    const std::streamoff start = std::max(
        from, size > static_cast<std::streamoff>(max_chars) ? size - static_cast<std::streamoff>(max_chars) : 0);
    if (start >= size) return "";
    in.seek(static_cast<std::size_t>(start));
    in.read(static_cast<std::size_t>(size - start), s);
  } catch (const InputError& e) { return std::string("(its log cannot be read: ") + e.what() + ")"; }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The signal InterruptGuard caught (0: none) and the process group it is forwarded to (0: none running).
volatile std::sig_atomic_t caught_signal = 0;
volatile std::sig_atomic_t running_group = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void forward_signal(int sig) {
  caught_signal = sig;
  if (running_group > 0) ::kill(-running_group, sig);
}

// hla's own children that are not a command's orphans: the live guardians (GroupGuardian), and whatever hla had
// started before the command (Open MPI's daemon in a singleton run, which end_orphans killed: MPI_Finalize then
// failed and left its session folder in TMPDIR).
std::vector<pid_t> live_guardians, children_before;

// hla's children now, read from /proc.
std::vector<pid_t> children_of_hla() {
  const std::string self = std::to_string(::getpid());
  std::vector<pid_t> children;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat_file(it->path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);
    const std::size_t close = stat.rfind(')');  // the name in parentheses may hold spaces and ')'
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 1));
    std::string state, parent;
    fields >> state >> parent;
    if (parent == self) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

bool listed(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

// Kills and reaps hla's children that are left once the command's group is gone: only processes the command
// started outside its group (a daemon) can be, re-parented here (PR_SET_CHILD_SUBREAPER); hla's own (above) are left
// alone. Repeated, since ending one re-parents its own children; a process never outlives its round.
void end_orphans() {
  for (int pass = 0; pass < 64; ++pass) {
    bool any = false;
    for (const pid_t child : children_of_hla()) {
      if (listed(live_guardians, child) || listed(children_before, child)) continue;
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      any = true;
    }
    if (!any) return;
  }
}

extern "C" char** environ;

// The guardian's life (GroupGuardian): only async-signal-safe calls, since hla may have threads. It reads pid_t
// records: a group > 0 to guard, 0 to stand down (exit, killing nothing). The end of the socket with a group still
// guarded means hla is gone: the group is killed.
[[noreturn]] void guard_group(int watch, pid_t parent) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
  // Nothing of hla's held open: not its stdout (a reader waiting for its end), not the command's channel.
  if (watch > 0) ::close_range(0, static_cast<unsigned>(watch) - 1, 0);
  ::close_range(static_cast<unsigned>(watch) + 1, ~0U, 0);
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2 && null >= 0; ++fd)
    if (fd != null && fd != watch) ::dup2(null, fd);
  pid_t group = 0;
  char record[sizeof(pid_t)];
  std::size_t have = 0;
  if (::getppid() != parent) ::_exit(0);  // hla died before the line above: the command's shell dies by its signal
  for (;;) {
    const ssize_t got = ::read(watch, record + have, sizeof record - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (group > 0) ::kill(-group, SIGKILL);
      ::_exit(0);
    }
    have += static_cast<std::size_t>(got);
    if (have < sizeof record) continue;
    have = 0;
    std::memcpy(&group, record, sizeof group);
    if (group <= 0) ::_exit(0);
  }
}

// Forks `sh -c line` as the leader of a new process group: stdin /dev/null, stdout and stderr into the two files, and,
// with a channel {reply, rounds} (hla's other ends), `reply` as the command's fd 3 and `rounds` as its fd 4, named
// by HLA_VERIFY_REPLY_FD=3 and HLA_VERIFY_ROUND_FD=4 in its environment; without one, fds 3 and 4 closed. hla's own
// descriptors are close-on-exec. Nothing is allocated in the child (hla may have threads): only async-signal-safe
// calls between fork and exec.
pid_t spawn(const std::string& line, const int* channel, const fs::path& out_file, const fs::path& err_file,
            GroupGuardian& guardian) {
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "HLA_VERIFY_REPLY_FD=", 20) != 0 && std::strncmp(*e, "HLA_VERIFY_ROUND_FD=", 20) != 0)
      env_strings.emplace_back(*e);
  if (channel) {
    env_strings.emplace_back("HLA_VERIFY_REPLY_FD=3");
    env_strings.emplace_back("HLA_VERIFY_ROUND_FD=4");
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  // The logs are made here, fresh (create_fresh_file): the previous process may have swapped them for a FIFO, whose
  // open would block, or a symlink, through which O_TRUNC overwrote its target.
  const int out = create_fresh_file(out_file), err = create_fresh_file(err_file);
  if (out < 0 || err < 0) {
    const int e = errno;
    for (int fd : {out, err})
      if (fd >= 0) ::close(fd);
    throw InputError("cannot create the command's log file in '" + out_file.parent_path().string() +
                     "': " + std::strerror(e));
  }
  children_before = children_of_hla();  // before the guardian and the command: none of them is the command's
  try {
    guardian.start();
  } catch (...) {
    ::close(out);
    ::close(err);
    throw;
  }
  const int guard = guardian.command_end();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(out);
    ::close(err);
    guardian.release();
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(e));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // /bin/sh itself dies with hla by this signal; what it forks, by the guardian, which learns the group here, before
    // anything of the command runs (its end closes at exec).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // hla died before the line above
    const pid_t self = ::getpid();
    if (::send(guard, &self, sizeof self, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof self)) ::_exit(127);
    // The channel's ends out of the way of 0-4 first (they may hold any of those numbers).
    const int reply = channel ? ::fcntl(channel[0], F_DUPFD_CLOEXEC, 10) : -1;
    const int rounds = channel ? ::fcntl(channel[1], F_DUPFD_CLOEXEC, 10) : -1;
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in >= 0) ::dup2(in, 0);  // dup2 leaves the copy open across exec, the original closes
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (channel) {
      ::dup2(reply, 3);
      ::dup2(rounds, 4);
    } else {
      ::close(3);  // no channel: nothing of hla's open where a command looks for one
      ::close(4);
    }
    ::execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with the child's own call
  ::close(out);
  ::close(err);
  return pid;
}

// Waits up to `seconds` for the process to exit: true when it has (status holds how), false when it still runs.
bool exits_within(pid_t pid, int& status, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

enum class Reply { none, answered, wrong };
enum class RoundEnd { exited, answered, wrong_answer, timed_out };

// Waits on a round of the process (and group) pid: until it exits (status), `reply` (which may wait up to the
// milliseconds it is given) has its answer, or `timeout` seconds from t0 pass (the group is then killed). A signal
// caught meanwhile (InterruptGuard) has been forwarded to the group: 2 s to clean up (free a GPU, flush), then the
// group is killed and Interrupted thrown.
RoundEnd wait_round(pid_t pid, int& status, double timeout, std::chrono::steady_clock::time_point t0,
                    const std::function<Reply(int)>& reply) {
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return RoundEnd::exited;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (caught_signal) {
      if (!exits_within(pid, status, 2)) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
      ::kill(-pid, SIGKILL);  // whatever it left running in its group
      running_group = 0;
      end_orphans();
      throw Interrupted(caught_signal);
    }
    if (elapsed > timeout) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return RoundEnd::timed_out;
    }
    const int ms = elapsed < 1 ? 2 : 20;
    const Reply got = reply ? reply(ms) : (std::this_thread::sleep_for(std::chrono::milliseconds(ms)), Reply::none);
    if (got != Reply::none) return got == Reply::answered ? RoundEnd::answered : RoundEnd::wrong_answer;
  }
}

void set_exit(ProcessResult& r, int status) {
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.signal = WTERMSIG(status);
}

// What a path is, without following a final symlink and without throwing (a symlink loop is a type too).
fs::file_type type_of(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  return ec ? fs::file_type::not_found : st.type();
}

// An array read back: its dtype must be the case's, its shape exactly what the protocol says.
Mat<double> read_matrix(const fs::path& file, const std::string& label, Eigen::Index rows, Eigen::Index cols,
                        bool vector_ok, const Request& req, std::string& error) {
  if (type_of(file) == fs::file_type::not_found) {
    error = "missing " + label + " (the command did not write it)";
    return {};
  }
  try {
    const npy::Array a = npy::read(file, static_cast<std::size_t>(rows * cols));
    if (a.dtype != npy_dtype(req.dtype)) {
      error = fmt::format("{} is {}, expected {}", label, a.dtype == npy::DType::f64 ? "float64" : "float32",
                          dtype_name(req.dtype));
      return {};
    }
    std::vector<std::size_t> want{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
    const bool as_vector = vector_ok && a.shape.size() == 1 && a.shape[0] == static_cast<std::size_t>(rows);
    if (a.shape != want && !as_vector) {
      std::string got = "(";
      for (std::size_t i = 0; i < a.shape.size(); ++i) got += (i ? ", " : "") + std::to_string(a.shape[i]);
      got += a.shape.size() == 1 ? ",)" : ")";
      const bool transposed = a.shape.size() == 2 && a.shape[0] == static_cast<std::size_t>(cols) &&
                              a.shape[1] == static_cast<std::size_t>(rows);
      error = fmt::format("{} has shape {}, expected ({}, {}){}{}", label, got, rows, cols,
                          vector_ok ? fmt::format(" or ({},)", rows) : "",
                          transposed ? transposed_hint(label.rfind("state_out/", 0) == 0) : "");
      return {};
    }
    Mat<double> m(rows, cols);
    for (Eigen::Index t = 0; t < rows; ++t)
      for (Eigen::Index j = 0; j < cols; ++j) m(t, j) = a.data[static_cast<std::size_t>(t * cols + j)];
    return m;
  } catch (const InputError& e) {
    error = std::string("malformed ") + label + ": " + problem_in(e, file);
    return {};
  }
}

}  // namespace

npy::DType npy_dtype(DType t) { return t == DType::float64 ? npy::DType::f64 : npy::DType::f32; }

double checked_timeout(double seconds) {
  if (!(seconds > 0) || !(seconds <= 7 * 24 * 3600.0))
    throw InputError(fmt::format("--timeout must lie in (0, 604800] seconds, got {}", seconds));
  return seconds;
}

void write_cases(const fs::path& dir, const std::function<void()>& write) {
  try {
    write();
  } catch (const fs::filesystem_error& e) {
    throw InputError("cannot write the cases in " + dir.parent_path().string() + " (TMPDIR): " + e.code().message());
  }
}

std::string problem_in(const std::exception& e, const fs::path& file) {
  std::string what = e.what();
  const std::string path = file.string() + ": ";
  if (what.rfind(path, 0) == 0) what.erase(0, path.size());
  return what;
}

Interrupted::Interrupted(int sig)
    : std::runtime_error(fmt::format("interrupted by signal {} ({})", sig, ::strsignal(sig))), signal(sig) {}

namespace {
int guards_alive = 0;  // InterruptGuards in scope (they nest); only the outermost forgets an earlier signal
}

InterruptGuard::InterruptGuard() {
  if (guards_alive++ == 0) caught_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &previous_[i]);
}

InterruptGuard::~InterruptGuard() {
  running_group = 0;
  for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &previous_[i], nullptr);
  // The outermost guard left by an exception (Interrupted): the signal went out as that exception, and a later check
  // outside any guard (run_command's) must not see it again.
  if (--guards_alive == 0 && std::uncaught_exceptions() > 0) caught_signal = 0;
  // A signal that came after the last check, with no Interrupted on its way: delivered now, as it would have been.
  if (caught_signal && std::uncaught_exceptions() == 0) ::raise(caught_signal);
}

void InterruptGuard::check() {
  if (caught_signal) throw Interrupted(caught_signal);
}

std::string ProcessResult::describe() const {
  std::string s = headline();
  if (!s.empty() && !stderr_tail.empty()) s += "; stderr ends with:\n" + stderr_tail;
  return s;
}

std::string ProcessResult::case_error(const std::string& own) const {
  const std::string failure = headline();
  if (failure.empty()) return own;
  return "the command " + failure + (own.empty() ? "" : "; " + own);
}

std::string ProcessResult::headline() const {
  std::string s;
  if (!protocol_error.empty())
    s = protocol_error;
  else if (timed_out)
    s = fmt::format("timed out after {:.0f} s (killed)", seconds);
  else if (signal)
    s = fmt::format("killed by signal {} ({})", signal, ::strsignal(signal));
  else if (exit_code != 0)
    s = fmt::format("exited with status {}", exit_code);
  return s;
}

void GroupGuardian::start() {
  release();
  int ends[2];  // [0] the guardian's, [1] hla's (and the command's until it execs)
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
    throw std::runtime_error(std::string("socketpair failed: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(ends[0]);
    ::close(ends[1]);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(e));
  }
  if (pid == 0) guard_group(ends[0], parent);
  ::close(ends[0]);
  pid_ = pid;
  fd_ = ends[1];
  live_guardians.push_back(pid);
}

void GroupGuardian::release() {
  if (fd_ >= 0) {
    const pid_t stand_down = 0;
    (void)::send(fd_, &stand_down, sizeof stand_down, MSG_NOSIGNAL);
    ::close(fd_);
    fd_ = -1;
  }
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
    live_guardians.erase(std::remove(live_guardians.begin(), live_guardians.end(), pid_), live_guardians.end());
    pid_ = -1;
  }
}

ProcessResult run_command(const std::string& command, const fs::path& dir, double timeout, const fs::path& log_dir) {
  const fs::path err_file = log_dir / "stderr";
  InterruptGuard::check();
  // Whatever the command starts outside its process group (setsid, a double fork) is re-parented to hla
  // rather than to init once its parent ends, so that end_orphans can end it.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const auto t0 = std::chrono::steady_clock::now();
  GroupGuardian guardian;
  const pid_t pid = spawn(command + " " + shell_quote(dir.string()), nullptr, log_dir / "stdout", err_file, guardian);
  running_group = pid;
  if (caught_signal) ::kill(-pid, caught_signal);  // came between the check above and now
  ProcessResult r;
  int status = 0;
  r.timed_out = wait_round(pid, status, timeout, t0, nullptr) == RoundEnd::timed_out;
  ::kill(-pid, SIGKILL);  // whatever the command left running in its group
  running_group = 0;
  end_orphans();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.timed_out) set_exit(r, status);
  r.stderr_tail = tail_of(err_file, 1500);
  return r;
}

CommandSession::CommandSession(std::string command, bool fresh)
    : command_(std::move(command)), fresh_(fresh), logs_("hla-verify-log") {}

CommandSession::~CommandSession() {
  if (pid_ <= 0) return;
  ::close(rounds_);  // the end of its fd 4: a kept command ends
  rounds_ = -1;
  int status = 0;
  end_process(exits_within(pid_, status, 2));
}

void CommandSession::start(const fs::path& dir) {
  int reply[2], rounds[2];  // reply: a pipe, the command writes; rounds: a socket (send without SIGPIPE), hla writes
  if (::pipe2(reply, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rounds) != 0) {
    const int e = errno;
    ::close(reply[0]);
    ::close(reply[1]);
    throw std::runtime_error(std::string("socketpair failed: ") + std::strerror(e));
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // as in run_command
  const int channel[2] = {reply[1], rounds[1]};
  try {
    pid_ = spawn(command_ + " " + shell_quote(dir.string()), channel, logs_.path() / "stdout", logs_.path() / "stderr",
                 guardian_);
  } catch (...) {
    for (int fd : {reply[0], reply[1], rounds[0], rounds[1]}) ::close(fd);
    throw;
  }
  ::close(reply[1]);
  ::close(rounds[1]);
  reply_ = reply[0];
  rounds_ = rounds[0];
  pending_.clear();
  ++starts_;
}

// Ends the kept command (reaped: waitpid has its status already) and closes hla's ends; pid_ < 0: only the latter.
void CommandSession::end_process(bool reaped) {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);  // the group, and whatever it left running
    if (!reaped) ::waitpid(pid_, nullptr, 0);
    end_orphans();
  }
  guardian_.release();
  if (rounds_ >= 0) ::close(rounds_);
  if (reply_ >= 0) ::close(reply_);
  rounds_ = reply_ = pid_ = -1;
  pending_.clear();
}

ProcessResult CommandSession::round(const fs::path& dir, double timeout) {
  if (fresh_) return run_command(command_, dir, timeout, logs_.path());
  InterruptGuard::check();
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) end_process(true);  // it ended after its last round
  // Where this round's stderr begins: measured before the round is sent (the command may write at once); a process
  // started for it truncates the file.
  std::error_code ec;
  const auto err_size = fs::file_size(logs_.path() / "stderr", ec);
  std::streamoff err_from = ec ? 0 : static_cast<std::streamoff>(err_size);
  bool sent = false;
  if (pid_ > 0) {
    const std::string line = dir.string() + "\n";
    sent = ::send(rounds_, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size());
    if (!sent) end_process(false);
  }
  if (!sent) {
    start(dir);
    err_from = 0;
  }
  const std::string want = dir.string();
  std::string wrong;  // a line on fd 3 that is not this round's DIR
  // What fd 3 holds (waiting up to ms for it): the answer, a wrong line, or nothing yet.
  auto read_reply = [&](int ms) {
    pollfd p{reply_, POLLIN, 0};
    while (::poll(&p, 1, ms) > 0) {
      char buf[4096];
      const ssize_t got = ::read(reply_, buf, sizeof buf);
      if (got <= 0) {  // fd 3 closed: the command is ending (waitpid sees it)
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        return Reply::none;
      }
      pending_.append(buf, static_cast<std::size_t>(got));
      if (const std::size_t nl = pending_.find('\n'); nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line == want) return Reply::answered;
        wrong = line.size() > 300 ? line.substr(0, 300) + "..." : line;
        return Reply::wrong;
      }
      if (pending_.size() > 8192) {  // longer than any path: no answer is coming
        wrong = pending_.substr(0, 300) + "... (8 KiB and no line break)";
        return Reply::wrong;
      }
      ms = 0;  // read on while there is more, without waiting again
    }
    return Reply::none;
  };
  RoundEnd end{};
  for (;;) {
    running_group = pid_;
    if (caught_signal) ::kill(-pid_, caught_signal);  // came between the check above and now
    try {
      end = wait_round(pid_, status, timeout, t0, read_reply);
    } catch (const Interrupted&) {
      pid_ = -1;  // wait_round killed and reaped it, and ended its orphans
      end_process(true);
      throw;
    }
    if (end != RoundEnd::exited) break;
    const Reply last = read_reply(0);  // what it wrote before it exited counts
    if (last != Reply::none) {
      end = last == Reply::answered ? RoundEnd::answered : RoundEnd::wrong_answer;
      break;
    }
    // A kept command that exits cleanly without answering the round sent to it had served its last round (it ended
    // as the round was sent): the round goes to a fresh process, within the same time-out.
    if (!sent || !WIFEXITED(status) || WEXITSTATUS(status) != 0) break;
    end_process(true);
    start(dir);
    sent = false;
    err_from = 0;
  }
  running_group = 0;
  ProcessResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (end == RoundEnd::answered && ::waitpid(pid_, &status, WNOHANG) == 0) return r;  // kept for the next round
  if (end == RoundEnd::timed_out)
    r.timed_out = true;
  else if (end == RoundEnd::wrong_answer)
    r.protocol_error = fmt::format("answered '{}' on fd 3 (HLA_VERIFY_REPLY_FD), not the round's directory", wrong);
  else
    set_exit(r, status);  // exited (an answer before a clean exit passes, as a one-round command's exit 0)
  end_process(end != RoundEnd::wrong_answer);
  r.stderr_tail = tail_of(logs_.path() / "stderr", 1500, err_from);
  return r;
}

void write_case(const fs::path& dir, const Case& c, const Request& req) {
  const fs::path cd = dir / c.name;
  fs::create_directories(cd);
  const npy::DType t = npy_dtype(req.dtype);
  npy::write(cd / "q.npy", c.in.Q, t);
  npy::write(cd / "k.npy", c.in.K, t);
  npy::write(cd / "v.npy", c.in.V, t);
  if (req.grad) npy::write(cd / "do.npy", c.dO, t);
  if (req.gates) npy::write(cd / "gamma.npy", std::vector<double>(c.gamma.data(), c.gamma.data() + c.gamma.size()), t);
  json parts = json::object();
  const std::vector<PartShape> layout = state_layout(req.op, c.in.Q.cols(), c.in.V.cols());
  for (const PartShape& p : layout) parts[p.name] = p.vector ? json::array({p.rows}) : json::array({p.rows, p.cols});
  auto is_vector = [&](const std::string& name) {
    return std::any_of(layout.begin(), layout.end(), [&](const PartShape& p) { return p.name == name && p.vector; });
  };
  json given = json::array();
  if (!c.state_in.parts.empty()) {
    fs::create_directories(cd / "state_in");
    for (const auto& [name, m] : c.state_in.parts) {
      if (is_vector(name))
        npy::write(cd / "state_in" / (name + ".npy"), std::vector<double>(m.data(), m.data() + m.size()), t);
      else
        npy::write(cd / "state_in" / (name + ".npy"), m, t);
      given.push_back(name);
    }
  }
  auto value = [&](const rational& r) { return round_to(req.dtype, from_rational<double>(r)); };
  json j = {{"op", req.op},
            {"case", c.name},
            {"kind", to_string(c.kind)},
            {"n", c.n()},
            {"d", c.in.Q.cols()},
            {"dv", c.in.V.cols()},
            {"gamma", value(c.opt.gamma)},
            {"normalized", c.opt.normalized},
            {"eps", value(c.opt.eps)},
            {"ridge", value(c.opt.ridge)},
            {"exact",
             {{"gamma", format_rational(c.opt.gamma)},
              {"eps", format_rational(c.opt.eps)},
              {"ridge", format_rational(c.opt.ridge)}}},
            {"dtype", dtype_name(req.dtype)},
            {"state", c.want_state && req.state},
            {"grad", req.grad},
            {"gates", req.gates},
            {"state_parts", parts},
            {"state_in", given}};
  write_file_atomically(cd / "case.json", j.dump(2) + "\n", "case file");
}

// What an array returned with the transpose of its shape is named (a state part [V, K] where SPEC's is [K, V]: fla's
// ops store it so with state_v_first=True, fla/ops/gla/fused_recurrent.py; diagnosis: battery.cpp transposed_state).
std::string transposed_hint(bool state_part) {
  return state_part ? ": transposed (convention:transposed-state, a [V, K] state where SPEC's is [K, V], as fla's ops "
                      "store it with state_v_first=True)"
                    : ": transposed";
}

std::string check_returned_output(const Case& c, const Mat<double>& o) {
  if (o.rows() != c.n() || o.cols() != c.in.V.cols())
    return fmt::format("output has shape ({}, {}), expected ({}, {})", o.rows(), o.cols(), c.n(), c.in.V.cols());
  return "";
}

std::string check_returned_gradients(const Case& c, const Outcome& o, const Request& req) {
  if (!req.grad) return "";
  const Eigen::Index n = c.n(), d = c.in.Q.cols(), dv = c.in.V.cols();
  for (const auto& [name, m, cols] :
       {std::tuple{"dq", &o.dQ, d}, std::tuple{"dk", &o.dK, d}, std::tuple{"dv", &o.dV, dv}})
    if (m->rows() != n || m->cols() != cols)
      return fmt::format("{} has shape ({}, {}), expected ({}, {})", name, m->rows(), m->cols(), n, cols);
  return "";
}

std::string check_returned_state(const Case& c, const NamedState<double>& s, const Request& req) {
  if (!c.want_state || !req.state) return "";
  for (const PartShape& p : state_layout(req.op, c.in.Q.cols(), c.in.V.cols())) {
    const Mat<double>* m = nullptr;
    for (const auto& [name, x] : s.parts)
      if (name == p.name) m = &x;
    if (!m) return "state_out has no part '" + p.name + "'";
    if (m->rows() != p.rows || m->cols() != p.cols)
      return fmt::format("state_out part '{}' has shape ({}, {}), expected ({}, {}){}", p.name, m->rows(), m->cols(),
                         p.rows, p.cols, m->rows() == p.cols && m->cols() == p.rows ? transposed_hint(true) : "");
  }
  return "";
}

Outcome read_outcome(const fs::path& dir, const Case& c, const Request& req) {
  Outcome o;
  const fs::path cd = dir / c.name;
  o.O = read_matrix(cd / "o.npy", "o.npy", c.n(), c.in.V.cols(), false, req, o.error);
  if (o.error.empty()) o.error = check_returned_output(c, o.O);
  if (o.error.empty() && req.grad) {
    const Eigen::Index n = c.n(), d = c.in.Q.cols(), dv = c.in.V.cols();
    o.dQ = read_matrix(cd / "dq.npy", "dq.npy", n, d, false, req, o.error);
    if (o.error.empty()) o.dK = read_matrix(cd / "dk.npy", "dk.npy", n, d, false, req, o.error);
    if (o.error.empty()) o.dV = read_matrix(cd / "dv.npy", "dv.npy", n, dv, false, req, o.error);
    // ∂L/∂state_in is optional, part by part: each part the command wrote is read and judged, one it did not
    // write is not (a part with no gradient in some option group need not be written as zeros).
    if (o.error.empty() && !c.state_in.parts.empty() && type_of(cd / "dstate_in") != fs::file_type::not_found)
      for (const PartShape& p : state_layout(req.op, d, dv)) {
        if (type_of(cd / "dstate_in" / (p.name + ".npy")) == fs::file_type::not_found) continue;
        Mat<double> m = read_matrix(cd / "dstate_in" / (p.name + ".npy"), "dstate_in/" + p.name + ".npy", p.rows,
                                    p.cols, p.vector || p.cols == 1, req, o.error);
        if (!o.error.empty()) return o;
        o.dstate_in.parts.emplace_back(p.name, std::move(m));
      }
    // ∂L/∂γ with --gates: optional, judged when written (shape (n,))
    if (o.error.empty() && req.gates && type_of(cd / "dgamma.npy") != fs::file_type::not_found)
      o.dgamma = read_matrix(cd / "dgamma.npy", "dgamma.npy", n, 1, true, req, o.error);
    if (o.error.empty()) o.error = check_returned_gradients(c, o, req);
  }
  if (!o.error.empty() || !c.want_state || !req.state) return o;
  for (const PartShape& p : state_layout(req.op, c.in.Q.cols(), c.in.V.cols())) {
    Mat<double> m = read_matrix(cd / "state_out" / (p.name + ".npy"), "state_out/" + p.name + ".npy", p.rows, p.cols,
                                p.vector || p.cols == 1, req, o.error);
    if (!o.error.empty()) return o;
    o.state_out.parts.emplace_back(p.name, std::move(m));
  }
  o.error = check_returned_state(c, o.state_out, req);
  return o;
}

std::vector<Outcome> ExecImplementation::run(const std::vector<Case>& cases, const Request& req, RoundLog& log) {
  const InterruptGuard guard;
  TempDir dir("hla-verify");
  write_cases(dir.path(), [&] {
    for (const Case& c : cases) write_case(dir.path(), c, req);
  });
  const ProcessResult pr = session_.round(dir.path(), timeout_);
  log.seconds = pr.seconds;
  log.failure = pr.describe();
  std::vector<Outcome> out;
  out.reserve(cases.size());
  for (const Case& c : cases) {
    Outcome o = read_outcome(dir.path(), c, req);
    o.error = pr.case_error(o.error);
    out.push_back(std::move(o));
  }
  InterruptGuard::check();  // a signal while the outputs were read: stop here, not after the next round
  if (keep_) {
    dir.release();
    log.what += " (kept in " + dir.path().string() + ")";
  }
  return out;
}

}  // namespace hla::verify::ext
