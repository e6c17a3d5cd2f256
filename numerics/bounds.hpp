// Rounding-error bounds for an operator's outputs, shared by the sweeps (experiments/lib/sweep_run.cpp)
// and `hla verify` (verify/): one statement of what "within rounding error" means.
//
// Why the bound holds (Higham, Accuracy and Stability of Numerical Algorithms, Lemma 3.1 and §3.5): a
// program of +, −, × computes a sum of monomial terms, each carrying at most h factors (1 + δ), |δ| ≤ u, so
//   |computed − exact| ≤ γ_h · Σ|terms|,   γ_h = h u / (1 − h u).
// Every form of an operator (serial, scan, chunked) adds up terms of the *unmasked* operator's expansion
// (hla2's S_t C_t − G_t cancels the pairs the mask removes), so Σ|terms| ≤ the unmasked operator evaluated
// on |Q|, |K|, |V| — the "abs operator" below, A. We use 2·A for the two sides of a cancellation.
// Normalized outputs o = num/(den + ε) add the division's perturbation (one more rounding, and the
// denominator's own error over its distance from 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "core/operators.hpp"
#include "core/products.hpp"
#include "core/types.hpp"
#include "fast/cuda/device.hpp"

namespace hla::bounds {

// 1, 2 or 3: how many nested prefix sums the operator's streaming form keeps (core/operators.hpp).
inline int order_of(const std::string& op) { return operator_info(op).order; }

// The operator whose value on |inputs| bounds the absolute sum of the monomials any form of `op` adds.
inline std::string abs_operator(const std::string& op) {
  return std::string(operator_info(operator_info(op).abs_operator).name);
}

// Q, K and [V 1] (optionally all in absolute value): one unnormalized evaluation gives the numerator in
// the first dv columns and the denominator den_t in the last, so every (normalized, ε) reuses it.
inline Problem<double> augmented(const Problem<double>& p, bool absolute) {
  Problem<double> a;
  a.Q = absolute ? Mat<double>(p.Q.cwiseAbs()) : p.Q;
  a.K = absolute ? Mat<double>(p.K.cwiseAbs()) : p.K;
  a.V.resize(p.V.rows(), p.V.cols() + 1);
  a.V.leftCols(p.V.cols()) = absolute ? Mat<double>(p.V.cwiseAbs()) : p.V;
  a.V.col(p.V.cols()).setOnes();
  a.gates = p.gates;  // gates are positive: the absolute computation decays by the same Γ
  return a;
}

// Accumulation depth over tokens of one prefix sum (SPEC "Facts"): serial n − 1 (we use n), tree/Blelloch
// 2⌈log₂ n⌉, chunked/two-level w + ⌈n/w⌉. An unknown algorithm (an outside implementation) gets the
// serial depth, the largest of them.
inline long accumulation_depth(const std::string& form, long n, long w) {
  if (form.rfind("cuda-fused", 0) == 0) w = fast::cuda::kFusedChunk;  // its chunk width is its own
  if (form.rfind("scan-blelloch", 0) == 0 || form.rfind("scan-tree", 0) == 0)
    return 2 * std::max<long>(1, static_cast<long>(std::ceil(std::log2(static_cast<double>(n)))));
  if (form.rfind("mpi-", 0) == 0)
    return w + (n + w - 1) / w + 4 * std::max<long>(1, static_cast<long>(std::ceil(std::log2(static_cast<double>(n)))));
  if (form.rfind("scan-twolevel", 0) == 0 || form.rfind("chunked", 0) == 0 || form.rfind("cuda-", 0) == 0)
    return w + (n + w - 1) / w;
  return n;
}

// h of γ_h: p nested prefix sums (p = order), each with depth `acc`; with decay each step also multiplies
// by γ (one more rounding per level), and a γ the arithmetic cannot represent (or computes through exp/log)
// adds up to n relative perturbations (γ̂^n); (p+1)·d for the inner products and read-out, +8 for the rest.
inline long rounding_depth(const std::string& op, long acc, bool decays, bool gamma_inexact, long n, long d) {
  long per_level = acc;
  if (decays) per_level += acc;
  if (gamma_inexact) per_level += n;
  return order_of(op) * per_level + (order_of(op) + 1) * d + 8;
}

// The extra roundings of gate factors computed in the log domain (fast/chunked/gated.hpp, GateFactors::log_stable),
// per prefix-sum level, for n tokens in chunks of w with log mass Λ = Σ_t |log γ_t|. Within a chunk
// L_a = Σ_{r≤a} log γ_r (log within 1 ulp = 2u relative, the sum within γ_w of the chunk's Λ_k), one rounding for
// the difference L_a − L_b, exp within 1 ulp: each factor exp(L_a − L_b) is exact × e^δ (1 + 2u), |δ| ≤ (2w+5) u Λ_k,
// i.e. at most (2w + 5) Λ_k + 2 roundings (1% slack for the (1 + u) powers). A mask entry computed as the product
// exp(L_a) · exp(−L_b) (ChunkGates::decay_mask, in chunks whose mass allows) has δ within the two L's errors, no
// difference rounded, and (1 + 2u)² (1 + u): at most (2w + 5) Λ_k + 5 roundings, the count used for every factor.
// A term of one level passes through at most one factor per chunk it spans (F or the factor to the chunk's end, one
// whole-chunk factor per chunk between, the factor from the chunk's start): (2w + 5) Λ + 5 (⌈n/w⌉ + 2) in all.
// Squared factors (hla2's Γ² on C') double that and round once more; the count below is the squared one, for every
// operator.
inline long log_gate_depth(long n, long w, double log_mass) {
  const long chunks = (n + w - 1) / w;
  return 2 * (static_cast<long>(std::ceil(1.01 * static_cast<double>(2 * w + 5) * log_mass)) + 5 * (chunks + 2) + 1);
}

// The log mass Λ = Σ_t |log γ_t| of a problem's gates (0 without gates): how strong they are in all, the quantity
// log_gate_depth's count grows with.
inline double log_mass(const ColVec<double>& gates) {
  double m = 0;
  for (Eigen::Index t = 0; t < gates.size(); ++t) m += std::fabs(std::log(gates(t)));
  return m;
}

// The roundings per prefix-sum level that a gated form's gate factors add beyond one per decay step
// (rounding_depth's `decays`), for n tokens in chunks of w:
//   chunked          log-domain factors within each chunk: log_gate_depth
//   chunked-fused    those, plus running products of gates across its blocks (fast/chunked/hla2_fused.hpp: each
//   mpi-*            block's ρ, the weights from a block's start and to its end, each a product of at most n gates,
//                    one rounding each): a term passes through the ρ of every block between its source and its
//                    output and one weight at each end, at most 2n gates, squared for C' (2·2n + 2). The MPI forms
//                    are hla2's fused pass over ranks, or finish with the chunked form: at most that.
//   cuda-chunked*    the GPU forms (fast/cuda/pass.cu; cuda-fused* at their own chunk width): within-chunk log-gates
//   cuda-fused*      in double, each factor rounded once to the scalar; counted as the chunked form's (more than
//                    enough in float, the same in double)
//   anything else    0 (serial, decode and the scans multiply by each gate once per step; exact gate products)
inline long gate_factor_depth(const std::string& form, long n, long w, double log_mass) {
  if (form == "chunked-fused" || form.rfind("mpi-", 0) == 0) return log_gate_depth(n, w, log_mass) + 4 * n + 2;
  if (form == "chunked" || form.rfind("cuda-chunked", 0) == 0) return log_gate_depth(n, w, log_mass);
  if (form.rfind("cuda-fused", 0) == 0) return log_gate_depth(n, fast::cuda::kFusedChunk, log_mass);
  return 0;
}

// γ_h = h u / (1 − h u) (Higham's Lemma 3.1), +∞ when h u ≥ 1/2 (the arithmetic has too few bits for h).
inline double gamma_h(long h, double u) {
  const double hu = static_cast<double>(h) * u;
  return hu >= 0.5 ? INFINITY : hu / (1 - hu);
}

// Roundings per term when the inputs and the operands of every matrix product are rounded to a narrower
// format than the accumulation (a bf16/TF32/fp16 kernel accumulating in fp32): each term of the expansion
// is a product of `factors` inputs (linear q·k·v: 3; second order: 5; third order: 7), each rounded once on
// input and at most once more as part of an intermediate operand — twice the factors.
inline long operand_roundings(const std::string& op) { return 2 * (2 * order_of(op) + 1); }

// γ per term of a form with h roundings in its own arithmetic (unit roundoff u) whose matrix products round their
// operands to a narrower format (Caps::products, core/products.hpp; u_op = 0: none): each term passes through at
// most operand_roundings(op) such roundings (the GPU forms count theirs in fast/cuda/pass.cu: 8 for second order, 4
// for linear), and a tensor core's fp32 accumulation may truncate rather than round, so its h roundings count
// twice u. (1 + γ_h)(1 + γ_op) − 1.
inline double mixed_gamma(long h, double u, const std::string& op, double u_op) {
  if (u_op == 0) return gamma_h(h, u);
  const double ga = gamma_h(h, 2 * u), gb = gamma_h(operand_roundings(op), u_op);
  return ga + gb + ga * gb;
}

// Per-entry bounds on |computed − exact| for outputs R (exact or MPFR, n × dv), given the abs operator's
// values A (n × (dv+1): numerator columns, then the denominator column) and, when normalized, the exact
// denominators den_t + ε. A row whose denominator lies within its own error bound of 0 gets +∞ (nothing
// bounds a division by a possibly vanishing number); `vacuous_rows` counts them.
// For a given γ (a sum of γ_h's when the arithmetic mixes formats, see operand_roundings): u is the roundoff
// of the final division, u_out that of the output's own rounding to a narrower format (0: none).
template <class R> Mat<double> output_bounds_for(const Mat<R>& out, const Mat<double>& A, bool normalized,
                                                 const ColVec<R>& den_plus_eps, double eps, double u, double gam,
                                                 double u_out, long* vacuous_rows = nullptr) {
  const Eigen::Index n = out.rows(), dv = out.cols();
  Mat<double> B = Mat<double>::Constant(n, dv, INFINITY);
  if (vacuous_rows) *vacuous_rows = 0;
  if (!std::isfinite(gam)) return B;  // vacuous: the arithmetic has too few bits for this depth
  for (Eigen::Index t = 0; t < n; ++t) {
    double lower = 1, dd = 0;
    if (normalized) {
      const double D = std::fabs(static_cast<double>(den_plus_eps(t)));
      dd = gam * 2 * A(t, dv) + 2 * u * eps;
      lower = D - dd;
      if (lower <= 0) {
        if (vacuous_rows) ++*vacuous_rows;
        continue;
      }
    }
    for (Eigen::Index c = 0; c < dv; ++c) {
      const double rv = std::fabs(static_cast<double>(out(t, c)));
      double b = gam * 2 * A(t, c);
      if (normalized) b = (b + rv * dd) / lower * (1 + u) + u * rv;
      B(t, c) = b + u_out * (rv + b);
    }
  }
  return B;
}

// The single-format bound: γ_h at the arithmetic's own u.
template <class R> Mat<double> output_bounds(const Mat<R>& out, const Mat<double>& A, bool normalized,
                                             const ColVec<R>& den_plus_eps, double eps, double u, long h,
                                             long* vacuous_rows = nullptr) {
  return output_bounds_for(out, A, normalized, den_plus_eps, eps, u, gamma_h(h, u), 0.0, vacuous_rows);
}

}  // namespace hla::bounds
