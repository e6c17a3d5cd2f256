// `hla`: the harness's one executable. Exit codes: 0 success, 2 bad input (unknown names, bad shapes or
// ranges, bad config, an unusable path or TMPDIR), 3 a numerical failure (non-finite result), a
// subcommand's own (`verify`: 1 differs), 128 + signal when SIGINT, SIGTERM or SIGHUP stopped a command
// it ran (130, 143, 129), and 70 (EX_SOFTWARE) for an internal error: a bug of the harness, never the
// answer to an outside input, and distinct from every verdict.
#include <fmt/core.h>

#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "cli/commands.hpp"
#include "core/registry.hpp"
#include "core/types.hpp"
#include "mpi/comm.hpp"
#include "verify/exec.hpp"

namespace {
constexpr int kInternalError = 70;  // sysexits.h EX_SOFTWARE

// An error message as the one line it is: a control character an input carried into it (a newline at the end of a
// value, a terminal's escape sequence in a path) is printed escaped, never raw.
std::string one_line(std::string_view message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.remove_suffix(1);
  std::string out;
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    out += c == '\n' ? std::string("\\n") : c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, ch);
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  // MPI only under mpirun/srun (mpi/comm.hpp); otherwise nothing changes.
  const hla::distributed::Session mpi(&argc, &argv);
  CLI::App app{"HLA harness: verifies, measures and benchmarks Higher-order Linear Attention"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  for (const auto& add : hla::cli::command_adders()) add(app);
  try {
    hla::check_thread_environment();
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) { return app.exit(e); } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's own exit code (e.g. `verify`: 1 = differs)
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "{}\nRun with --help or --help-all for more information.\n", one_line(e.what()));
    return 2;
  } catch (const hla::InputError& e) {
    fmt::print(stderr, "hla: error: {}\n", one_line(e.what()));
    return 2;
  } catch (const hla::NumericalError& e) {
    fmt::print(stderr, "hla: numerical failure: {}\n", one_line(e.what()));
    return 3;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user named (or TMPDIR) that the filesystem refused: their input, not a bug.
    fmt::print(stderr, "hla: error: {}\n", one_line(e.what()));
    return 2;
  } catch (const hla::verify::ext::Interrupted& e) {
    fmt::print(stderr, "hla: {}: the command was stopped and its files removed\n", e.what());
    return 128 + e.signal;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hla: internal error (a bug of the harness, please report it): {}\n", one_line(e.what()));
    return kInternalError;
  }
  return 0;
}
