// A work farm over the ranks of MPI_COMM_WORLD for independent items (sweep points, ledger claims).
//
// Rank 0 is the coordinator and the only writer: it hands out items in the order given (longest first),
// one at a time to whichever worker asks, and delivers each worker's result bytes to `deliver` on
// rank 0 as they arrive. Workers run `work(i)` with sequence_comm() narrowed to their own rank, so an
// mpi-* form inside a point runs on one rank instead of waiting for peers busy elsewhere. Without MPI,
// or on one rank, rank 0 runs every item itself in the same order. The coordinator waits by polling
// (MPI_Iprobe, then a 1 ms sleep) so that it does not spin on a core the workers need.
//
// `ranks_on_host()` is how many ranks of the job share this rank's host (recorded with every timing).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "mpi/codec.hpp"

namespace hla::distributed {

struct FarmOptions {
  bool one_per_host = false;  // at most one item in flight per host (timings free of co-running ranks)
  // Items that must run alone on their host (a timed ledger claim): assigned only to an idle host, and
  // nothing else is assigned there until they finish.
  std::function<bool(std::size_t)> exclusive;
};

void farm(const std::vector<std::size_t>& order, const std::function<Bytes(std::size_t)>& work,
          const std::function<void(std::size_t, const Bytes&)>& deliver, const FarmOptions& opt = {});

int ranks_on_host();

}  // namespace hla::distributed
