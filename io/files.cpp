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

#include "core/memory.hpp"
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

InputFile::InputFile(const fs::path& path, bool follow) : what_(path.string()) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd_ < 0)
    throw InputError(what_ + (errno == ELOOP && !follow ? std::string(": is a symlink (not followed here)")
                                                        : ": cannot read: " + reason(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw InputError(what_ + ": not a regular file");
  }
  // Blocking again: a regular file's reads never wait on a writer, and EAGAIN must not end a read early.
  (void)::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<std::size_t>(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read(std::size_t n, std::string& out) {
  const std::size_t start = out.size();
  out.resize(start + n);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd_, out.data() + start + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(what_ + ": cannot read: " + reason(errno));
    if (got == 0) throw InputError(what_ + ": file changed size while being read");
    done += static_cast<std::size_t>(got);
  }
}

void InputFile::expect_end() {
  char extra;
  ssize_t got;
  do got = ::read(fd_, &extra, 1);
  while (got < 0 && errno == EINTR);
  if (got != 0) throw InputError(what_ + ": file changed size while being read");
}

void InputFile::seek(std::size_t offset) {
  if (offset > size_ || ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0)
    throw InputError(what_ + ": cannot seek to byte " + std::to_string(offset));
}

std::string read_regular_file(const fs::path& path, std::uint64_t max_bytes, bool follow) {
  InputFile f(path, follow);
  if (f.size() > max_bytes)
    throw InputError(f.what() + ": a file of " + std::to_string(f.size()) + " bytes, more than the " +
                     std::to_string(max_bytes) + " accepted");
  require_memory(f.size(), f.what() + " (read whole)");  // a sparse file costs no disk, but its bytes would be read
  std::string bytes;
  f.read(f.size(), bytes);
  f.expect_end();
  return bytes;
}

int open_regular_for_append(const fs::path& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InputError(what + " '" + path.string() + "' cannot be written: " +
                     (errno == ELOOP   ? std::string("it is a symlink")
                      : errno == ENXIO ? std::string("it is a FIFO (not a regular file)")
                                       : reason(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(what + " '" + path.string() + "' is not a regular file (a FIFO or a device)");
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int create_fresh_file(const fs::path& path) {
  (void)::unlink(path.c_str());  // whatever an outside program left there; a directory stays and fails below
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

DirectoryLock::DirectoryLock(const fs::path& dir, const std::string& what) : file_(dir / ".hla-lock") {
  // The lock file is removed by its holder when it is done, so a file locked here may have been unlinked by its
  // holder between our open and our lock: then the lock is on a name nobody will find, and it is taken again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    fd_ = ::open(file_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd_ < 0) throw InputError(what + " '" + dir.string() + "': cannot create its lock file: " + reason(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw InputError(what + " '" + dir.string() + "': its lock file '" + file_.string() + "' is not a regular file");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      throw InputError(err == EWOULDBLOCK ? what + " '" + dir.string() +
                                                "' is in use by another running hla (one at a time per directory: "
                                                "wait for it, or give another directory)"
                                          : what + " '" + dir.string() + "': cannot lock it: " + reason(err));
    }
    struct stat now {};
    if (::lstat(file_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) return;
    ::close(fd_);  // unlinked (or replaced) since it was opened: once more, with the file that is there now
  }
  throw InputError(what + " '" + dir.string() + "': its lock file keeps being replaced");
}

DirectoryLock::~DirectoryLock() {
  ::unlink(file_.c_str());  // while still holding the lock: a process that opened it before sees it gone
  ::close(fd_);
}

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
