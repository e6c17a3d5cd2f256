#include "mpi/comm.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

namespace hla::distributed {

namespace {
MPI_Comm current_sequence_comm = MPI_COMM_NULL;  // MPI_COMM_NULL: MPI_COMM_WORLD
bool session_initialized = false;
}  // namespace

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

Session::Session(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  int provided = 0;
  // Funneled: OpenMP threads inside a form never call MPI; the main thread does.
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  // Errors become return codes that the callers turn into exceptions, not an abort with no message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  session_initialized = true;
}

Session::~Session() {
  if (session_initialized && mpi_active()) MPI_Finalize();
}

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

MPI_Comm sequence_comm() { return current_sequence_comm == MPI_COMM_NULL ? MPI_COMM_WORLD : current_sequence_comm; }

int comm_rank(MPI_Comm c) {
  if (!mpi_active()) return 0;
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  if (!mpi_active()) return 1;
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}
int world_rank() { return comm_rank(MPI_COMM_WORLD); }
int world_size() { return comm_size(MPI_COMM_WORLD); }

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

SequenceScope::SequenceScope(MPI_Comm c) : saved_(current_sequence_comm) { current_sequence_comm = c; }
SequenceScope::~SequenceScope() { current_sequence_comm = saved_; }

namespace {
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<std::size_t>(len)));
  }
}
int as_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw std::runtime_error("a message larger than 2 GiB");
  return static_cast<int>(n);
}
}  // namespace

std::vector<Bytes> all_gather(MPI_Comm c, const Bytes& mine) {
  const int P = comm_size(c);
  std::vector<long long> sizes(static_cast<std::size_t>(P));
  long long my_size = static_cast<long long>(mine.size());
  check(MPI_Allgather(&my_size, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, c), "MPI_Allgather");
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    counts[r] = as_count(static_cast<std::size_t>(sizes[r]));
    displs[r] = as_count(total);
    total += static_cast<std::size_t>(sizes[r]);
  }
  Bytes all(total);
  check(MPI_Allgatherv(mine.data(), as_count(mine.size()), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                       c),
        "MPI_Allgatherv");
  std::vector<Bytes> out(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  return out;
}

Bytes broadcast(MPI_Comm c, int root, Bytes data) {
  long long size = static_cast<long long>(data.size());
  check(MPI_Bcast(&size, 1, MPI_LONG_LONG, root, c), "MPI_Bcast");
  data.resize(static_cast<std::size_t>(size));
  check(MPI_Bcast(data.data(), as_count(data.size()), MPI_BYTE, root, c), "MPI_Bcast");
  return data;
}

void agree_on_errors(MPI_Comm c, int kind, const std::string& message) {
  const int me = comm_rank(c), P = comm_size(c);
  int first = kind ? me : P;
  int lowest = P;
  check(MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, c), "MPI_Allreduce");
  if (lowest == P) return;
  ByteWriter w;
  w.i64(kind);
  w.text(message);
  const Bytes error = broadcast(c, lowest, lowest == me ? w.take() : Bytes{});
  ByteReader r(error);
  const std::int64_t k = r.i64();
  const std::string text = "rank " + std::to_string(lowest) + ": " + r.text();
  if (k == 1) throw InputError(text);
  if (k == 2) throw NumericalError(text);
  throw std::runtime_error(text);
}

PhaseStats& last_phase_stats() {
  static PhaseStats s;
  return s;
}

}  // namespace hla::distributed
