// Files the harness writes where a user (or an implementation under test) can interfere: reports and
// ledgers written whole or not at all, and temporary directories that never outlive the harness.
// Every failure a user's environment can cause (a directory where a file goes, an unwritable folder, a
// full disk, a bad TMPDIR) is an InputError naming the path and the reason, never a stray exception.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace hla {

// Every file the harness reads goes through InputFile: opened O_NONBLOCK (a FIFO, which would block the open until
// a writer came, never does), then fstat'ed and refused unless it is a regular file (a FIFO, a device, a directory,
// a socket); with `follow` false also O_NOFOLLOW (a path an outside program may have swapped for a symlink). Read in
// pieces of a known size, so that nothing is read that was not asked for. Errors: InputError "<path>: <problem>".
class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path, bool follow = true);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::size_t size() const { return size_; }
  const std::string& what() const { return what_; }
  // The next n bytes, appended to `out`; the file must still hold them.
  void read(std::size_t n, std::string& out);
  // Nothing may follow what was read.
  void expect_end();
  // Reads go on from byte `offset` (at most size()).
  void seek(std::size_t offset);

 private:
  std::string what_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

// The whole of a regular file (InputFile), refused past max_bytes or past the memory available: an InputError
// naming `path`.
std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes = UINT64_MAX,
                              bool follow = true);

// A regular file opened for appending (created if missing): O_NONBLOCK for the open, O_NOFOLLOW, fstat'ed; a FIFO,
// a device, a directory or a symlink at `path` is an InputError naming `what`. Returns the descriptor (O_CLOEXEC).
int open_regular_for_append(const std::filesystem::path& path, const std::string& what);

// A fresh file at `path` for a child process's output, in a directory of the harness's own that an outside program
// may have written to: whatever is at `path` (a FIFO, a symlink planted in place of a log) is unlinked, then the file
// is created O_CREAT|O_EXCL|O_NOFOLLOW, so its open never blocks and never writes through a link. Returns the
// descriptor (O_CLOEXEC), or -1 with errno set.
int create_fresh_file(const std::filesystem::path& path);

// An exclusive lock on a directory's lock file `dir/.hla-lock` (created if missing, never through a symlink), held
// while the object lives and then removed: a second process that asks for the same directory's lock is refused at
// once, with an InputError naming `what` and the directory (two sweeps writing one --out). The kernel drops the lock
// when the process dies, however it dies (the file then stays, unlocked, and is taken by the next).
class DirectoryLock {
 public:
  DirectoryLock(const std::filesystem::path& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  std::filesystem::path file_;
  int fd_ = -1;
};

// Refuses, before any work is done, an output path that cannot be written: a directory, a missing
// folder, a folder without write permission. `what` names the option in messages ("--json").
void check_writable(const std::filesystem::path& path, const std::string& what);

// Writes `text` to `path` atomically: into a fresh temporary file beside it, created with
// O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink is never written through), then renamed over it.
// On any failure the temporary file is removed and an InputError says what failed.
void write_file_atomically(const std::filesystem::path& path, std::string_view text, const std::string& what);

// JSON text that never throws: bytes that are not UTF-8 in a string (a command's stderr cut inside a
// character, a file name) become U+FFFD. indent < 0: one line.
std::string json_text(const nlohmann::json& j, int indent = -1);

// A fresh private directory under the system's temporary directory (TMPDIR), removed with everything in
// it when the object goes out of scope, however that happens (an exception, a signal turned into one).
// release() keeps it (for --keep). Removal never follows a symlink the directory's content was replaced by.
//
// A process killed outright (SIGKILL, the OOM killer) runs no destructor, and its directory would stay, in
// /dev/shm holding memory until a reboot. So beside the directory is its owner file, the directory's name plus
// kOwnerSuffix, on which its owner keeps an exclusive flock(2) for the directory's life; the kernel drops the lock
// when the process dies, however it dies. (Beside it, not in it: the directory is what `hla verify --exec` hands an
// implementation, which lists it.) Each new TempDir first removes the directories under its root named hla-* whose
// owner file it can lock: their owners are gone (sweep_abandoned_temp_dirs). The lock, not a pid, says so: pids are
// not unique across containers that share /dev/shm, a lock is. A released directory gives its owner file up, so it
// is never swept; a directory without one (another program's, or an older harness's) is never touched.
class TempDir {
 public:
  explicit TempDir(const std::string& stem);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  void release();

  static constexpr const char* kOwnerSuffix = ".owner";
  std::filesystem::path owner_file() const { return path_.string() + kOwnerSuffix; }

 private:
  std::filesystem::path path_;
  int owner_fd_ = -1;  // the open owner file, locked; -1 when the filesystem could not lock it
  bool keep_ = false;
};

// Removes every directory under `root` named hla-*, owned by this user, whose owner file no live process holds
// locked, and that file; returns how many. Never follows a symlink; never throws.
int sweep_abandoned_temp_dirs(const std::filesystem::path& root);

// The temporary directory the harness uses: TMPDIR when set and usable (an InputError naming TMPDIR when it is not a
// writable directory); when it is unset, /dev/shm if it is a writable directory with at least kMemoryTempMinFree
// bytes available (memory_temp_root), else /tmp.
std::filesystem::path temp_root();
inline constexpr unsigned long long kMemoryTempMinFree = 1ULL << 30;
// `dir` when it is a writable directory with at least min_free_bytes available to this user, else nothing.
std::optional<std::filesystem::path> memory_temp_root(const std::filesystem::path& dir,
                                                      unsigned long long min_free_bytes);

}  // namespace hla
