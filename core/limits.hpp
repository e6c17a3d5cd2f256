// The limits every subcommand of `hla` and every function of the Python module goes through before it allocates or
// starts a thread: the environment OpenMP reads (a count libgomp cannot create aborts or crashes the process), the
// sizes of a request (the memory it needs, estimated before anything is allocated and refused beyond what the
// machine has) and the widths the harness handles. Each refusal is an InputError naming the input (CLI exit 2,
// ValueError in Python). docs/hardening.md lists them per subcommand. Defined in core/memory.cpp, beside the memory
// estimate they build on (a unit of its own would regroup the unity build's batches).
#pragma once

#include <cstdint>
#include <string>

#include "core/inputs.hpp"
#include "core/memory.hpp"
#include "core/registry.hpp"  // max_threads() and check_thread_environment(), defined in core/memory.cpp

namespace hla {

// max_threads() (core/registry.hpp): the most OpenMP threads a form may ask for (Options::threads), 4 per hardware
// thread and at least 64.
//
// check_thread_environment() (core/registry.hpp) refuses what OpenMP and OpenBLAS would read from the environment and
// fail on: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS (a list "a,b,..." of counts, read as libgomp reads
// them: blanks around a number and a '+' are accepted, so " 100000" and "+5" are numbers) past max_threads() or not
// a count, and an OMP_STACKSIZE / GOMP_STACKSIZE (a size with an optional B, K, M or G suffix, K when none) that is
// not a size or larger than the memory available (libgomp then fails to create its threads and exits 1, the code of
// `differs`). Unset or empty variables are fine.

// The widest d and dv that `hla check`, sweeps, `hla mpi-bench` and the module's state_parts handle: a state of d²
// numbers per copy that no experiment here needs (and d = 2^32 was a bad_alloc).
inline constexpr std::int64_t kMaxWidth = 4096;

// The bytes a form's run on `shape` needs at least: the inputs drawn in double, converted to values of
// `value_bytes` (bytes_per_value<T>()), its outputs and a few copies (4) of its d x d and d x dv state; with
// `reference_value_bytes` > 0 also the reference's copy of the inputs and its outputs in that scalar. Saturates.
std::uint64_t run_bytes(const Shape& shape, std::uint64_t value_bytes, std::uint64_t reference_value_bytes = 0);

// The bytes the literal sums of a reference (reference/second_order.hpp, third_order.hpp) need at least, in a scalar
// of `value_bytes`: its copy of the inputs, its outputs and the n x n products q_t·k_i and q_t·q_j it forms first.
// `hla run --reference`, `hla check` and the module's reference() add it to run_bytes (`run --n 100000 --reference`
// was a bad_alloc, exit 70); a sweep's references past n = 128 are streaming forms in MPFR, counted by run_bytes.
std::uint64_t literal_reference_bytes(const Shape& shape, std::uint64_t value_bytes);

// n >= 1, 1 <= d, dv <= max_width, and run_bytes(...) (+ literal_reference_bytes with its value bytes > 0) within
// the memory available; InputError naming `what`
// ("hla check", "hla2/serial/paper [double]") otherwise.
void require_shape(const Shape& shape, const std::string& what, std::uint64_t value_bytes,
                   std::uint64_t reference_value_bytes = 0, std::int64_t max_width = kMaxWidth,
                   std::uint64_t literal_reference_value_bytes = 0);

}  // namespace hla
