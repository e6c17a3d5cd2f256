// Sequence-parallel (context-parallel) evaluation of a scan operator over the ranks of sequence_comm().
//
// Rank r of P owns the contiguous block [⌊r n/P⌋, ⌊(r+1) n/P⌋) (blocks differ by at most one token; with
// P > n some are empty). Every rank holds the whole problem (the calling convention), but reads only its
// block. Three phases:
//   1. local   the block's segment summary s_r. Where a segment is the serial state of the block from the
//              zero state plus parts in closed form (hla2: ρ = γ^len; linear: ρ; AHLA: ρ and R = Kᵀ Q),
//              the chunked form computes that state (one chunked pass over the block); otherwise (hla3's
//              SQ, X, x, Y) the scan operator's up-sweep over each chunk of width w (fast/scan/drivers.hpp),
//              then over the chunk summaries. Rank 0 puts the initial state in front, s_0 ← P₀ ⊕ s_0.
//   2. scan    the exclusive scan across ranks (exscan.hpp): rank r receives P₀ ⊕ s_0 ⊕ … ⊕ s_{r−1}, the
//              inclusive state of everything before its block; its serial part is the block's initial state.
//   3. finish  the block's outputs by the fast chunked form of the same operator from that state
//              (split-and-carry: a block started from the carried state gives the whole sequence's outputs).
// Outputs are then gathered and the final state (the last rank's) broadcast, so every rank returns the
// full Run: the form keeps the calling convention and everything that iterates the registry runs it.
// A failure on one rank (a vanishing normalizer in its block) is raised on every rank before the gather.
// Without MPI, or with P = 1, only phase 3 runs, on the whole sequence.
#pragma once

#include <chrono>
#include <string>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "fast/distributed/exscan.hpp"
#include "fast/scan/operators.hpp"

namespace hla::distributed {

// The summary of rows [b, e): up-sweep within chunks of width w, then across the chunk summaries.
template <class Op, class T>
typename Op::Seg block_summary(const Op& op, const Problem<T>& p, Eigen::Index b, Eigen::Index e, int chunk, int threads) {
  using Seg = typename Op::Seg;
  if (b >= e) return op.identity(p.d(), p.dv());
  const Eigen::Index w = std::clamp<Eigen::Index>(chunk, 1, e - b), B = (e - b + w - 1) / w;
  std::vector<Seg> sums(static_cast<std::size_t>(B));
  scan::parallel_for(B, threads, [&](Eigen::Index c) {
    auto levels = scan::up_sweep(op, scan::detail::tokens(op, p, b + c * w, std::min(e, b + (c + 1) * w), 1), 1);
    sums[c] = std::move(levels.back()[0]);
  });
  return std::move(scan::up_sweep(op, std::move(sums), threads).back()[0]);
}

// The segment of a block from its serial state (the chunked form's final state from zero), for the
// operators whose segment-only parts have a closed form; no overload: the scan up-sweep is used.
template <class T, bool M>
scan::Hla2Seg<T, M> segment_from_state(const scan::Hla2Op<T, M>&, fast::Hla2State<T, M> st, const Problem<T>& block, const T& gamma) {
  return {std::move(st), power(gamma, block.n())};
}
template <class T>
scan::LinearSeg<T> segment_from_state(const scan::LinearOp<T>&, fast::LinearState<T> st, const Problem<T>& block, const T& gamma) {
  return {std::move(st), power(gamma, block.n())};
}
template <class T>
scan::AhlaSeg<T> segment_from_state(const scan::AhlaOp<T>& op, fast::AhlaState<T> st, const Problem<T>& block, const T& gamma) {
  if (op.variant() != scan::Variant::corrected) throw std::logic_error("the printed AHLA combine decays R");
  return {std::move(st), Mat<T>(block.K.transpose() * block.Q), power(gamma, block.n())};  // R = Σ k qᵀ, undecayed
}

template <class Op, class T>
typename Op::Seg local_summary(const Op& op, const Entry<T>& finisher, const Problem<T>& p, Eigen::Index b, Eigen::Index e,
                               const Options& o) {
  using Serial = typename Op::Serial;
  if constexpr (requires(Serial st) { segment_from_state(op, std::move(st), p, T(1)); }) {
    if (b >= e) return op.identity(p.d(), p.dv());
    const Problem<T> block = slice_rows(p, b, e);
    // Only the state is kept: no normalization (a local normalizer from the zero state may vanish where
    // the true one, with the carry, does not).
    Options unnormalized = o;
    unnormalized.normalized = false;
    unnormalized.eps = 0;
    const Run<T> r = finisher(block, unnormalized, nullptr);
    return segment_from_state(op, load_state<Serial>(&r.state, p.d(), p.dv()), block, from_rational<T>(o.gamma));
  } else {
    return block_summary(op, p, b, e, o.chunk, o.threads);
  }
}

// Where the block of rank r of P starts.
inline Eigen::Index block_begin(Eigen::Index n, int r, int P) { return n * r / P; }

template <class T, class Op>
Run<T> sequence_parallel(const Op& op, const Entry<T>& finisher, const Problem<T>& p, const Options& o,
                         const NamedState<T>* init, CrossScan how) {
  using Seg = typename Op::Seg;
  using Serial = typename Op::Serial;
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  PhaseStats& stats = last_phase_stats();
  stats = {};
  const MPI_Comm c = sequence_comm();
  const int P = comm_size(c), me = comm_rank(c);
  if (P == 1) {
    const auto t0 = clock::now();
    Run<T> r = finisher(p, o, init);
    stats.finish_seconds = since(t0);
    return r;
  }
  const Eigen::Index n = p.n(), b = block_begin(n, me, P), e = block_begin(n, me + 1, P);

  // Any failure on any rank is raised on every rank before the next collective (agree_on_errors).
  int error_kind = 0;
  std::string error_text;
  auto guarded = [&](auto&& step) {
    try {
      step();
    } catch (const InputError& err) {
      error_kind = 1, error_text = err.what();
    } catch (const NumericalError& err) {
      error_kind = 2, error_text = err.what();
    } catch (const std::exception& err) {
      error_kind = 3, error_text = err.what();
    }
    agree_on_errors(c, error_kind, error_text);
  };
  auto t0 = clock::now();
  Seg mine;
  guarded([&] {
    mine = local_summary(op, finisher, p, b, e, o);
    if (me == 0) mine = op.combine(scan::detail::initial_prefix(op, p, init), mine);
  });
  stats.local_seconds = since(t0);

  t0 = clock::now();
  std::optional<Seg> carry = exclusive_scan_ranks<T>(op, mine, c, how, stats);
  stats.scan_seconds = since(t0);

  t0 = clock::now();
  const NamedState<T> carried =
      me == 0 ? export_state<Serial, T>(load_state<Serial>(init, p.d(), p.dv())) : export_state<Serial, T>(carry->st);
  Run<T> part{Mat<T>(0, p.dv()), carried};
  guarded([&] {
    if (e > b) part = finisher(slice_rows(p, b, e), o, &carried);
  });
  stats.finish_seconds = since(t0);

  t0 = clock::now();
  ByteWriter w;
  put_matrix(w, part.O);
  const Bytes rows = w.take();
  stats.gather_bytes_sent += rows.size();
  Run<T> out{Mat<T>(n, p.dv()), {}};
  const std::vector<Bytes> blocks = all_gather(c, rows);
  for (int r = 0; r < P; ++r) {
    ByteReader rd(blocks[r]);
    const Mat<T> O = get_matrix<T>(rd);
    const Eigen::Index rb = block_begin(n, r, P);
    if (O.rows() != block_begin(n, r + 1, P) - rb || O.cols() != p.dv()) throw std::logic_error("rank block of the wrong shape");
    out.O.middleRows(rb, O.rows()) = O;
  }
  ByteWriter ws;
  if (me == P - 1) put_state(ws, part.state);
  Bytes state = ws.take();
  if (me == P - 1) stats.gather_bytes_sent += state.size() * static_cast<std::size_t>(P - 1);
  const Bytes final_state = broadcast(c, P - 1, std::move(state));
  ByteReader rs(final_state);
  out.state = get_state<T>(rs);
  stats.gather_seconds = since(t0);
  return out;
}

}  // namespace hla::distributed
