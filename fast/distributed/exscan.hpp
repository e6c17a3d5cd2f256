// The exclusive scan of one segment per rank across the ranks of a communicator, under an operator's
// associative (non-commutative) combine: rank r receives s_0 ⊕ … ⊕ s_{r−1}; rank 0 receives nothing.
// Two implementations, both ⌈log₂ P⌉ rounds of one state per rank in the recursive-doubling pattern:
//
//   recursive_doubling  hand-written (the MPICH algorithm): in round k rank r exchanges its running
//                       partial with r XOR 2^k; a partner below adds on the left of both the result and
//                       the partial, a partner above on the right of the partial. Messages carry the
//                       encoded segment at its own size (MPI_Probe), so exact scalars of any size cross.
//   mpi_exscan          MPI_Exscan with a user-defined non-commutative MPI_Op over a packed buffer of
//                       fixed capacity [used bytes | overflow flag | segment bytes]. An exact scalar can
//                       grow past the capacity while combining; the op then flags overflow, every rank
//                       learns of it (MPI_Allreduce) and the scan is rerun with a larger capacity.
//                       How many rounds MPI_Exscan takes is the library's choice (Open MPI's coll
//                       components: linear or recursive doubling); `make bench-distributed` measures it.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

#include "fast/distributed/plan.hpp"
#include "mpi/comm.hpp"

namespace hla::distributed {

namespace detail {
constexpr int kScanTag = 7301;

// Sends `out` to `partner` and receives its message of any size.
Bytes exchange(MPI_Comm c, int partner, const Bytes& out);

// The combine of the MPI_Op, on encoded segments: set for the duration of one MPI_Exscan call (the op
// function has no closure). Returns false when the result does not fit in `capacity` bytes.
using PackedCombine =
    std::function<bool(const std::byte* a, std::size_t na, std::byte* b_inout, std::size_t& nb, std::size_t capacity)>;
// Runs MPI_Exscan over packed buffers of `capacity` payload bytes; returns false on overflow anywhere.
bool packed_exscan(MPI_Comm c, const Bytes& mine, std::size_t capacity, const PackedCombine& combine, Bytes& result);
}  // namespace detail

template <class T, class Op, class Seg = typename Op::Seg>
std::optional<Seg> exclusive_scan_ranks(const Op& op, const Seg& mine, MPI_Comm c, CrossScan how, PhaseStats& stats) {
  const int P = comm_size(c), me = comm_rank(c);
  if (how == CrossScan::recursive_doubling) {
    Seg partial = mine;
    std::optional<Seg> result;
    for (int mask = 1; mask < P; mask <<= 1) {
      const int partner = me ^ mask;
      if (partner >= P) continue;
      const Bytes out = encode_segment<T>(partial);
      const Bytes in = detail::exchange(c, partner, out);
      stats.scan_bytes_sent += out.size();
      ++stats.scan_steps;
      Seg other = decode_segment<T, Seg>(in.data(), in.size());
      if (partner < me) {
        result = result ? op.combine(other, *result) : other;
        partial = op.combine(other, partial);
      } else {
        partial = op.combine(partial, other);
      }
    }
    return result;
  }
  // MPI_Exscan: fixed-size scalars never overflow (every segment of one shape has one size); exact
  // ones start with room for P maximal segments and grow if a combine needs more.
  const Bytes enc = encode_segment<T>(mine);
  unsigned long long largest = enc.size(), mine_size = enc.size();
  MPI_Allreduce(&mine_size, &largest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, c);
  std::size_t capacity = is_exact_v<T> || std::is_same_v<T, mpfr256> ? static_cast<std::size_t>(largest) * P + 64
                                                                     : static_cast<std::size_t>(largest);
  detail::PackedCombine combine = [&op](const std::byte* a, std::size_t na, std::byte* b, std::size_t& nb,
                                        std::size_t cap) {
    const Bytes r = encode_segment<T>(op.combine(decode_segment<T, Seg>(a, na), decode_segment<T, Seg>(b, nb)));
    if (r.size() > cap) return false;
    std::copy(r.begin(), r.end(), b);
    nb = r.size();
    return true;
  };
  Bytes result;
  for (int attempt = 0;; ++attempt) {
    stats.scan_bytes_sent += capacity + 16;  // what one message of the library's algorithm carries
    if (detail::packed_exscan(c, enc, capacity, combine, result)) break;
    if (attempt == 8) throw std::runtime_error("mpi_exscan: a combined segment outgrew 256x its capacity");
    capacity *= 4;
  }
  stats.scan_steps = P > 1 ? static_cast<int>(std::ceil(std::log2(static_cast<double>(P)))) : 0;  // nominal
  if (me == 0) return std::nullopt;
  return decode_segment<T, Seg>(result.data(), result.size());
}

}  // namespace hla::distributed
