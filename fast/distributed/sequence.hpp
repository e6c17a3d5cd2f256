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
// Each rank's rows stay where they were computed (sequence_parallel_local, LocalRun: what a sequence-parallel
// training step uses; the final state on the last rank). Only the registry's forms, which keep the calling
// convention so that everything that iterates the registry (check, sweeps, claims) runs them, gather the
// rows and broadcast the final state afterwards (gather_run: its own phase, timed apart).
// A failure on one rank (a vanishing normalizer in its block) is raised on every rank.
// Without MPI, or with P = 1, only phase 3 runs, on the whole sequence.
//
// With per-token gates linear and ahla take the three phases above with their gated scan operator
// (fast/scan/gated.hpp: a segment carries ρ = Π γ_t over it where the fixed-γ one carries γ^len) and their gated
// chunked form (DistributedPlan::gated_finish_form): a block's ρ is the product of its own gates. hla2 keeps its
// one pass with gates (below): the fused pass takes the block's gates, and each block's ρ travels with its summary.
//
// hla2 passes each block once (hla2_fused_local): the local pass is the fused chunk loop itself, corrected
// by the scan's prefix instead of run again from it —
//   1. local   the block's S summary ΔS (one product over the block), gathered; every rank folds the
//              summaries before it into the S entering its block. Then the fused loop over the block from
//              that S and from zero C', m', C (rank 0: the initial state): U = S q is already final.
//   2. scan    the blocks' C', m', C gathered; every rank folds those before it into the ones entering it.
//   3. finish  the rows gain the carry of the entering C' (and C, with ridge) — one product over the block,
//              exact because the outputs are linear in C' and C given U — and are normalized.
// The scans gather the P summaries and fold them (P small states); CrossScan applies to the other operators.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "fast/chunked/hla2_fused.hpp"
#include "fast/distributed/exscan.hpp"
#include "fast/distributed/plan.hpp"
#include "fast/scan/gated.hpp"
#include "fast/scan/operators.hpp"

namespace hla::distributed {

// The summary of rows [b, e): up-sweep within chunks of width w, then across the chunk summaries.
template <class Op, class T> typename Op::Seg block_summary(const Op& op, const Problem<T>& p, Eigen::Index b,
                                                            Eigen::Index e, int chunk, int threads) {
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

// The segment of a block from its serial state (the chunked form's final state from zero) and its decay ρ (γ^len,
// or the product of its gates), for the operators whose segment-only parts have a closed form; no overload: the
// scan up-sweep is used.
template <class T, bool M> scan::Hla2Seg<T, M> segment_from_state(const scan::Hla2Op<T, M>&, fast::Hla2State<T, M> st,
                                                                  const Problem<T>&, const T& rho) {
  return {std::move(st), rho};
}
template <class T> scan::LinearSeg<T> segment_from_state(const scan::LinearOp<T>&, fast::LinearState<T> st,
                                                         const Problem<T>&, const T& rho) {
  return {std::move(st), rho};
}
template <class T> scan::AhlaSeg<T> segment_from_state(const scan::AhlaOp<T>& op, fast::AhlaState<T> st,
                                                       const Problem<T>& block, const T& rho) {
  if (op.variant() != scan::Variant::corrected) throw std::logic_error("the printed AHLA combine decays R");
  return {std::move(st), Mat<T>(block.K.transpose() * block.Q), rho};  // R = Σ k qᵀ, undecayed (gated too)
}

template <class Op, class T> typename Op::Seg local_summary(const Op& op, const Entry<T>& finisher, const Problem<T>& p,
                                                            Eigen::Index b, Eigen::Index e, const Options& o) {
  using Serial = typename Op::Serial;
  if constexpr (requires(Serial st) { segment_from_state(op, std::move(st), p, T(1)); }) {
    if (b >= e) return op.identity(p.d(), p.dv());
    const Problem<T> block = slice_rows(p, b, e);
    // Only the state is kept: no normalization (a local normalizer from the zero state may vanish where
    // the true one, with the carry, does not), and the state even when the caller asked for outputs only.
    Options unnormalized = o;
    unnormalized.normalized = false;
    unnormalized.eps = 0;
    unnormalized.state = true;
    const Run<T> r = finisher(block, unnormalized, nullptr);
    return segment_from_state(op, load_state<Serial>(&r.state, p.d(), p.dv()), block,
                              fast::chunked::segment_decay(block.gates, from_rational<T>(o.gamma), 0, block.n()));
  } else {
    return block_summary(op, p, b, e, o.chunk, o.threads);
  }
}

// Where the block of rank r of P starts.
inline Eigen::Index block_begin(Eigen::Index n, int r, int P) { return n * r / P; }

// A rank's part of a sequence-parallel run: its rows [begin, begin + O.rows()) of the outputs, and the final
// state (on the last rank; empty elsewhere).
template <class T> struct LocalRun {
  Eigen::Index begin = 0;
  Mat<T> O;
  NamedState<T> state;
};

// Runs a step of a sequence-parallel form and raises any failure on any rank on every rank, before the next
// collective (agree_on_errors): no rank is left waiting for a peer that gave up.
class Guarded {
 public:
  explicit Guarded(MPI_Comm c) : c_(c) {}
  template <class Step> void operator()(Step&& step) {
    try {
      step();
    } catch (const InputError& err) { kind_ = 1, text_ = err.what(); } catch (const NumericalError& err) {
      kind_ = 2, text_ = err.what();
    } catch (const std::exception& err) { kind_ = 3, text_ = err.what(); }
    agree_on_errors(c_, kind_, text_);
  }

 private:
  MPI_Comm c_;
  int kind_ = 0;
  std::string text_;
};

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The start of every sequence-parallel run: fresh phase stats; on one rank, the whole sequence by `whole()`
// (timed as the finishing phase) and nothing else (no MPI call: MPI may not even be initialized).
template <class T, class Whole> std::optional<LocalRun<T>> run_alone(Whole&& whole) {
  PhaseStats& stats = last_phase_stats();
  stats = {};
  if (comm_size(sequence_comm()) > 1) return std::nullopt;
  const auto t0 = Clock::now();
  Run<T> r = whole();
  stats.finish_seconds = seconds_since(t0);
  return LocalRun<T>{0, std::move(r.O), std::move(r.state)};
}

template <class T> Bytes encode_matrices(std::initializer_list<const Mat<T>*> ms) {
  ByteWriter w;
  for (const Mat<T>* m : ms) put_matrix(w, *m);
  return w.take();
}

// hla2 over the ranks with one pass per block (header comment): the fused form's pieces
// (fast/chunked/hla2_fused.hpp) — its block summary, its chunk loop, the scan step joining blocks, the
// carry a block started from zero is missing — with the ranks as the blocks (and each rank's threads as
// blocks within). C and m are carried (the block's pass augmented) so that the last rank has the true
// state entering it for the final state.
template <class T> LocalRun<T> hla2_fused_local(const Problem<T>& p, const Options& o, const NamedState<T>* init) {
  using Carried = fast::chunked::fused_detail::Carried<T>;
  namespace fd = fast::chunked::fused_detail;
  if (auto alone = run_alone<T>([&] { return fast::chunked::hla2_chunked_fused<T>(p, o, init); }))
    return std::move(*alone);
  PhaseStats& stats = last_phase_stats();
  const MPI_Comm c = sequence_comm();
  const int P = comm_size(c), me = comm_rank(c);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv(), b = block_begin(n, me, P), e = block_begin(n, me + 1, P);
  const T gamma = from_rational<T>(o.gamma);
  Guarded guarded(c);
  LocalRun<T> out{b, Mat<T>(0, dv), {}};
  std::optional<fast::chunked::FusedPass<T>> pass;
  std::optional<fast::chunked::Hla2UStart<T>> start;
  // What an empty block (P > n) contributes: nothing.
  const Carried nothing{Mat<T>::Zero(d, d), Mat<T>::Zero(dv + 1, d), Mat<T>(0, 1), Mat<T>::Zero(dv + 1, d)};

  // 1. local: ΔS, the S entering this block, the chunk loop from it.
  auto t0 = Clock::now();
  Mat<T> dS = nothing.S, rho = Mat<T>::Constant(1, 1, T(1));  // rho: what the block does to a carried state
  guarded([&] {
    start.emplace(init, d, dv);
    // The block's rows read in place (a rank of a real run holds only these), with its own gates, if any.
    if (e > b) pass.emplace(p, o, /*augment=*/true, b, e - b);
    if (pass && me + 1 < P) dS = pass->s_summary(0, e - b);
    if (pass) rho(0, 0) = pass->block_factor(0, e - b);  // γ^len, or the product of the block's gates
  });
  const std::vector<Bytes> summaries = all_gather(c, encode_matrices<T>({&dS, &rho}));
  stats.scan_bytes_sent += summaries[me].size();
  std::vector<T> rhos(P);  // every block's ρ
  Carried X = nothing;
  X.S = start->S;
  for (int r = 0; r < P; ++r) {
    ByteReader rd(summaries[r]);
    const Mat<T> dS_r = get_matrix<T>(rd);
    rhos[r] = get_matrix<T>(rd)(0, 0);
    if (r < me) X.S = fd::s_after(X.S, dS_r, rhos[r]);
  }
  if (me == 0) {  // the initial state's C' and C (with m', m in their last columns: the pass is augmented)
    X.CpT = start->Cp.transpose();
    X.CT = start->C.transpose();
  }
  std::atomic<Eigen::Index> zero_den{e - b};
  Mat<T> Y;
  guarded([&] {
    if (pass) Y = fast::chunked::fused_blocks(*pass, X, o.threads, me == 0, zero_den);
  });
  stats.local_seconds = seconds_since(t0);

  // 2. scan: every rank's C', C (m, m' in their last rows) after its block; the ones entering this block.
  t0 = Clock::now();
  const std::vector<Bytes> carried = all_gather(c, encode_matrices<T>({&X.CpT, &X.CT}));
  stats.scan_bytes_sent += carried[me].size();
  ++stats.scan_steps;
  Carried entering = nothing;
  for (int r = 0; r < me; ++r) {
    ByteReader rd(carried[r]);
    Carried after = nothing;
    after.CpT = get_matrix<T>(rd);
    after.CT = get_matrix<T>(rd);
    if (r > 0) fd::join_after(after, entering, rhos[r]);
    entering = std::move(after);
  }
  stats.scan_seconds = seconds_since(t0);

  // 3. finish: the carry of the entering C', C; the final state on the last rank.
  t0 = Clock::now();
  guarded([&] {
    if (!pass) return;
    if (me > 0) {
      pass->add_entering_carry(0, 0, e - b, entering, Y, true, zero_den);
      fd::join_after(X, entering, rhos[me]);
    }
    out.O = pass->outputs(std::move(Y), b, zero_den);
  });
  if (me == P - 1 && o.state) {  // without (Options::state) the pass carried no C
    if (me > 0 && !pass) {       // an empty last block: the state is the one entering it
      X.CpT = entering.CpT;
      X.CT = entering.CT;
    }
    const Mat<T> Cp_full = X.CpT.transpose(), C_full = X.CT.transpose();
    out.state = fast::chunked::hla2_u_final_state<T>(p.Q.middleRows(b, e - b), p.V.middleRows(b, e - b), X.S, start->C,
                                                     &C_full, Cp_full, gamma, o.threads);
  }
  stats.finish_seconds = seconds_since(t0);
  return out;
}

template <class T, class Op> LocalRun<T> sequence_parallel_local(const Op& op, const Entry<T>& finisher,
                                                                 const Problem<T>& p, const Options& o,
                                                                 const NamedState<T>* init, CrossScan how) {
  using Seg = typename Op::Seg;
  using Serial = typename Op::Serial;
  if (auto alone = run_alone<T>([&] { return finisher(p, o, init); })) return std::move(*alone);
  PhaseStats& stats = last_phase_stats();
  const MPI_Comm c = sequence_comm();
  const int P = comm_size(c), me = comm_rank(c);
  const Eigen::Index n = p.n(), b = block_begin(n, me, P), e = block_begin(n, me + 1, P);
  Guarded guarded(c);  // any failure on any rank is raised on every rank before the next collective

  auto t0 = Clock::now();
  Seg mine;
  guarded([&] {
    mine = local_summary(op, finisher, p, b, e, o);
    if (me == 0) mine = op.combine(scan::detail::initial_prefix(op, p, init), mine);
  });
  stats.local_seconds = seconds_since(t0);

  t0 = Clock::now();
  std::optional<Seg> carry = exclusive_scan_ranks<T>(op, mine, c, how, stats);
  stats.scan_seconds = seconds_since(t0);

  t0 = Clock::now();
  const NamedState<T> carried =
      me == 0 ? export_state<Serial, T>(load_state<Serial>(init, p.d(), p.dv())) : export_state<Serial, T>(carry->st);
  Run<T> part{Mat<T>(0, p.dv()), carried};
  guarded([&] {
    if (e > b) part = finisher(slice_rows(p, b, e), o, &carried);
  });
  stats.finish_seconds = seconds_since(t0);
  return {b, std::move(part.O), me == P - 1 ? std::move(part.state) : NamedState<T>{}};
}

// linear passes each block once (plan.corrected_once): its chunked form from the zero state, unnormalized over [V 1]
// when normalized (the numerators and the normalizer's column), whose final state and ρ are the block's segment; the
// exclusive scan across ranks gives the state (S_E, z_E) entering the block (rank 0: the initial state); every row
// then gains the carry Γ(b+i, b−1) q_iᵀ [S_E z_E] — exact, since the outputs are linear in the entering state — and
// is normalized. One product over the block in place of the two-pass path's second chunked pass.
template <class T, class Op> LocalRun<T> linear_corrected_local(const Op& op, const Entry<T>& chunked,
                                                                const Problem<T>& p, const Options& o,
                                                                const NamedState<T>* init, CrossScan how) {
  using Seg = typename Op::Seg;
  using Serial = typename Op::Serial;  // fast::LinearState: S (d × dv), z (d × 1)
  if (auto alone = run_alone<T>([&] { return chunked(p, o, init); })) return std::move(*alone);
  PhaseStats& stats = last_phase_stats();
  const MPI_Comm c = sequence_comm();
  const int P = comm_size(c), me = comm_rank(c);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv(), b = block_begin(n, me, P), e = block_begin(n, me + 1, P);
  const bool norm = o.normalized;
  const Eigen::Index va = norm ? dv + 1 : dv;
  Guarded guarded(c);

  // 1. local: the block's pass from zero; its state and ρ are its segment.
  auto t0 = Clock::now();
  Problem<T> block;
  Mat<T> Y(0, va);
  Seg local = op.identity(d, dv), mine;
  guarded([&] {
    if (e > b) {
      block = slice_rows(p, b, e);
      if (norm) {
        block.V.conservativeResize(Eigen::NoChange, va);
        block.V.col(dv).setOnes();
      }
      Options unnormalized = o;
      unnormalized.normalized = false;
      unnormalized.eps = 0;
      unnormalized.state = true;  // the block's state is its segment, outputs only or not
      Run<T> r = chunked(block, unnormalized, nullptr);
      Y = std::move(r.O);
      Serial st = load_state<Serial>(&r.state, d, va);
      local = {Serial{Mat<T>(st.S.leftCols(dv)), std::move(st.z)},
               fast::chunked::segment_decay(block.gates, from_rational<T>(o.gamma), 0, e - b)};
    }
    mine = me == 0 ? op.combine(scan::detail::initial_prefix(op, p, init), local) : local;
  });
  stats.local_seconds = seconds_since(t0);

  // 2. scan: the state entering this block.
  t0 = Clock::now();
  std::optional<Seg> carry = exclusive_scan_ranks<T>(op, mine, c, how, stats);
  stats.scan_seconds = seconds_since(t0);

  // 3. finish: each row's carry, then its normalization; the final state on the last rank.
  t0 = Clock::now();
  LocalRun<T> out{b, Mat<T>(0, dv), {}};
  guarded([&] {
    const Serial entering = me == 0 ? load_state<Serial>(init, d, dv) : carry->st;
    if (e > b && (me > 0 || init)) {
      Mat<T> M(d, va);
      M.leftCols(dv) = entering.S;
      if (norm) M.col(dv) = entering.z;
      const T gamma = from_rational<T>(o.gamma);
      const bool gated = block.gates.size() != 0, decays = gated || gamma != T(1);
      const ColVec<T> x = gated    ? fast::chunked::fused_detail::gate_products(block.gates, 0, e - b, true)
                          : decays ? fast::chunked::fused_detail::powers(gamma, e - b, 1)
                                   : ColVec<T>();  // x_i = Γ(b+i, b−1)
      fast::chunked::fused_detail::add_carry_rows<T>(Y.middleRows(0, e - b), block.Q, M,
                                                     [&](Eigen::Index i) -> std::optional<T> {
                                                       if (decays) return x(i);
                                                       return std::nullopt;
                                                     });
    }
    if (norm) {
      const T eps = from_rational<T>(o.eps);
      for (Eigen::Index t = 0; t < Y.rows(); ++t) divide_by_normalizer(Y.row(t).head(dv), T(Y(t, dv) + eps), b + t);
      Y.conservativeResize(Eigen::NoChange, dv);
    }
    out.O = std::move(Y);
    if (me == P - 1) out.state = export_state<Serial, T>(op.combine(op.prefix(entering), local).st);
  });
  stats.finish_seconds = seconds_since(t0);
  return out;
}

// The rank's part of the sequence-parallel form of plan.op: hla2 and linear pass each block once; the others run the
// block summary, the cross-rank scan `how`, and the finishing form from the carried state. With gates, every
// operator takes the latter with its gated scan operator and gated chunked form.
template <class T> LocalRun<T> run_local(const DistributedPlan& plan, CrossScan how, const Problem<T>& p,
                                         const Options& o, const NamedState<T>* s) {
  if (plan.one_pass) return hla2_fused_local<T>(p, o, s);  // gated too: the fused pass takes the block's gates
  const bool gated = p.gates.size() != 0;
  const Entry<T>& finisher = gated ? registry<T>().find(plan.op, plan.gated_finish_form, plan.gated_finish_variant)
                                   : registry<T>().find(plan.op, plan.finish_form, plan.finish_variant);
  const auto local = [&](const auto& op) {
    if constexpr (std::is_same_v<typename std::decay_t<decltype(op)>::Serial, fast::LinearState<T>>)
      if (plan.corrected_once) return linear_corrected_local(op, finisher, p, o, s, how);
    return sequence_parallel_local(op, finisher, p, o, s, how);
  };
  if (gated) return scan::with_gated_scan_op<T>(plan.op, o, p.gates, local);
  return scan::with_scan_op<T>(plan.op, plan.scan_variant, o, local);
}

// Compiled once per scalar, in generated/register_distributed_<scalar>.cpp (the kind's hook below and
// CMakeLists.txt); `hla mpi-bench`, which times the phases, calls the same instantiation instead of its own.
#define HLA_RUN_LOCAL(EXTERN, T)                                                                                 \
  EXTERN template LocalRun<T> run_local<T>(const DistributedPlan&, CrossScan, const Problem<T>&, const Options&, \
                                           const NamedState<T>*);
HLA_RUN_LOCAL(extern, rational)
HLA_RUN_LOCAL(extern, fp61)
HLA_RUN_LOCAL(extern, mpfr256)
HLA_RUN_LOCAL(extern, double)
HLA_RUN_LOCAL(extern, float)

// Every rank's rows and the last rank's final state, on every rank: the whole Run (the gather phase).
template <class T> Run<T> gather_run(LocalRun<T>&& mine, Eigen::Index n, Eigen::Index dv) {
  const MPI_Comm c = sequence_comm();
  const int P = comm_size(c), me = comm_rank(c);
  PhaseStats& stats = last_phase_stats();
  if (P == 1) return {std::move(mine.O), std::move(mine.state)};
  const auto t0 = Clock::now();
  ByteWriter w;
  put_matrix(w, mine.O);
  const Bytes rows = w.take();
  stats.gather_bytes_sent += rows.size();
  Run<T> out{Mat<T>(n, dv), {}};
  const std::vector<Bytes> blocks = all_gather(c, rows);
  for (int r = 0; r < P; ++r) {
    ByteReader rd(blocks[r]);
    const Mat<T> O = get_matrix<T>(rd);
    const Eigen::Index rb = block_begin(n, r, P);
    if (O.rows() != block_begin(n, r + 1, P) - rb || O.cols() != dv)
      throw std::logic_error("rank block of the wrong shape");
    out.O.middleRows(rb, O.rows()) = O;
  }
  ByteWriter ws;
  if (me == P - 1) put_state(ws, mine.state);
  Bytes state = ws.take();
  if (me == P - 1) stats.gather_bytes_sent += state.size() * static_cast<std::size_t>(P - 1);
  const Bytes final_state = broadcast(c, P - 1, std::move(state));
  ByteReader rs(final_state);
  out.state = get_state<T>(rs);
  stats.gather_seconds = seconds_since(t0);
  return out;
}

}  // namespace hla::distributed
