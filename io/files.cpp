// Atomic writes, early output checks and self-removing temporary directories (io/files.hpp).
#include "io/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/types.hpp"

namespace hla {
namespace fs = std::filesystem;

namespace {

std::string reason(int err) { return std::strerror(err); }

// The folder a file at `path` goes into ("." for a bare name).
fs::path folder_of(const fs::path& path) { return path.parent_path().empty() ? fs::path(".") : path.parent_path(); }

// A new file beside `path` that nobody else can have prepared: a random name, O_EXCL (never an existing
// file), O_NOFOLLOW (never through a symlink). Returns the descriptor and sets `tmp`; -1 with errno set.
int create_beside(const fs::path& path, fs::path& tmp) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid())};
  for (int attempt = 0; attempt < 16; ++attempt) {
    tmp = path;
    tmp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// An atomic write renames a new file over `path`: over a device, a FIFO or a symlink (/dev/null, /dev/stdout as
// root) that would replace the node itself, for every user of it. Only a new name or a regular file is written.
void require_new_or_regular(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || st.type() == fs::file_type::not_found || st.type() == fs::file_type::regular) return;
  if (st.type() == fs::file_type::directory)
    throw InputError(what + " '" + path.string() + "' is a directory (give a file name)");
  throw InputError(what + " '" + path.string() +
                   "' exists and is not a regular file (a symlink, device or FIFO would be "
                   "replaced, not written through): give a new file name or a regular file");
}

}  // namespace

void check_writable(const fs::path& path, const std::string& what) {
  std::error_code ec;
  require_new_or_regular(path, what);
  const fs::path dir = folder_of(path);
  if (!fs::is_directory(dir, ec))
    throw InputError(what + " '" + path.string() + "': folder '" + dir.string() + "' does not exist");
  // The real test: the temporary file the atomic write will create, created and removed now.
  fs::path tmp;
  const int fd = create_beside(path, tmp);
  if (fd < 0) throw InputError(what + " '" + path.string() + "' cannot be written: " + reason(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
}

void write_file_atomically(const fs::path& path, std::string_view text, const std::string& what) {
  require_new_or_regular(path, what);
  fs::path tmp;
  const int fd = create_beside(path, tmp);
  if (fd < 0) throw InputError("cannot write " + what + " '" + path.string() + "': " + reason(errno));
  auto fail = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + what + " '" + path.string() + "': " + reason(err));
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + what + " '" + path.string() + "': " + reason(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + what + " '" + path.string() + "': " + reason(err));
  }
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<fs::path> memory_temp_root(const fs::path& dir, unsigned long long min_free_bytes) {
  struct statvfs fs_info {};
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0 || ::statvfs(dir.c_str(), &fs_info) != 0)
    return std::nullopt;
  const unsigned long long free_bytes =
      static_cast<unsigned long long>(fs_info.f_bavail) * static_cast<unsigned long long>(fs_info.f_frsize);
  if (free_bytes < min_free_bytes) return std::nullopt;
  return dir;
}

fs::path temp_root() {
  const char* env = std::getenv("TMPDIR");
  fs::path root;
  if (env && *env) {  // empty means unset, as for mktemp(1)
    root = env;
  } else {
    // Unset: memory where there is room. `hla verify --exec` exchanges hundreds of small files with the command in a
    // battery; on a disk's filesystem their creation, not their bytes, was most of a battery's time (a combine
    // battery here: 5.0 s on ext4, 0.9 s on /dev/shm, docs/verify.md). A small /dev/shm (a container's 64 MB) is
    // passed over, so that a large case cannot fill it.
    root = memory_temp_root("/dev/shm", kMemoryTempMinFree).value_or(fs::path("/tmp"));
  }
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw InputError("TMPDIR '" + root.string() + "' is not a directory (set TMPDIR to a writable directory)");
  return root;
}

TempDir::TempDir(const std::string& stem) {
  const fs::path root = temp_root();
  sweep_abandoned_temp_dirs(root);
  std::string tmpl = (root / (stem + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    throw InputError("cannot create a temporary directory in TMPDIR '" + root.string() + "': " + reason(errno) +
                     " (set TMPDIR to a writable directory)");
  path_ = tmpl;
  // The owner file is locked under another name and then renamed into place, so that a sweeper never finds it
  // unlocked while this process lives. Where the filesystem cannot lock, the directory is just not sweepable.
  const fs::path owner = owner_file(), pending = owner.string() + "-pending";
  const int fd = ::open(pending.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::rename(pending.c_str(), owner.c_str()) == 0) {
    owner_fd_ = fd;
    return;
  }
  ::unlink(pending.c_str());
  ::close(fd);
}

void TempDir::release() {
  keep_ = true;
  if (owner_fd_ < 0) return;
  ::unlink(owner_file().c_str());  // kept for the user: never swept
  ::close(owner_fd_);
  owner_fd_ = -1;
}

// Gives the owner back read, write and search permission on every directory of the tree (an implementation may
// have made its folders read-only, or unreadable with chmod 0), never through a symlink: each entry is lstat'ed and
// only a real directory is changed. A directory without read permission cannot be opened, so it is changed by
// path, parents first. Iterative, so a deep tree cannot exhaust the stack.
namespace {
void make_removable(const fs::path& top) {
  std::vector<fs::path> todo{top};
  while (!todo.empty()) {
    const fs::path dir = std::move(todo.back());
    todo.pop_back();
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    (void)::chmod(dir.c_str(), S_IRWXU);
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->symlink_status(ec).type() == fs::file_type::directory) todo.push_back(it->path());
  }
}

// Removes a tree, giving back the permissions an implementation may have taken away (make_removable); never throws.
void remove_tree(const fs::path& dir) {
  std::error_code ec;
  if (fs::remove_all(dir, ec) != static_cast<std::uintmax_t>(-1) && !ec) return;
  make_removable(dir);
  fs::remove_all(dir, ec);
}
}  // namespace

TempDir::~TempDir() {
  if (keep_) return;
  remove_tree(path_);  // never throws: this runs while an exception unwinds
  if (owner_fd_ < 0) return;
  ::unlink(owner_file().c_str());  // after the removal: the directory is never unlocked while it exists
  ::close(owner_fd_);
}

int sweep_abandoned_temp_dirs(const fs::path& root) {
  const std::string suffix = TempDir::kOwnerSuffix;
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path owner = it->path();
    const std::string name = owner.filename().string();
    if (!name.starts_with("hla-") || !name.ends_with(suffix)) continue;
    struct stat st {};
    if (::lstat(owner.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const int fd = ::open(owner.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // no live owner: holding the lock, nobody else sweeps it either
      const fs::path dir = root / name.substr(0, name.size() - suffix.size());
      if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid()) {
        remove_tree(dir);
        ++removed;
      }
      ::unlink(owner.c_str());
    }
    ::close(fd);
  }
  return removed;
}

}  // namespace hla
