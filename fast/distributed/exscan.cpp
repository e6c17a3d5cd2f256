#include "fast/distributed/exscan.hpp"

#include <climits>
#include <cstring>

namespace hla::distributed::detail {

namespace {
// A packed element: [used payload bytes | overflow flag | payload of `capacity` bytes].
struct Header {
  std::uint64_t used = 0;
  std::uint64_t overflow = 0;
};
constexpr std::size_t kHeader = sizeof(Header);

// The op function has no closure: the combine and capacity of the MPI_Exscan in progress (one at a time,
// called from the thread that called MPI_Exscan).
const PackedCombine* active_combine = nullptr;
std::size_t active_capacity = 0;

// inout ← in ⊕ inout, `in` from the lower ranks (MPI's order for a non-commutative op).
void packed_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const std::size_t stride = active_capacity + kHeader;
  for (int i = 0; i < *len; ++i) {
    std::byte* a = static_cast<std::byte*>(in) + static_cast<std::size_t>(i) * stride;
    std::byte* b = static_cast<std::byte*>(inout) + static_cast<std::size_t>(i) * stride;
    Header ha, hb;
    std::memcpy(&ha, a, kHeader);
    std::memcpy(&hb, b, kHeader);
    if (ha.overflow || hb.overflow) {
      hb.overflow = 1;
    } else {
      std::size_t nb = hb.used;
      bool fits = false;
      try {
        fits = (*active_combine)(a + kHeader, ha.used, b + kHeader, nb, active_capacity);
      } catch (...) {
        fits = false;  // never let an exception cross MPI's C frames; reported as a failed scan
      }
      if (fits)
        hb.used = nb;
      else
        hb.overflow = 1;
    }
    std::memcpy(b, &hb, kHeader);
  }
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
}
}  // namespace

Bytes exchange(MPI_Comm c, int partner, const Bytes& out) {
  if (out.size() > static_cast<std::size_t>(INT_MAX)) throw std::runtime_error("a segment larger than 2 GiB");
  MPI_Request req;
  check(MPI_Isend(out.data(), static_cast<int>(out.size()), MPI_BYTE, partner, kScanTag, c, &req), "MPI_Isend");
  MPI_Status st;
  check(MPI_Probe(partner, kScanTag, c, &st), "MPI_Probe");
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  Bytes in(static_cast<std::size_t>(n));
  check(MPI_Recv(in.data(), n, MPI_BYTE, partner, kScanTag, c, MPI_STATUS_IGNORE), "MPI_Recv");
  check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  return in;
}

bool packed_exscan(MPI_Comm c, const Bytes& mine, std::size_t capacity, const PackedCombine& combine, Bytes& result) {
  const std::size_t stride = capacity + kHeader;
  if (stride > static_cast<std::size_t>(INT_MAX)) throw std::runtime_error("mpi_exscan: buffer larger than 2 GiB");
  Bytes send(stride), recv(stride);
  Header h{mine.size(), 0};
  std::memcpy(send.data(), &h, kHeader);
  std::copy(mine.begin(), mine.end(), send.begin() + kHeader);
  MPI_Datatype type;
  MPI_Type_contiguous(static_cast<int>(stride), MPI_BYTE, &type);
  MPI_Type_commit(&type);
  MPI_Op op;
  MPI_Op_create(&packed_op, /*commute=*/0, &op);
  active_combine = &combine;
  active_capacity = capacity;
  const int rc = MPI_Exscan(send.data(), recv.data(), 1, type, op, c);
  active_combine = nullptr;
  MPI_Op_free(&op);
  MPI_Type_free(&type);
  check(rc, "MPI_Exscan");
  int me = 0;
  MPI_Comm_rank(c, &me);
  int overflow = 0, any = 0;
  if (me > 0) {
    std::memcpy(&h, recv.data(), kHeader);
    overflow = h.overflow != 0 || h.used > capacity;
  }
  check(MPI_Allreduce(&overflow, &any, 1, MPI_INT, MPI_LOR, c), "MPI_Allreduce");
  if (any) return false;
  if (me > 0) result.assign(recv.begin() + kHeader, recv.begin() + static_cast<std::ptrdiff_t>(kHeader + h.used));
  return true;
}

}  // namespace hla::distributed::detail
