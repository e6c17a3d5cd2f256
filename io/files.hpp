// Files the harness writes where a user (or an implementation under test) can interfere: reports and
// ledgers written whole or not at all, and temporary directories that never outlive the harness.
// Every failure a user's environment can cause (a directory where a file goes, an unwritable folder, a
// full disk, a bad TMPDIR) is an InputError naming the path and the reason, never a stray exception.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace hla {

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
