// Issue 27 (hardening, round two): what a hostile or careless input broke, each kept fixed. The command-line
// cases (signals, TMPDIR, --json, exit codes) are in tests/python/test_hardening.py; these are the library's.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/limits.hpp"
#include "core/registry.hpp"
#include "experiments/lib/bench_threads.hpp"
#include "experiments/lib/sweep.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "tests/fuzz/targets.hpp"
#include "tests/temp_dir.hpp"
#include "verify/exec.hpp"

using namespace hla;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using hla::fuzz::npy_header;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) { return e.what(); }
  return "";
}

// A file holding `head` and then zeros up to `size` bytes, sparse: no disk is used for the zeros.
void sparse_file(const fs::path& p, const std::string& head, std::uint64_t size) {
  std::ofstream(p, std::ios::binary) << head;
  REQUIRE(::truncate(p.c_str(), static_cast<off_t>(size)) == 0);
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a returned file is read header first: a 16 GiB array is refused without reading it", "[hardening][npy]") {
  // Before: the whole file was read before its shape was looked at (16 GiB sparse: the harness OOM-killed).
  const fs::path dir = fresh_dir("hardening-npy");
  fs::create_directories(dir);
  const fs::path big = dir / "o.npy";
  const std::string head = npy_header("(2147483648,)");
  sparse_file(big, head, head.size() + (std::uint64_t{1} << 34));
  std::string error;
  const double s = seconds_of([&] { error = error_of([&] { npy::read(big, 6); }); });
  CHECK_THAT(error, Contains("shape (2147483648,) has 2147483648 values, more than the 6 expected"));
  CHECK(s < 1);
  // Junk of 3 GiB is refused from its first bytes; a right header with gigabytes after it, from its size.
  sparse_file(dir / "junk.npy", "not a numpy file", std::uint64_t{3} << 30);
  CHECK(seconds_of([&] { CHECK_THAT(error_of([&] { npy::read(dir / "junk.npy", 6); }), Contains("bad magic")); }) < 1);
  sparse_file(dir / "long.npy", npy_header("(3, 2)"), std::uint64_t{3} << 30);
  CHECK(seconds_of([&] { CHECK_THAT(error_of([&] { npy::read(dir / "long.npy", 6); }), Contains("trailing bytes")); }) <
        1);
  // What is not a regular file is refused, and a FIFO does not block the reader.
  REQUIRE(::mkfifo((dir / "fifo.npy").c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { npy::read(dir / "fifo.npy", 6); }), Contains("not a regular file"));
  CHECK_THAT(error_of([&] { npy::read(dir, 6); }), Contains("not a regular file"));
  // A right file still reads.
  npy::write(dir / "ok.npy", Mat<double>::Constant(3, 2, 0.5));
  CHECK(npy::read(dir / "ok.npy", 6).data == std::vector<double>(6, 0.5));
  fs::remove_all(dir);
}

TEST_CASE("an atomic write never goes through a planted file or symlink and leaves nothing behind",
          "[hardening][files]") {
  const fs::path dir = fresh_dir("hardening-files");
  fs::create_directories(dir);
  std::ofstream(dir / "victim") << "keep";
  // Before: `--json F` wrote F.tmp, following a symlink planted there.
  fs::create_symlink(dir / "victim", dir / "r.json.tmp");
  write_file_atomically(dir / "r.json", "{}\n", "--json file");
  std::ifstream victim(dir / "victim");
  CHECK(std::string(std::istreambuf_iterator<char>(victim), {}) == "keep");
  std::ifstream written(dir / "r.json");
  CHECK(std::string(std::istreambuf_iterator<char>(written), {}) == "{}\n");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  CHECK(entries == 3);  // victim, the planted symlink, r.json: no temporary file left
  // A directory, a missing folder: InputErrors naming the option, before and at writing time.
  CHECK_THAT(error_of([&] { check_writable(dir, "--json"); }), Contains("--json") && Contains("is a directory"));
  CHECK_THAT(error_of([&] { check_writable(dir / "no" / "r.json", "--json"); }), Contains("does not exist"));
  CHECK_THAT(error_of([&] { write_file_atomically(dir, "x", "--json file"); }), Contains("is a directory"));
  CHECK_NOTHROW(check_writable(dir / "new.json", "--json"));
  CHECK(!fs::exists(dir / "new.json"));
  // Before: --json onto a FIFO, a device or a symlink (/dev/null, /dev/stdout as root) renamed a regular file over
  // the node itself. Now refused, before the battery and at writing time, and the node is left as it was.
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0644) == 0);
  fs::create_symlink(dir / "victim", dir / "link.json");
  for (const fs::path& node : {dir / "fifo", dir / "link.json"}) {
    INFO(node);
    CHECK_THAT(error_of([&] { check_writable(node, "--json"); }), Contains("not a regular file"));
    CHECK_THAT(error_of([&] { write_file_atomically(node, "{}\n", "--json file"); }), Contains("not a regular file"));
  }
  CHECK(fs::is_fifo(fs::symlink_status(dir / "fifo")));
  CHECK(fs::is_symlink(fs::symlink_status(dir / "link.json")));
  CHECK_THAT(error_of([&] { check_writable("/dev/null", "--json"); }), Contains("not a regular file"));
  fs::remove_all(dir);
}

TEST_CASE("report JSON survives bytes that are not UTF-8", "[hardening][files]") {
  // Before: a command's stderr cut inside a character made nlohmann's dump throw, losing the verdict.
  const nlohmann::json j = {{"stderr", std::string("progress \xe2\x96 cut\xff")}};
  std::string text;
  REQUIRE_NOTHROW(text = json_text(j, 2));
  CHECK_THAT(text, Contains("progress \xef\xbf\xbd cut\xef\xbf\xbd"));
  CHECK(nlohmann::json::parse(text)["stderr"].get<std::string>().find("cut") != std::string::npos);
}

TEST_CASE("temporary directories: a bad TMPDIR is an input error, and a read-only tree is removed",
          "[hardening][files]") {
  const char* saved = std::getenv("TMPDIR");
  const std::string old = saved ? saved : "";
  auto restore = [&] { saved ? ::setenv("TMPDIR", old.c_str(), 1) : ::unsetenv("TMPDIR"); };
  for (const char* bad : {"/nonexistent", "/proc"}) {
    ::setenv("TMPDIR", bad, 1);
    INFO(bad);
    CHECK_THAT(error_of([] { TempDir t("hla-test"); }), Contains("TMPDIR"));
  }
  ::setenv("TMPDIR", "", 1);  // empty means unset, as for mktemp(1): memory when /dev/shm has room, else /tmp
  const fs::path unset_root = TempDir("hla-test").path().parent_path();
  CHECK(unset_root == (memory_temp_root("/dev/shm", kMemoryTempMinFree) ? fs::path("/dev/shm") : fs::path("/tmp")));
  ::setenv("TMPDIR", "/tmp", 1);  // a TMPDIR that is set is used, memory or not
  CHECK(TempDir("hla-test").path().parent_path() == "/tmp");
  restore();
  // /dev/shm is passed over when it has less room than asked (a container's 64 MB), or is not a writable directory
  CHECK(!memory_temp_root("/dev/shm", ~0ULL));
  CHECK(!memory_temp_root("/nonexistent", 0));
  CHECK(!memory_temp_root("/proc/self/status", 0));
  if (fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK | X_OK) == 0)
    CHECK(memory_temp_root("/dev/shm", 0) == fs::path("/dev/shm"));
  fs::path kept;
  {
    TempDir t("hla-test-tree");
    kept = t.path();
    fs::create_directories(t.path() / "case" / "state_out");
    std::ofstream(t.path() / "case" / "state_out" / "S.npy") << "x";
    fs::create_symlink("/", t.path() / "case" / "root");  // removal never follows it
    fs::permissions(t.path() / "case" / "state_out", fs::perms::owner_read | fs::perms::owner_exec);
    fs::permissions(t.path() / "case", fs::perms::owner_read | fs::perms::owner_exec);
    // Before: a folder made unreadable (chmod 0) could not be opened to be given its permissions back, so a
    // non-root run left the whole temporary directory behind.
    fs::create_directories(t.path() / "locked" / "inner");
    std::ofstream(t.path() / "locked" / "inner" / "o.npy") << "x";
    fs::permissions(t.path() / "locked" / "inner", fs::perms::none);
    fs::permissions(t.path() / "locked", fs::perms::none);
  }
  CHECK(!fs::exists(kept));
  CHECK(fs::exists("/tmp"));
}

TEST_CASE("temporary directories: one left by a killed process is removed by the next, a live or kept one is not",
          "[hardening][files]") {
  const char* saved = std::getenv("TMPDIR");
  const std::string old = saved ? saved : "";
  const fs::path root = fresh_dir("sweep");  // a private root: only this test's directories are looked at
  fs::create_directories(root);
  ::setenv("TMPDIR", root.c_str(), 1);
  const auto entries = [&](bool dirs) {  // the directories under root, or its other entries (the owner files)
    std::vector<fs::path> v;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() == dirs) v.push_back(e.path());
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto killed_process_leaves_one = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      TempDir killed("hla-killed");
      ::kill(::getpid(), SIGKILL);
      ::_exit(1);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
  };
  {
    TempDir live("hla-live");          // held by this process: locked
    CHECK(fs::is_empty(live.path()));  // the owner file is beside the directory, which an implementation lists
    CHECK(fs::exists(live.owner_file()));
    fs::path kept;
    {
      TempDir k("hla-kept");
      k.release();  // --keep: the user's now, never swept
      kept = k.path();
      CHECK(!fs::exists(k.owner_file()));
    }
    const fs::path foreign = root / "hla-foreign";  // no owner file: not ours to judge
    fs::create_directories(foreign);
    // A process that dies without running a destructor (SIGKILL) leaves its directory and owner file behind.
    killed_process_leaves_one();
    REQUIRE(entries(true).size() == 4);
    REQUIRE(entries(false).size() == 2);
    fs::path abandoned;
    for (const fs::path& e : entries(true))
      if (e.filename().string().rfind("hla-killed-", 0) == 0) abandoned = e;
    REQUIRE(!abandoned.empty());
    CHECK(sweep_abandoned_temp_dirs(root) == 1);  // what the next TempDir does first
    CHECK(!fs::exists(abandoned));
    CHECK(entries(false) == std::vector<fs::path>{live.owner_file()});
    CHECK(fs::exists(live.path()));
    CHECK(fs::exists(kept));
    CHECK(fs::exists(foreign));
    // and through a new TempDir, after a second killed process
    killed_process_leaves_one();
    REQUIRE(entries(true).size() == 4);
    {
      TempDir next("hla-next");
      CHECK(entries(true).size() == 4);  // the killed one's gone, the new one is there
      CHECK(entries(false).size() == 2);
      CHECK(fs::exists(live.path()));
    }
    CHECK(entries(true).size() == 3);  // live, kept, foreign
  }
  CHECK(entries(true).size() == 2);  // kept, foreign
  CHECK(entries(false).empty());
  saved ? ::setenv("TMPDIR", old.c_str(), 1) : ::unsetenv("TMPDIR");
  fs::remove_all(root);
}

TEST_CASE("what a command writes back: symlink loops and odd files are findings, not exceptions",
          "[hardening][verify]") {
  using namespace verify::ext;
  TempDir dir("hla-test-outcome");
  Request req;
  req.op = "hla2";
  req.state = true;
  Case c;
  c.name = "case";
  c.kind = CaseKind::random;
  c.in = gaussian_problem({3, 2, 2}, 1);
  c.want_state = true;
  write_case(dir.path(), c, req);
  const fs::path cd = dir.path() / "case";
  // Before: fs::exists threw on the loop, an internal error (exit 1) with the temporary directories left.
  fs::create_symlink("o.npy", cd / "o.npy");
  Outcome o;
  REQUIRE_NOTHROW(o = read_outcome(dir.path(), c, req));
  CHECK_THAT(o.error, Contains("malformed o.npy") && Contains("symbolic links"));
  fs::remove(cd / "o.npy");
  npy::write(cd / "o.npy", Mat<double>::Zero(3, 2));
  fs::create_symlink("state_out", cd / "state_out");
  REQUIRE_NOTHROW(o = read_outcome(dir.path(), c, req));
  CHECK_THAT(o.error, Contains("state_out/"));
  fs::remove(cd / "state_out");
  fs::create_symlink("/dev/zero", cd / "state_out");
  REQUIRE_NOTHROW(o = read_outcome(dir.path(), c, req));
  CHECK(!o.error.empty());
}

TEST_CASE("sweep configs: nesting, size and integer ranges are checked before toml++ and before expanding",
          "[hardening][sweep]") {
  using namespace sweep;
  // Before: a 70 KB key 35,000 levels deep overflowed the stack inside toml++ (a segfault).
  std::string deep = "a";
  for (int i = 0; i < 35000; ++i) deep += ".a";
  CHECK_THAT(error_of([&] { parse_config(deep + " = 1\n", "deep.toml"); }),
             Contains("deep.toml:1") && Contains("nested"));
  CHECK_THAT(error_of([&] { parse_config("[" + deep + "]\n", "deep.toml"); }), Contains("nested"));
  CHECK_THAT(error_of([&] { parse_config("x = " + std::string(35000, '[') + "\n", "deep.toml"); }), Contains("nested"));
  CHECK_THAT(error_of([&] { parse_config("x = " + std::string(35000, '{') + "\n", "deep.toml"); }), Contains("nested"));
  CHECK_THAT(error_of([&] { parse_config(std::string(2 << 20, '#'), "big.toml"); }), Contains("at most"));
  // Dots and brackets inside strings and comments are not nesting; floats are not keys.
  CHECK_NOTHROW(parse_config("name = 'a'\ndescription = \"" + std::string(200, '.') + std::string(100, '[') + "\"\n# " +
                                 std::string(200, '.') +
                                 "\n[axes]\noperator = 'hla2'\nform = 'serial'\nn = 8\n"
                                 "gamma = [0.5, 0.75, 0.875, 0.9375, 0.99]\n",
                             "ok.toml"));
  // Before: 10^12 points were expanded (1 KB each) until memory ran out, even for --dry-run.
  const std::string wide = "[axes]\noperator = 'hla2'\nform = 'serial'\nn = [" + [] {
    std::string s;
    for (int i = 1; i <= 1000; ++i) s += std::to_string(i) + ",";
    return s;
  }() + "]\nd = [1,2,3,4,5,6,7,8,9,10]\ndv = [1,2,3,4,5,6,7,8,9,10]\nseeds = [1,2,3,4,5,6,7,8,9,10]\n";
  const Config c = parse_config(wide + "repeats = [1,2,3,4,5,6,7,8,9,10]\n", "wide.toml");
  CHECK_THAT(error_of([&] { (void)enumerate(c); }), Contains("10000000 combinations") && Contains("split"));
  // Before: 2^31 and above wrapped to 0, -1 or INT_MIN.
  for (const char* v : {"2147483648", "4294967295", "9223372036854775807"})
    for (const char* key : {"chunk", "threads", "repeats"}) {
      INFO(key << " = " << v);
      CHECK_THAT(error_of([&] {
                   parse_config(std::string("[axes]\noperator='hla2'\nform='serial'\nn=8\n") + key + " = " + v + "\n",
                                "i.toml");
                 }),
                 Contains("must be <= 2147483647"));
    }
  // Before: d = 100000 (or 2^32) was a bad_alloc when the point ran.
  for (const char* v : {"4097", "100000", "4294967296"})
    for (const char* key : {"d", "dv"}) {
      INFO(key << " = " << v);
      CHECK_THAT(error_of([&] {
                   parse_config(std::string("[axes]\noperator='hla2'\nform='serial'\nn=8\n") + key + " = " + v + "\n",
                                "w.toml");
                 }),
                 Contains("must be <= 4096"));
    }
  // Before: a NUL in the name was an internal error (the name becomes a folder name).
  CHECK_THAT(error_of([&] {
               parse_config(std::string("name = \"a\\u0000b\"\n[axes]\noperator='hla2'\nform='serial'\nn=8\n"),
                            "n.toml");
             }),
             Contains("control character 0x00 at byte 1"));
}

TEST_CASE("OMP_NUM_THREADS past what the machine can run is refused by name", "[hardening]") {
  // Before: OMP_NUM_THREADS=40000 ended in libgomp's "Thread creation failed" and exit 1 (the code of `differs`).
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string old = saved ? saved : "";
  for (const char* bad : {"40000", "2,40000", "99999999999999999999999"}) {
    ::setenv("OMP_NUM_THREADS", bad, 1);
    INFO(bad);
    CHECK_THAT(error_of([] { check_thread_environment(); }), Contains("OMP_NUM_THREADS"));
  }
  for (const std::string& fine : {std::string("1"), std::string("2,1"), std::to_string(max_threads())}) {
    ::setenv("OMP_NUM_THREADS", fine.c_str(), 1);
    INFO(fine);
    CHECK_NOTHROW(check_thread_environment());
  }
  saved ? ::setenv("OMP_NUM_THREADS", old.c_str(), 1) : ::unsetenv("OMP_NUM_THREADS");
}

// ---- issue 48 (hardening, round three): the limits layer, files that are not what they seem, signals -------------

TEST_CASE("OMP_NUM_THREADS is read as libgomp reads it; OMP_STACKSIZE is held to the memory", "[hardening][limits]") {
  // Before: " 100000" and "+100000" passed the check (only digit strings were counted) and libgomp read 100000:
  // `hla verify` died of SIGSEGV. OMP_STACKSIZE=100G made libgomp fail its threads and exit 1 (`differs`).
  struct Saved {
    const char* name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* v = std::getenv(name);
    saved.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
    ::unsetenv(name);
  }
  for (const char* bad : {" 100000", "+100000", "100000 ", "\t100000", "2, 100000", "abc", "0", "-1", "4x", ","}) {
    ::setenv("OMP_NUM_THREADS", bad, 1);
    INFO("OMP_NUM_THREADS='" << bad << "'");
    CHECK_THAT(error_of([] { check_thread_environment(); }), Contains("OMP_NUM_THREADS"));
  }
  for (const char* fine : {"+2", " 1 ", "2,1", " 3 , 1"}) {
    ::setenv("OMP_NUM_THREADS", fine, 1);
    INFO("OMP_NUM_THREADS='" << fine << "'");
    CHECK_NOTHROW(check_thread_environment());
  }
  ::unsetenv("OMP_NUM_THREADS");
  ::setenv("OPENBLAS_NUM_THREADS", " 100000", 1);  // OpenBLAS's own count, the same limit
  CHECK_THAT(error_of([] { check_thread_environment(); }), Contains("OPENBLAS_NUM_THREADS"));
  ::unsetenv("OPENBLAS_NUM_THREADS");
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    for (const char* bad : {"100000000G", "18446744073709551615", "abc", "12X", "-4M", "M"}) {
      ::setenv(name, bad, 1);
      INFO(name << "='" << bad << "'");
      CHECK_THAT(error_of([] { check_thread_environment(); }), Contains(name));
    }
    for (const char* fine : {"512", "8M", " 16 k ", "1048576B", "1g"}) {
      ::setenv(name, fine, 1);
      INFO(name << "='" << fine << "'");
      CHECK_NOTHROW(check_thread_environment());
    }
    ::unsetenv(name);
  }
  for (const Saved& s : saved)
    if (s.value) ::setenv(s.name, s.value->c_str(), 1);
}

TEST_CASE("sizes are counted before anything is allocated", "[hardening][limits]") {
  // Before: `hla check --d 1000000000 --n 2` was OOM-killed at 23 GB; state_parts(d = 30000) allocated for 31 s.
  CHECK_THAT(error_of([] { require_shape(Shape{2, 1000000000, 2}, "hla check", 8); }), Contains("d and dv"));
  CHECK_THAT(error_of([] { require_shape(Shape{1000000000000, 4, 4}, "hla check", 8); }), Contains("needs at least"));
  CHECK_THAT(error_of([] { require_shape(Shape{-1, 3, 3}, "state_parts", 8); }), Contains(">= 1"));
  CHECK_THAT(error_of([] { require_shape(Shape{2, 100000, 2}, "run", 8, 0, INT64_MAX); }), Contains("needs at least"));
  CHECK_NOTHROW(require_shape(Shape{64, 8, 8}, "run", 8));
  CHECK(run_bytes(Shape{INT64_MAX, INT64_MAX, INT64_MAX}, 8) == UINT64_MAX);  // saturates, never wraps
}

TEST_CASE("HLA_BENCH_THREADS is read strictly", "[hardening][limits]") {
  // The one environment variable hla_bench reads besides OpenMP's, parsed outside the benchmark program so that it is
  // tested here and fuzzed (fuzz_bench_threads) without Google Benchmark.
  using bench::parse_bench_threads;
  CHECK(parse_bench_threads(nullptr) == std::vector<int>{1, 2});
  CHECK(parse_bench_threads(" 16\t4 1\n2 ") == std::vector<int>{1, 2, 4, 16});
  CHECK(parse_bench_threads("0001 1024") == std::vector<int>{1, 1024});
  for (const char* bad : {"", " ", "0", "-1", "+2", "1025", "2147483648", "99999999999999999999", "1e20", "0x10", "1.5",
                          "2,4", "1 2 1", "1 01", "nan", "\xff"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(parse_bench_threads(bad), std::invalid_argument);
  }
}

TEST_CASE("files the harness reads are regular files, and a log is made fresh", "[hardening][files]") {
  const fs::path dir = fresh_dir("regular");
  fs::create_directories(dir);
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { (void)read_regular_file(dir / "fifo"); }), Contains("not a regular file"));
  CHECK_THAT(error_of([&] { (void)read_regular_file(dir); }), Contains("not a regular file"));
  { std::ofstream(dir / "victim") << "keep"; }
  fs::create_symlink(dir / "victim", dir / "link");
  CHECK(read_regular_file(dir / "link") == "keep");
  CHECK_THAT(error_of([&] { (void)read_regular_file(dir / "link", UINT64_MAX, false); }), Contains("symlink"));
  CHECK_THAT(error_of([&] { (void)read_regular_file(dir / "victim", 3); }), Contains("more than the 3"));
  CHECK_THAT(error_of([&] { ::close(open_regular_for_append(dir / "fifo", "out")); }), Contains("FIFO"));
  CHECK_THAT(error_of([&] { ::close(open_regular_for_append(dir / "link", "out")); }), Contains("symlink"));
  // A log swapped for a symlink or a FIFO is replaced, never written through nor waited on.
  for (const char* name : {"link", "fifo"}) {
    const int fd = create_fresh_file(dir / name);
    REQUIRE(fd >= 0);
    CHECK(::write(fd, "x", 1) == 1);
    ::close(fd);
    CHECK(fs::is_regular_file(fs::symlink_status(dir / name)));
  }
  CHECK(read_regular_file(dir / "victim") == "keep");
  fs::remove_all(dir);
}

TEST_CASE("one sweep per output directory: its lock refuses a second", "[hardening][files]") {
  // Before: two sweeps on one --out at once wrote 72 rows for 36 points.
  const fs::path dir = fresh_dir("lock");
  fs::create_directories(dir);
  {
    const DirectoryLock first(dir, "sweep output directory");
    CHECK_THAT(error_of([&] { const DirectoryLock second(dir, "sweep output directory"); }), Contains("in use"));
  }
  CHECK_NOTHROW(DirectoryLock(dir, "sweep output directory"));  // released with the first
  fs::remove(dir / ".hla-lock");
  fs::create_symlink(dir / "elsewhere", dir / ".hla-lock");
  CHECK_THAT(error_of([&] { const DirectoryLock planted(dir, "sweep output directory"); }), Contains("lock file"));
  CHECK_FALSE(fs::exists(dir / "elsewhere"));
  fs::remove_all(dir);
}

TEST_CASE("a command that swaps its log for a symlink or a FIFO neither hangs nor overwrites", "[hardening][files]") {
  // Before: the next process opened the log with O_TRUNC through the symlink (its target emptied), and a FIFO in its
  // place blocked the harness's read of the log forever, whatever the time-out.
  const fs::path dir = fresh_dir("logswap"), logs = dir / "logs", round = dir / "round";
  fs::create_directories(logs);
  fs::create_directories(round);
  { std::ofstream(dir / "victim") << "keep"; }
  auto swap = [&](const std::string& how) {
    const fs::path script = dir / "swap.sh";
    std::ofstream(script) << "log=$(readlink /proc/$$/fd/2); rm -f \"$log\"; " << how << " \"$log\"; exit 1\n";
    return verify::ext::run_command("sh " + script.string(), round, 20, logs);
  };
  const auto t0 = std::chrono::steady_clock::now();
  (void)swap("ln -s " + (dir / "victim").string());
  (void)swap("mkfifo");
  const verify::ext::ProcessResult r = swap("true");
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 15);
  CHECK(r.exit_code == 1);
  std::ifstream in(dir / "victim");
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "keep");
  fs::remove_all(dir);
}

TEST_CASE("a signal between two rounds is kept for the next", "[hardening][signals]") {
  // Before: each round's guard forgot what came before it, and between rounds no handler was installed at all (the
  // default action killed `hla verify`, its log directory left and a kept command running). A session's guard now
  // spans the rounds, and a round's guard inside it keeps the signal.
  CHECK_THROWS_AS(
      [] {
        const verify::ext::InterruptGuard session;
        ::raise(SIGTERM);  // caught: the process lives
        const verify::ext::InterruptGuard round;
        verify::ext::InterruptGuard::check();
      }(),
      verify::ext::Interrupted);
}
