// What a request needs against what the machine has, so that a size that cannot fit is an InputError
// before anything is allocated (rather than std::bad_alloc, or the OOM killer, half-way through).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/scalar.hpp"

namespace hla {

// MemAvailable from /proc/meminfo (what can be allocated without swapping), or the free physical pages
// (sysconf) where there is no /proc.
std::uint64_t available_memory_bytes();

// a·b, saturating at UINT64_MAX: sizes from the command line may overflow any product.
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b);
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);

// "17.5 TiB", "512 MiB", "96 B".
std::string format_bytes(std::uint64_t bytes);

// InputError "<what> needs at least <needed>, <available> available (MemAvailable)" when needed does not
// fit ("needs more than 16 EiB" for a size that saturated).
void require_memory(std::uint64_t needed, const std::string& what);

// A lower bound on the bytes one value of T occupies: the object itself, plus for the multiprecision types
// the limbs it owns on the heap (MPFR-256: a 256-bit mantissa; a rational: at least one limb each for
// numerator and denominator).
template <class T> constexpr std::uint64_t bytes_per_value() {
  if constexpr (std::is_same_v<T, mpfr256>)
    return sizeof(T) + 256 / 8;
  else if constexpr (std::is_same_v<T, rational>)
    return sizeof(T) + 2 * sizeof(std::uint64_t);
  else
    return sizeof(T);
}

}  // namespace hla
