// Command-line options shared by subcommands that run a form: shape, seed and the operator options
// (γ, ε, λ as exact rationals).
#pragma once

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/limits.hpp"
#include "core/parse.hpp"
#include "core/registry.hpp"

namespace hla::cli {

// A 64-bit unsigned integer exactly as written: decimal digits within [0, 2^64 − 1]. CLI11 alone would
// saturate a larger number to 2^64 − 1, silently running another seed than the one asked for.
inline const CLI::Validator exact_uint64(
    [](std::string& text) -> std::string {
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        return "'" + text + "' is not an integer in [0, 2^64 - 1]";
      return "";
    },
    "UINT64");

// A seed option: every subcommand's --seed goes through exact_uint64 (`--seed -1` and a 21-digit seed are refused,
// never wrapped or saturated to 2^64 - 1).
inline CLI::Option* add_seed_option(CLI::App* sub, std::uint64_t& seed, const std::string& help) {
  return sub->add_option("--seed", seed, help + " (0 to 2^64 - 1)")->check(exact_uint64);
}

struct RunArgs {
  std::string op = "hla2", form = "serial", variant, scalar = "double";
  Shape shape{64, 8, 8};
  std::uint64_t seed = 1;
  std::string gamma = "1", eps = "0", ridge = "0";
  std::string gates = "none";  // a core/gates.hpp GateSpec: none | range:LO,HI | strength:S
  bool normalized = false, outputs_only = false;
  int chunk = 16, threads = 1;

  Options options() const {
    Options o;
    o.gamma = parse_rational(gamma, "--gamma");
    o.eps = parse_rational(eps, "--eps");
    o.ridge = parse_rational(ridge, "--ridge");
    o.normalized = normalized;
    o.chunk = chunk;
    o.threads = threads;
    o.state = !outputs_only;
    return o;
  }
};

// Everything `hla run` checks before it allocates: the shape, that the form exists for scalar T and
// defines the options, and that the inputs and outputs (and the reference's, when it is computed) fit in
// the memory there is. `opt` is a.options().
template <class T> const Entry<T>& checked_form(const RunArgs& a, const Options& opt, bool with_reference) {
  if (a.shape.n < 1 || a.shape.d < 1 || a.shape.dv < 1) throw InputError("--n, --d and --dv must be >= 1");
  (void)operator_info(a.op);  // an unknown operator is named as such, before the forms are searched
  const Entry<T>& e = registry<T>().find(a.op, a.form, a.variant);
  validate_options(opt, e.caps, e.key());
  // γ, ε, λ as a binary float holds them: past its range ε or λ is infinite and γ rounds to 0, and the run overflowed
  // (`--ridge 1e400` was exit 3, a numerical failure, for what is the input's).
  if constexpr (std::is_floating_point_v<T>) {
    const std::string in = fmt::format(" in {} (the --scalar)", scalar_name<T>());
    if (!std::isfinite(from_rational<T>(opt.eps))) throw InputError("--eps is past the largest number" + in);
    if (!std::isfinite(from_rational<T>(opt.ridge))) throw InputError("--ridge is past the largest number" + in);
    if (!(from_rational<T>(opt.gamma) > 0)) throw InputError("--gamma rounds to 0" + in);
  }
  if (parse_gate_spec(a.gates).any()) {
    if (!e.caps.gates)
      throw InputError(e.key() + " does not take per-token gates (`hla list` marks the forms that do)");
    if (opt.gamma != 1) throw InputError("--gates and --gamma together: with gates the decay is the gates'");
  }
  // No width limit here beyond the memory: `hla run` times any shape that fits.
  require_shape(a.shape, fmt::format("{} [{}]", e.key(), scalar_name<T>()), bytes_per_value<T>(), 0,
                std::numeric_limits<std::int64_t>::max(), with_reference ? bytes_per_value<mpfr256>() : 0);
  return e;
}

// A count >= 1 (n, d, dv, chunk, repeats): CLI11's PositiveNumber reads it as a double and refused 0 as "not in range
// 0.000000 to " and DBL_MAX's 309 digits.
inline CLI::Range positive_count() {
  return CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max(), "POSITIVE");
}

inline void add_run_options(CLI::App* sub, RunArgs& a) {
  sub->add_option("--op", a.op, "operator: " + operator_names([](const OperatorInfo&) { return true; }));
  sub->add_option("--form", a.form,
                  "form: reference serial serial-eq75 scan-fold scan-blelloch scan-twolevel chunked ...");
  sub->add_option("--variant", a.variant,
                  "paper | corrected | spec (default: the paper's or the definition, else the only one)");
  sub->add_option("--scalar", a.scalar, "rational fp61 mpfr256 double float");
  sub->add_option("--n", a.shape.n, "sequence length");
  sub->add_option("--d", a.shape.d, "query/key width");
  sub->add_option("--dv", a.shape.dv, "value width");
  add_seed_option(sub, a.seed, "input seed");
  sub->add_option("--gamma", a.gamma, "decay in (0, 1], e.g. 3/4 or 0.99");
  sub->add_option(
      "--gates", a.gates,
      "per-token gates: none | range:LO,HI (gamma_t uniform in [LO, HI]) | strength:S (-log gamma_t around S)");
  sub->add_option("--eps", a.eps, "normalizer stabilizer >= 0");
  sub->add_option("--ridge", a.ridge, "ridge λ >= 0 (hla2)");
  sub->add_flag("--normalized", a.normalized, "divide by den_t + eps");
  sub->add_option("--chunk", a.chunk, "chunk width w for scan/chunked forms");
  sub->add_option("--threads", a.threads, "OpenMP threads");
  sub->add_flag("--outputs-only", a.outputs_only,
                "no final state (a forward pass's outputs alone; hla2's chunked forms then skip C): time what the "
                "PyTorch peer computes");
}

}  // namespace hla::cli
