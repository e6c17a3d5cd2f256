// The MPI context of the sequence-parallel forms.
//
// `hla` initializes MPI only when it was launched by mpirun/srun (launched_by_mpi); otherwise MPI is
// never initialized and every mpi-* form runs as one rank, P = 1, without calling MPI at all — so the
// binary, the tests and the Python module behave as before.
//
// The forms are collective over `sequence_comm()`: every rank of it must call the same form on the same
// problem. That communicator is MPI_COMM_WORLD unless a SequenceScope narrows it — the distributed sweep
// and ledger run their points rank by rank, so inside a worker a sequence-parallel form runs on its own
// rank alone (MPI_COMM_SELF).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "mpi/codec.hpp"

namespace hla::distributed {

// True when the process was started by an MPI launcher (Open MPI's mpirun, PMIx or PMI: srun).
bool launched_by_mpi();
// Initializes MPI (when launched_by_mpi) and finalizes it when destroyed. Holds for main()'s lifetime.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool mpi_active();  // MPI initialized and not yet finalized
MPI_Comm sequence_comm();
int comm_rank(MPI_Comm c);
int comm_size(MPI_Comm c);
int world_rank();  // 0 without MPI
int world_size();  // 1 without MPI
std::string host_name();

// Narrows sequence_comm() for its lifetime (nests).
class SequenceScope {
 public:
  explicit SequenceScope(MPI_Comm c);
  ~SequenceScope();
  SequenceScope(const SequenceScope&) = delete;
  SequenceScope& operator=(const SequenceScope&) = delete;

 private:
  MPI_Comm saved_;
};

// Every rank's bytes, in rank order, on every rank (sizes first, then one MPI_Allgatherv).
std::vector<Bytes> all_gather(MPI_Comm c, const Bytes& mine);
// `root`'s bytes on every rank.
Bytes broadcast(MPI_Comm c, int root, Bytes data);

// Raises on every rank an error that happened on any rank, so that no rank is left waiting in a
// collective its peers have abandoned. `error` is the local failure (kind 0 = none, 1 = InputError,
// 2 = NumericalError, 3 = other) and its message; the lowest failing rank's message is rethrown.
void agree_on_errors(MPI_Comm c, int kind, const std::string& message);

// Phase times and traffic of the last sequence-parallel run on this rank (read by `hla mpi-bench`).
struct PhaseStats {
  double local_seconds = 0;           // the block's segment summary
  double scan_seconds = 0;            // the cross-rank exclusive scan
  double finish_seconds = 0;          // the block's outputs from the carried-in state
  double gather_seconds = 0;          // outputs and final state to every rank
  std::size_t scan_bytes_sent = 0;    // bytes this rank sent during the scan
  std::size_t gather_bytes_sent = 0;  // bytes this rank contributed to the gathers
  int scan_steps = 0;                 // message rounds of the scan on this rank
};
PhaseStats& last_phase_stats();

}  // namespace hla::distributed
