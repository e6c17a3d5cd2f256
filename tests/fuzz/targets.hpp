// The fuzz targets' bodies, one function per parser of outside input. The libFuzzer executables
// (tests/fuzz/fuzz_<name>.cpp, make fuzz) call them on generated inputs; the Catch2 suite
// (tests/test_fuzz_findings.cpp) calls them on every input a fuzzer once failed on (tests/data/fuzz/<name>/),
// so a finding stays fixed. Bad input must end as the parser's InputError; anything else that escapes
// (another exception, a broken invariant: Violation) is a finding, as is a sanitizer report.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cli/options.hpp"
#include "core/dispatch.hpp"
#include "core/inputs.hpp"
#include "core/parse.hpp"
#include "experiments/lib/bench_threads.hpp"
#include "experiments/lib/reference_cache.hpp"
#include "experiments/lib/sweep.hpp"
#include "io/files.hpp"
#include "io/npy.hpp"
#include "verify/exec.hpp"

namespace hla::fuzz {

// A property the parser's result must have and did not.
struct Violation : std::logic_error {
  using std::logic_error::logic_error;
};
inline void require(bool ok, const std::string& what) {
  if (!ok) throw Violation(what);
}

// The exact number parser (core/parse.hpp) behind every γ, ε, λ of the command line and the configs: a
// rational or an InputError; what format_rational prints parses back to the same number.
inline void rational_text(std::string_view bytes) {
  try {
    const rational r = parse_rational(std::string(bytes), "fuzz");
    require(parse_rational(format_rational(r), "round trip") == r, "format_rational does not parse back");
  } catch (const InputError&) {}
}

// The .npy and .npz readers (io/npy.hpp): an array with as many values as its shape says, which
// re-serializes and reads back bit for bit, or an NpyError.
inline void npy_bytes(std::string_view bytes) {
  auto check = [](const npy::Array& a) {
    std::size_t values = 1;
    for (std::size_t s : a.shape) values *= s;
    require(a.data.size() == values, "values do not match the shape");
    const npy::Array b = npy::parse(npy::serialize(a.shape, a.data.data(), a.dtype), "re-serialized");
    require(b.shape == a.shape && b.data.size() == a.data.size(), "re-serialized array has another shape");
    require(a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0,
            "re-serialized values differ");
  };
  try {
    check(npy::parse(bytes, "fuzz.npy"));
  } catch (const npy::NpyError&) {}
  try {
    for (const auto& [name, a] : npy::parse_npz(bytes, "fuzz.npz")) check(a);
  } catch (const npy::NpyError&) {}
}

// Sweep configs (experiments/lib/sweep.hpp) through everything `hla sweep --dry-run` does: parse,
// enumerate the points against the registry, shard them. A plan whose shards partition its points, or an
// InputError naming the file and key.
inline void sweep_config(std::string_view bytes) {
  try {
    const sweep::Config c = sweep::parse_config(std::string(bytes), "fuzz.toml");
    const sweep::Enumeration en = sweep::enumerate(c);
    std::size_t points = 0;
    for (int i = 1; i <= 3; ++i) {
      const auto mine = sweep::shard_points(en.points, {i, 3});
      points += mine.size();
      for (const auto& p : mine) (void)p.key();
    }
    require(points == en.points.size(), "the shards do not partition the points");
  } catch (const InputError&) {}
}

// The command line of `hla run` and `hla sweep --shard` (cli/options.hpp), one argument per line, checked
// as the CLI checks it before allocating anything (CLI11's parse, the numbers, the scalar, the form and
// its variant, the options the form defines, the memory the shape needs). Nothing is run.
inline void cli_run_args(std::string_view bytes) {
  std::vector<std::string> args;
  std::istringstream lines{std::string(bytes)};
  for (std::string line; std::getline(lines, line);) args.push_back(line);
  cli::RunArgs a;
  std::string shard = "1/1";
  CLI::App app{"fuzz"};
  cli::add_run_options(&app, a);
  app.add_option("--shard", shard);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes its arguments back to front
    app.parse(reversed);
  } catch (const CLI::ParseError&) { return; }
  try {
    (void)sweep::parse_shard(shard);
    const Options opt = a.options();
    with_scalar(a.scalar, [&]<class T>() { (void)cli::checked_form<T>(a, opt, a.shape.n <= 2048); });
  } catch (const InputError&) {}
}

// The case the outputs targets read back: hla2 at n = 3, d = dv = 2, as write_case writes it. Flags: bit 0
// float32, bit 1 the case wants its state, bit 2 --grad.
inline std::pair<verify::ext::Request, verify::ext::Case> small_case(unsigned char flags) {
  verify::ext::Request req;
  req.op = "hla2";
  req.dtype = (flags & 1) ? verify::ext::DType::float32 : verify::ext::DType::float64;
  req.state = (flags & 2) != 0;
  req.grad = (flags & 4) != 0;
  verify::ext::Case c;
  c.name = "case";
  c.kind = verify::ext::CaseKind::random;
  c.in = gaussian_problem({3, 2, 2}, 1);
  c.want_state = req.state;
  c.dO = c.in.V;
  return {req, c};
}

// What an outside implementation writes back to `hla verify --exec` (verify/exec.hpp) for an
// hla2 case at n = 3, d = dv = 2 written by write_case: an Outcome of the case's shapes or one with an
// error message, never an exception. Input: a byte of flags (bit 0: float32, bit 1: the case wants its
// state, bit 2: --grad), then the files o.npy, state_out/<part>.npy in the operator's order, dq, dk,
// dv.npy, separated by "\n--\n"; the files after the last one given are missing.
inline void verify_outcome(std::string_view bytes) {
  namespace fs = std::filesystem;
  using namespace verify::ext;
  if (bytes.empty()) return;
  // A folder of this process's own, in memory where there is /dev/shm, removed at exit.
  struct Scratch {
    fs::path path;
    Scratch() {
      const fs::path shm("/dev/shm");
      path = (fs::exists(shm) ? shm : fs::temp_directory_path()) / ("hla-fuzz-verify-" + std::to_string(::getpid()));
      fs::create_directories(path);
    }
    ~Scratch() { fs::remove_all(path); }
  };
  static const Scratch scratch;
  const fs::path& dir = scratch.path;
  const auto [req, c] = small_case(static_cast<unsigned char>(bytes[0]));
  fs::remove_all(dir / c.name);
  write_case(dir, c, req);
  fs::create_directories(dir / c.name / "state_out");
  std::vector<fs::path> files{"o.npy"};
  for (const PartShape& p : state_layout(req.op, 2, 2)) files.push_back(fs::path("state_out") / (p.name + ".npy"));
  for (const char* g : {"dq.npy", "dk.npy", "dv.npy"}) files.push_back(g);
  std::string_view rest = bytes.substr(1);
  for (const fs::path& f : files) {
    const std::size_t cut = rest.find("\n--\n");
    std::ofstream(dir / c.name / f, std::ios::binary) << rest.substr(0, cut);
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 4);
  }
  const Outcome o = read_outcome(dir, c, req);
  require(!o.error.empty() || (o.O.rows() == 3 && o.O.cols() == 2), "an outcome without error has the wrong shape");
}

// A .npy header (format 1.0, float64, C order) claiming `shape_text`, padded as NumPy pads it: for files
// whose data is not there (sparse, truncated) or not what the header says.
inline std::string npy_header(const std::string& shape_text) {
  std::string h = "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape_text + ", }";
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) + static_cast<char>(h.size() >> 8) +
         h;
}

// How `hla verify --exec` reads back the files and folders a command leaves (verify/exec.hpp): any
// tree of directories, files of any claimed and actual size, symlinks (loops, to devices, to folders), FIFOs
// and permissions. read_outcome answers with an Outcome (an error naming what was wrong, or the case's
// shapes), never an exception or a hang, and the round's temporary directory is removed whatever is in it.
// Input: a byte of flags (bit 0: float32, bit 1: the case wants its state), then operations of 4 bytes
// each: what (mkdir, symlink, a right .npy, a header with a claimed shape over a sparse file, FIFO, chmod,
// remove), where (one of the protocol's paths), and two arguments. Symlink targets stay inside the round's
// folder (or are a device or nothing), so no operation writes outside it.
inline void exec_outputs(std::string_view bytes) {
  namespace fs = std::filesystem;
  using namespace verify::ext;
  if (bytes.empty()) return;
  static const char* const paths[] = {"o.npy",           "state_out",       "state_out/S.npy",
                                      "state_out/C.npy", "state_out/m.npy", "state_out/G.npy",
                                      "state_out/h.npy", "dq.npy",          "x",
                                      "x/o.npy",         "state_out/x",     "dstate_in"};
  static const char* const targets[] = {"o.npy", ".", "..", "state_out", "x", "/dev/zero", "/nonexistent", "loop"};
  const auto [req, c] = small_case(static_cast<unsigned char>(bytes[0]) & 3);
  fs::path root;
  {
    TempDir dir("hla-fuzz-outputs");
    root = dir.path();
    write_case(dir.path(), c, req);
    const fs::path cd = dir.path() / c.name;
    for (std::size_t at = 1; at + 4 <= bytes.size() && at < 1 + 4 * 64; at += 4) {
      const auto op = static_cast<unsigned char>(bytes[at]) % 7;
      const fs::path p = cd / paths[static_cast<unsigned char>(bytes[at + 1]) % std::size(paths)];
      const auto a = static_cast<unsigned char>(bytes[at + 2]), b = static_cast<unsigned char>(bytes[at + 3]);
      auto write_file = [&](const std::string& head, std::uint64_t size) {
        const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) return;
        if (::write(fd, head.data(), head.size()) < 0 || ::ftruncate(fd, static_cast<off_t>(size)) < 0) {}
        ::close(fd);
      };
      switch (op) {
        case 0:
          (void)::mkdir(p.c_str(), 0755);
          break;
        case 1: {
          const std::string t = a % std::size(targets) == 7 ? p.filename().string() : targets[a % std::size(targets)];
          (void)::symlink(t.c_str(), p.c_str());
          break;
        }
        case 2: {  // a right array of a small shape (a × b, or a vector when b is 0)
          const std::vector<std::size_t> shape =
              b % 5 ? std::vector<std::size_t>{a % 5u, b % 5u} : std::vector<std::size_t>{a % 5u};
          std::vector<double> v(shape.size() == 1 ? shape[0] : shape[0] * shape[1], 0.25);
          write_file(npy::serialize(shape, v.data(), (b & 0x80) ? npy::DType::f32 : npy::DType::f64), 0);
          break;
        }
        case 3: {  // a header claiming (2^a, 2) values over a sparse file of 2^(b % 40) bytes after it
          const std::string head = npy_header("(" + std::to_string(std::uint64_t{1} << (a % 40)) + ", 2)");
          write_file(head, head.size() + (std::uint64_t{1} << (b % 40)));
          break;
        }
        case 4:
          (void)::mkfifo(p.c_str(), 0644);
          break;
        case 5:
          (void)::fchmodat(AT_FDCWD, p.c_str(), static_cast<mode_t>(a | (b & 1) << 8), AT_SYMLINK_NOFOLLOW);
          break;
        default: {
          std::error_code ec;
          fs::remove(p, ec);
        }
      }
    }
    const Outcome o = read_outcome(dir.path(), c, req);
    require(!o.error.empty() || (o.O.rows() == 3 && o.O.cols() == 2), "an outcome without error has the wrong shape");
  }
  std::error_code ec;
  require(!fs::exists(fs::symlink_status(root, ec)), "the round's temporary directory was left behind");
}

// `hla merge`'s CSV reader (experiments/lib/sweep_io.cpp): the bytes as a shard's points.csv, merged into another file.
// The merged file holds as many rows as merge_outputs says and reads back in this version's columns, or an
// InputError names the problem (a bad index, other columns, a conflict); bytes that are not UTF-8 reach the JSON lines
// as U+FFFD, never an exception.
inline void merge_csv(std::string_view bytes) {
  namespace fs = std::filesystem;
  TempDir dir("hla-fuzz-merge");
  {
    std::ofstream(dir.path() / "points.csv", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const fs::path out = dir.path() / "merged" / "all.csv";
  try {
    const std::size_t rows = sweep::merge_outputs({dir.path() / "points.csv"}, out, nullptr);
    const sweep::CsvTable back = sweep::read_points(out);
    require(back.rows.size() == rows, "the merged file does not hold the rows merge_outputs counted");
    require(fs::is_regular_file(dir.path() / "merged" / "all.jsonl"), "no JSON lines beside the merged CSV");
  } catch (const InputError&) {}
}

// A sweep's reference cache file (experiments/lib/reference_cache.hpp), read for a point of a small shape. Input: a
// byte choosing the point (bits 0-1: n - 1, bits 2-3: dv - 1, bit 4: a streaming operator), then the file. A file that
// is used has exactly the point's shape and finite numbers, and what the sweep would write back for it reads as the
// same reference (exactly, for numbers of magnitude 0 or within [2^-700, 2^1000], whose five doubles are all normal);
// anything else is refused (nullopt), never an exception, a read past the bytes or an allocation the header asks for.
inline void reference_cache(std::string_view bytes) {
  if (bytes.empty()) return;
  const auto b = static_cast<unsigned char>(bytes[0]);
  const sweep::CacheShape shape{1 + (b & 3), 1 + ((b >> 2) & 3), (b & 16) != 0};
  const std::optional<sweep::RefData> r = sweep::parse_reference_cache(bytes.substr(1), shape);
  if (!r) return;
  const long long width = shape.dv + (shape.streaming ? 1 : 0);
  require(r->num.rows() == shape.n && r->num.cols() == width, "a used cache has another shape than its point");
  require(r->abs.size() == 0 || (r->abs.rows() == shape.n && r->abs.cols() == width), "the bound's shape is wrong");
  require(r->abs.allFinite(), "a used cache holds a bound that is not finite");
  bool representable = true;
  const mpfr256 low = std::ldexp(1.0, -700), high = std::ldexp(1.0, 1000);
  for (Eigen::Index i = 0; i < r->num.size(); ++i) {
    require(is_finite(r->num(i)), "a used cache holds a non-finite number");
    const mpfr256 m = abs(r->num(i));
    representable = representable && (m == 0 || (m >= low && m <= high));
  }
  const std::optional<sweep::RefData> back = sweep::parse_reference_cache(sweep::reference_cache_bytes(*r), shape);
  if (!representable) return;
  require(back && back->method == r->method && back->abs_method == r->abs_method && back->num == r->num &&
              back->abs == r->abs,
          "a used cache does not read back as itself once written");
}

// HLA_BENCH_THREADS (experiments/lib/bench_threads.hpp): counts in 1..kMaxBenchThreads, each once, sorted, that read
// back as themselves once written as make bench writes them; or std::invalid_argument.
inline void bench_threads(std::string_view bytes) {
  const std::string value(bytes.substr(0, bytes.find('\0')));  // an environment variable ends at its first NUL
  std::vector<int> threads;
  try {
    threads = bench::parse_bench_threads(value.c_str());
  } catch (const std::invalid_argument&) { return; }
  require(
      !threads.empty() && std::adjacent_find(threads.begin(), threads.end(), std::greater_equal<>()) == threads.end(),
      "the counts are not sorted and distinct");
  require(threads.front() >= 1 && threads.back() <= bench::kMaxBenchThreads, "a count out of range");
  std::string written;
  for (int t : threads) written += std::to_string(t) + " ";
  require(bench::parse_bench_threads(written.c_str()) == threads, "the counts do not read back");
}

}  // namespace hla::fuzz
