// Decoding kernels: the serial recurrences of hla2 (masked), AHLA (Alg. 2) and linear attention, laid
// out for the cache. Same algebra, same state (Hla2State, AhlaState, LinearState: load_state /
// export_state, so a sequence split and carried across gives the same outputs) and same scalar-generic
// code path as fast/serial/{hla2,ahla,linear}.hpp, so the exact-rational tests hold them too. What
// changes is where the numbers live:
//
//   - Inputs are consumed a block of B tokens at a time: the block's rows of the column-major n×d Q, K
//     (n×dv V) are copied into small feature-major buffers (column j = token j, contiguous), and the
//     block's outputs are collected the same way and written to O in one block copy. The serial forms
//     read row t of an n×d column-major matrix, which touches d cache lines n·sizeof(T) bytes apart for
//     every token; that is what made their per-token time grow with n (see cost.*.per-token).
//   - The d×dv state matrices are kept augmented with their d-vector and transposed: [C m]ᵀ and [G h]ᵀ
//     ((dv+1)×d, column i = row i of [C m]), [P m]ᵀ and [E n]ᵀ for AHLA, [S z]ᵀ for linear. A value is
//     augmented to [v; 1], so the d-vector (normalizer) rides along every update and every read-out, and
//     the last entry of an output column is its denominator. Every per-token update is a pass of
//     contiguous axpys over the columns (columns_pass), with the decay and the read-outs that need the
//     old or the new column (k_tᵀ[C m]_{t−1}, q_tᵀ[G h]_t, ...) fused into the same pass.
//   - All scratch (the token block buffers, k_tᵀ[C m], u = S_tᵀq_t, r_t) is allocated once per call;
//     nothing is allocated per token.
//
// hla2 takes the decay rule of fast/serial/hla2.hpp (registered: the corrected one, which computes
// SPEC's decayed operator) and optionally stores S packed (§5.2: the upper triangle, PackedSymmetric).
//
// Per-token gates (Problem::gates, docs/operators.md "Gated decay"): the same kernels, each token decayed by its
// own γ_t (dec.gate(γ_t) before the token's step) — the gated serial forms of fast/serial/gated.hpp, re-laid out.
// A fixed γ is the case where the decoder keeps the γ (and hla2's γ², γ) it was built with for every token.
#pragma once

#include <algorithm>
#include <type_traits>

#include "fast/serial/ahla.hpp"
#include "fast/serial/hla2.hpp"
#include "fast/serial/hla2_variants.hpp"
#include "fast/serial/linear.hpp"

namespace hla::fast {

// Tokens per block: each input column contributes B·sizeof(T) contiguous bytes (8 cache lines of doubles)
// per block, and the d×B buffers stay in L1/L2. Blocks of 16, 64 and 256 tokens timed alike on the
// (shared, noisy) machine; 1 token per block is the row-by-row read again.
inline constexpr Eigen::Index kDecodeBlock = 64;

// X = [A a]ᵀ: (cols(A)+1)×rows(A), column i = row i of A followed by a(i). And back.
template <class T> Mat<T> augmented_transpose(const Mat<T>& A, const Mat<T>& a) {
  Mat<T> X(A.cols() + 1, A.rows());
  X.topRows(A.cols()) = A.transpose();
  X.row(A.cols()) = a.col(0).transpose();
  return X;
}
template <class T> void split_augmented(const Mat<T>& X, Mat<T>& A, Mat<T>& a) {
  A = X.topRows(X.rows() - 1).transpose();
  a = X.row(X.rows() - 1).transpose();
}

// The column loops below read and write distinct columns and accumulators; GCC cannot see that through
// the local pointers (it would version every loop with run-time alias checks), so say it.
#if defined(__GNUC__) && !defined(__clang__)
#define HLA_NO_ALIAS _Pragma("GCC ivdep")
#else
#define HLA_NO_ALIAS
#endif

template <class T> using Same = std::type_identity_t<T>;  // not deduced: T comes from the matrix alone

// The one inner loop of the decoding kernels, over every column Y_i (contiguous, length w) of Y:
//   before += cb_i · Y_i;   Y_i ← keep·Y_i + a_i·x (keep = 1: no multiply);   after += ca_i · Y_i
// (the accumulators only when Before / After; a, cb, ca: d coefficients each). Four columns share one pass
// over j, so the accumulators are loaded and stored once per four columns. Plain loops over raw pointers:
// vectorized for float/double without per-column expression overhead, and still generic (rationals, the
// prime field, MPFR).
template <bool Decays, bool Before, bool After, class T>
void columns_pass(Mat<T>& Y, const Same<T>* __restrict x, const Same<T>& keep, const Same<T>* a,
                  Same<T>* __restrict before, const Same<T>* cb, Same<T>* __restrict after, const Same<T>* ca) {
  const Eigen::Index w = Y.rows(), d = Y.cols();
  const T g = keep;  // by value: a reference could alias the stores, which stops vectorization
  Eigen::Index i = 0;
  for (; i + 4 <= d; i += 4) {
    T* __restrict y0 = Y.col(i).data();
    T* __restrict y1 = Y.col(i + 1).data();
    T* __restrict y2 = Y.col(i + 2).data();
    T* __restrict y3 = Y.col(i + 3).data();
    const T a0 = a[i], a1 = a[i + 1], a2 = a[i + 2], a3 = a[i + 3];
    const T b0 = Before ? cb[i] : T(0), b1 = Before ? cb[i + 1] : T(0), b2 = Before ? cb[i + 2] : T(0),
            b3 = Before ? cb[i + 3] : T(0);
    const T c0 = After ? ca[i] : T(0), c1 = After ? ca[i + 1] : T(0), c2 = After ? ca[i + 2] : T(0),
            c3 = After ? ca[i + 3] : T(0);
    HLA_NO_ALIAS for (Eigen::Index j = 0; j < w; ++j) {
      if constexpr (Before) before[j] += b0 * y0[j] + b1 * y1[j] + b2 * y2[j] + b3 * y3[j];
      if constexpr (Decays) {
        y0[j] = g * y0[j] + a0 * x[j];
        y1[j] = g * y1[j] + a1 * x[j];
        y2[j] = g * y2[j] + a2 * x[j];
        y3[j] = g * y3[j] + a3 * x[j];
      } else {
        y0[j] += a0 * x[j];
        y1[j] += a1 * x[j];
        y2[j] += a2 * x[j];
        y3[j] += a3 * x[j];
      }
      if constexpr (After) after[j] += c0 * y0[j] + c1 * y1[j] + c2 * y2[j] + c3 * y3[j];
    }
  }
  for (; i < d; ++i) {
    T* __restrict y = Y.col(i).data();
    const T ai = a[i], bi = Before ? cb[i] : T(0), ci = After ? ca[i] : T(0);
    HLA_NO_ALIAS for (Eigen::Index j = 0; j < w; ++j) {
      if constexpr (Before) before[j] += bi * y[j];
      if constexpr (Decays)
        y[j] = g * y[j] + ai * x[j];
      else
        y[j] += ai * x[j];
      if constexpr (After) after[j] += ci * y[j];
    }
  }
}

// Rows t0..t0+b−1 of a column-major n×c input into the first b columns of a c×B buffer, reading each
// input column's b entries contiguously (whole cache lines, one stream at a time). The transposed copy
// in the destination's order would read row by row: c entries n·sizeof(T) bytes apart per token, which for
// a power-of-two n all map to one L1 set (cachegrind: every one of the d + d + dv reads per token missed
// L1, in the serial forms and in a first version of this loop alike).
template <class T, class Buf> void load_block(const Mat<T>& X, Eigen::Index t0, Eigen::Index b, Buf& buf) {
  for (Eigen::Index i = 0; i < X.cols(); ++i) buf.row(i).head(b) = X.col(i).segment(t0, b).transpose();
}

// The token loop shared by every decoding kernel. `dec.step<Decays>(q, k, va, out)` advances the state by
// one token (q, k: d-columns; va = [v; 1]) and writes out = [numerator; denominator] ((dv+1)-column); the
// loop divides by den + ε when normalized and writes the outputs to O a block at a time. With gates, the
// token's γ_t is handed to the decoder first (`dec.gate(γ_t)`), in the same loop: a test of a pointer per
// token, nothing else, on the ungated path, and constant gates run exactly the fixed-γ arithmetic.
template <bool Decays, class T, class Decoder>
Mat<T> decode_tokens(const Problem<T>& p, const Options& opt, Eigen::Index block, Decoder& dec) {
  const T eps = from_rational<T>(opt.eps);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv(), B = std::min(std::max<Eigen::Index>(block, 1), n);
  const T* gates = p.gates.size() ? p.gates.data() : nullptr;
  Mat<T> q(d, B), k(d, B), va(dv + 1, B), out(dv + 1, B), O(n, dv);
  va.row(dv).setOnes();
  for (Eigen::Index t0 = 0; t0 < n; t0 += B) {
    const Eigen::Index b = std::min(B, n - t0);
    load_block(p.Q, t0, b, q);
    load_block(p.K, t0, b, k);
    load_block(p.V, t0, b, va);
    for (Eigen::Index j = 0; j < b; ++j) {
      auto o = out.col(j);
      if (gates) dec.gate(gates[t0 + j]);
      dec.template step<Decays>(q.col(j), k.col(j), va.col(j), o);
      if (opt.normalized) divide_by_normalizer(o.head(dv), T(o(dv) + eps), t0 + j);
    }
    O.middleRows(t0, b) = out.topLeftCorner(dv, b).transpose();
  }
  return O;
}

// A decoding form: the decoder built from the loaded initial state (and `args`), the token loop (decay
// chosen once per call: gates always decay), the final state exported in the serial form's own state type.
// The registry has validated the gates (Registry::add_gates, core/registry_impl.hpp); the kernels are also
// called directly (tests with an explicit block), so the two ways to misuse them are refused here too.
template <class Decoder, class T, class... Args> Run<T> run_decoder(const Problem<T>& p, const Options& opt,
                                                                    const NamedState<T>* init, Eigen::Index block,
                                                                    const Args&... args) {
  using State = typename Decoder::State;
  const bool gated = p.gates.size() != 0;
  if (gated && p.gates.size() != p.n())
    throw InputError("decode: " + std::to_string(p.gates.size()) + " gates for " + std::to_string(p.n()) + " tokens");
  if (gated && opt.gamma != 1) throw InputError("decode: per-token gates and a decay gamma != 1 together");
  const T gamma = from_rational<T>(opt.gamma);
  Decoder dec(load_state<State>(init, p.d(), p.dv()), gamma, args...);
  Mat<T> O =
      gated || gamma != T(1) ? decode_tokens<true>(p, opt, block, dec) : decode_tokens<false>(p, opt, block, dec);
  return {std::move(O), export_state<State, T>(dec.state())};
}

// ---- hla2 (masked) -------------------------------------------------------------------------------------------

// S stored in full: column i is updated and read as one contiguous vector; u_i = S_t.col(i)·q_t = (q_tᵀS_t)_i,
// which is also right for a non-symmetric initial S.
template <class T> struct FullS {
  Mat<T> S;
  explicit FullS(const Mat<T>& s) : S(s) {}
  template <bool Decays, class V> void decay_add_outer(const V& k, const T& gamma) {
    columns_pass<Decays, false, false>(S, k.data(), gamma, k.data(), nullptr, nullptr, nullptr, nullptr);
  }
  template <class V> void add_left_product(const V& q, ColVec<T>& u) const { u.noalias() += S.transpose() * q; }
  Mat<T> full() const { return S; }
};

// §5.2 packed: the upper triangle only (PackedSymmetric); an initial S contributes its upper triangle, as in
// hla2_packed_serial.
template <class T> struct PackedS {
  PackedSymmetric<T> S;
  explicit PackedS(const Mat<T>& s) : S(PackedSymmetric<T>::from_upper(s)) {}
  template <bool Decays, class V> void decay_add_outer(const V& k, const T& gamma) {
    S.decay_add_outer(k, gamma, Decays);
  }
  template <class V> void add_left_product(const V& q, ColVec<T>& u) const { S.add_left_product(q, u); }
  Mat<T> full() const { return S.full(); }
};

template <class T, class SStore> struct Hla2Decoder {
  using State = Hla2State<T, true>;
  SStore S;
  Mat<T> CA, GA;           // [C m]ᵀ, [G h]ᵀ: (dv+1)×d
  ColVec<T> kC, u, neg_q;  // scratch: k_tᵀ[C m]_{t−1} (dv+1), u = S_tᵀq_t + λq_t (d), −q_t (d)
  DecayRule rule;
  T gamma, keep, carry, lambda;

  Hla2Decoder(const State& st, const T& g, const T& lam, DecayRule r)
      : S(st.S),
        CA(augmented_transpose(st.C, st.m)),
        GA(augmented_transpose(st.G, st.h)),
        kC(CA.rows()),
        u(st.S.rows()),
        neg_q(st.S.rows()),
        rule(r),
        lambda(lam) {
    gate(g);
  }

  // The decay of the coming token(s): S, C, m decay by γ; G, h keep γ² (corrected; paper: γ) of their past and
  // add the cross term carried by γ (paper: 1), as hla2_step does. Once per call for a fixed γ, per token with gates.
  void gate(const T& g) {
    gamma = g;
    keep = rule == DecayRule::corrected ? T(g * g) : g;
    carry = rule == DecayRule::corrected ? g : T(1);
  }

  // hla2_step then hla2_output_from_u, reordered into passes over contiguous columns.
  template <bool Decays, class V, class VA, class Out> void step(const V& q, const V& k, const VA& va, Out& out) {
    S.template decay_add_outer<Decays>(k, gamma);  // S_t = γS_{t−1} + k kᵀ
    if (lambda != T(0))
      u = lambda * q;
    else
      u.setZero();
    S.add_left_product(q, u);  // u = (q_tᵀ(S_t + λI))ᵀ
    // [C m]: kC = k_tᵀ[C m]_{t−1} (read before the update), [C m]_t = γ[C m]_{t−1} + q [v 1], out = uᵀ[C m]_t.
    kC.setZero();
    out.setZero();
    columns_pass<Decays, true, true>(CA, va.data(), gamma, q.data(), kC.data(), k.data(), out.data(), u.data());
    if (Decays) kC *= carry;
    // [G h]_t = keep·[G h]_{t−1} + k (carry·kC); out −= q_tᵀ[G h]_t.
    neg_q = -q;
    columns_pass<Decays, false, true>(GA, kC.data(), keep, k.data(), nullptr, nullptr, out.data(), neg_q.data());
  }

  Hla2State<T, true> state() const {
    Hla2State<T, true> st;
    st.S = S.full();
    split_augmented(CA, st.C, st.m);
    split_augmented(GA, st.G, st.h);
    return st;
  }
};

template <class T, bool Packed = false> Run<T> hla2_decode(const Problem<T>& p, const Options& opt,
                                                           const NamedState<T>* init, DecayRule rule,
                                                           Eigen::Index block = kDecodeBlock) {
  using SStore = std::conditional_t<Packed, PackedS<T>, FullS<T>>;
  return run_decoder<Hla2Decoder<T, SStore>>(p, opt, init, block, from_rational<T>(opt.ridge), rule);
}

// ---- AHLA (Algorithm 2) -------------------------------------------------------------------------------------

template <class T> struct AhlaDecoder {
  using State = AhlaState<T>;
  Mat<T> PA, EA;  // [P m]ᵀ, [E n]ᵀ: (dv+1)×d
  ColVec<T> r;    // scratch: [q_tᵀP_t, q_tᵀm_t] = [r, s] of Alg. 2
  T gamma;

  AhlaDecoder(const State& st, const T& g)
      : PA(augmented_transpose(st.P, st.m)), EA(augmented_transpose(st.E, st.n)), r(PA.rows()), gamma(g) {}
  void gate(const T& g) { gamma = g; }  // both [P m] and [E n] decay by the token's γ_t

  // Alg. 2 lines 3–10: [P m] ← γ[P m] + k [v 1] and [r s] = qᵀ[P m] in one pass; [E n] ← γ[E n] + k [r s]
  // and out = qᵀ[E n] in another.
  template <bool Decays, class V, class VA, class Out> void step(const V& q, const V& k, const VA& va, Out& out) {
    r.setZero();
    columns_pass<Decays, false, true>(PA, va.data(), gamma, k.data(), nullptr, nullptr, r.data(), q.data());
    out.setZero();
    columns_pass<Decays, false, true>(EA, r.data(), gamma, k.data(), nullptr, nullptr, out.data(), q.data());
  }

  AhlaState<T> state() const {
    AhlaState<T> st;
    split_augmented(PA, st.P, st.m);
    split_augmented(EA, st.E, st.n);
    return st;
  }
};

template <class T> Run<T> ahla_decode(const Problem<T>& p, const Options& opt, const NamedState<T>* init,
                                      Eigen::Index block = kDecodeBlock) {
  return run_decoder<AhlaDecoder<T>>(p, opt, init, block);
}

// ---- linear attention -----------------------------------------------------------------------------------------

template <class T> struct LinearDecoder {
  using State = LinearState<T>;
  Mat<T> SA;  // [S z]ᵀ: (dv+1)×d
  T gamma;

  LinearDecoder(const State& st, const T& g) : SA(augmented_transpose(st.S, st.z)), gamma(g) {}
  void gate(const T& g) { gamma = g; }

  // [S z] ← γ[S z] + k [v 1] and out = qᵀ[S z] in one pass.
  template <bool Decays, class V, class VA, class Out> void step(const V& q, const V& k, const VA& va, Out& out) {
    out.setZero();
    columns_pass<Decays, false, true>(SA, va.data(), gamma, k.data(), nullptr, nullptr, out.data(), q.data());
  }

  LinearState<T> state() const {
    LinearState<T> st;
    split_augmented(SA, st.S, st.z);
    return st;
  }
};

template <class T> Run<T> linear_decode(const Problem<T>& p, const Options& opt, const NamedState<T>* init,
                                        Eigen::Index block = kDecodeBlock) {
  return run_decoder<LinearDecoder<T>>(p, opt, init, block);
}

}  // namespace hla::fast
