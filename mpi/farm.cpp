#include "mpi/farm.hpp"

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "mpi/comm.hpp"

namespace hla::distributed {

namespace {
constexpr int kReady = 7401;   // worker → coordinator: [u64 item or ~0 (none)] [result bytes]
constexpr int kAssign = 7402;  // coordinator → worker: [u64 item], or ~0: stop
constexpr std::uint64_t kNone = ~std::uint64_t(0);

void send_bytes(const Bytes& b, int to, int tag) {
  if (MPI_Send(b.data(), static_cast<int>(b.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD) != MPI_SUCCESS)
    throw std::runtime_error("farm: MPI_Send failed");
}
Bytes recv_bytes(int from, int tag, int* source = nullptr) {
  MPI_Status st;
  // Poll instead of a blocking receive: Open MPI's blocking wait spins on the core.
  for (int flag = 0; !flag;) {
    MPI_Iprobe(from, tag, MPI_COMM_WORLD, &flag, &st);
    if (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  Bytes b(static_cast<std::size_t>(n));
  MPI_Recv(b.data(), n, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (source) *source = st.MPI_SOURCE;
  return b;
}

// The host of every rank, as an index (same index = same host), on every rank.
std::vector<int> host_ids() {
  std::vector<int> ids(static_cast<std::size_t>(world_size()), 0);
  if (!mpi_active()) return ids;
  ByteWriter w;
  w.text(host_name());
  const std::vector<Bytes> names = all_gather(MPI_COMM_WORLD, w.take());
  std::map<std::string, int> index;
  for (std::size_t r = 0; r < names.size(); ++r) {
    ByteReader rd(names[r]);
    ids[r] = index.emplace(rd.text(), static_cast<int>(index.size())).first->second;
  }
  return ids;
}
}  // namespace

int ranks_on_host() {
  if (!mpi_active()) return 1;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  const int n = comm_size(local);
  MPI_Comm_free(&local);
  return n;
}

void farm(const std::vector<std::size_t>& order, const std::function<Bytes(std::size_t)>& work,
          const std::function<void(std::size_t, const Bytes&)>& deliver, const FarmOptions& opt) {
  const int P = world_size(), me = world_rank();
  if (P == 1) {
    for (std::size_t i : order) deliver(i, work(i));
    return;
  }
  const std::vector<int> host = host_ids();
  if (me != 0) {
    const SequenceScope alone(MPI_COMM_SELF);
    ByteWriter hello;
    hello.u64(kNone);
    send_bytes(hello.take(), 0, kReady);
    for (;;) {
      const Bytes assignment = recv_bytes(0, kAssign);
      ByteReader a(assignment);
      const std::uint64_t item = a.u64();
      if (item == kNone) return;
      Bytes result;
      try {
        result = work(static_cast<std::size_t>(item));
      } catch (const std::exception& e) {
        // The coordinator would wait for this item forever: stop the whole job, loudly.
        std::fprintf(stderr, "hla: rank %d: item %llu failed: %s; aborting the job\n", me,
                     static_cast<unsigned long long>(item), e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      ByteWriter w;
      w.u64(item);
      w.raw(result.data(), result.size());
      send_bytes(w.take(), 0, kReady);
    }
  }
  // The coordinator.
  std::deque<std::size_t> todo(order.begin(), order.end());
  std::map<int, int> busy_on_host;    // host → items in flight
  std::map<int, bool> alone_on_host;  // host → an exclusive item is running there
  std::deque<int> waiting;            // idle workers with nothing they may take yet
  int stopped = 0;
  auto is_exclusive = [&](std::size_t item) { return opt.exclusive && opt.exclusive(item); };
  // Hands `worker` the first item its host may run now; stops it when nothing is left; else it waits.
  auto assign = [&](int worker) {
    if (todo.empty()) {
      ByteWriter w;
      w.u64(kNone);
      send_bytes(w.take(), worker, kAssign);
      ++stopped;
      return true;
    }
    const int h = host[worker];
    if (alone_on_host[h]) return false;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const std::size_t item = todo[k];
      const bool alone = is_exclusive(item);
      if ((alone || opt.one_per_host) && busy_on_host[h] > 0) continue;
      todo.erase(todo.begin() + static_cast<std::ptrdiff_t>(k));
      ++busy_on_host[h];
      alone_on_host[h] = alone;
      ByteWriter w;
      w.u64(item);
      send_bytes(w.take(), worker, kAssign);
      return true;
    }
    return false;
  };
  while (stopped < P - 1) {
    int worker = 0;
    const Bytes msg = recv_bytes(MPI_ANY_SOURCE, kReady, &worker);
    ByteReader r(msg);
    const std::uint64_t item = r.u64();
    if (item != kNone) {
      --busy_on_host[host[worker]];
      alone_on_host[host[worker]] = false;
      deliver(static_cast<std::size_t>(item), Bytes(msg.begin() + sizeof(std::uint64_t), msg.end()));
    }
    if (!assign(worker)) waiting.push_back(worker);
    // Workers held back may take something now (their host freed up, or there is nothing left: stop).
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t k = 0; k < waiting.size(); ++k)
        if (assign(waiting[k])) {
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
          moved = true;
          break;
        }
    }
  }
}

}  // namespace hla::distributed
