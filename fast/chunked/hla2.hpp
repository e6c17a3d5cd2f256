// Masked second-order HLA, chunked matrix form with decay γ, ridge λ and normalization — derived from
// SPEC's definition o_t = Σ_{j≤t} Σ_{i≤j} γ^{(t−i)+(t−j)} (q_t·k_i)(q_j·k_i) v_j (+ λ Σ_{j≤t} γ^{t−j}(q_t·q_j) v_j).
//
// Chunk starting at token c, local positions a = t − c < len. The state entering it, at token c−1, is
// S0 = Σ_{i<c} γ^{c−1−i} k_i k_iᵀ, C0 = Σ_{j<c} γ^{c−1−j} q_j v_jᵀ, G0 = Σ_{j<i<c} γ^{2(c−1)−i−j} k_i k_iᵀ q_j v_jᵀ
// (the corrected serial state, fast/serial/hla2.hpp), so S0 C0 − G0 = Σ_{i≤j<c} γ^{2(c−1)−i−j} k_i k_iᵀ q_j v_jᵀ.
// Split the (i, j) pairs of o_t (i ≤ j ≤ t) by chunk membership:
//   i ≤ j < c          γ^{2(a+1)} q_tᵀ (S0 C0 − G0)
//   i < c ≤ j ≤ t      γ^{a+1} Σ_{b≤a} γ^{a−b} (q_tᵀ S0 q_b) v_b   = γ^{a+1} [((Q S0 Qᵀ) ⊙ D) V]_a
//   c ≤ i ≤ j ≤ t      [(((D ⊙ W)(L ⊙ W)ᵀ) ⊙ D) V]_a,  W = Q Kᵀ (chunk rows), D_{ab} = γ^{a−b}[b ≤ a]
//   (j < c ≤ i is excluded by i ≤ j: this is the cross term the figure's carry must not double count)
//   ridge              λ γ^{a+1} q_tᵀ C0 + λ [((Q Qᵀ) ⊙ D) V]_a
// The state after a chunk of length len (g = γ^len, x_b = γ^{len−1−b}):
//   S = g S0 + Kᵀ diag(x) K,  C = g C0 + Qᵀ diag(x) V,
//   G = g² G0 + g S_B C0 + G_B,  S_B = Kᵀ diag(x) K,  G_B = Kᵀ diag(x) (SL ⊙ Wᵀ) diag(x) V
// (SL strictly lower: pairs b < α inside the chunk). The vector parts m, h and the normalizer are the
// same sums with V → 1: they ride along as a column of ones appended to V.
// At γ = 1 the state update is the paper's semidirect product (eq. 4.1); for γ < 1 it is the corrected
// decayed one (G scales by γ², the paper's §4.3 by γ): hence variant "corrected".
#pragma once

#include <limits>
#include <type_traits>

#include "fast/chunked/chunk_gates.hpp"
#include "fast/chunked/common.hpp"
#include "fast/serial/hla2.hpp"

namespace hla::fast::chunked {

// Per-thread scratch of the hla2 chunk computations (sized for a full chunk of width w).
template <class T> struct Hla2Workspace {
  Mat<T> V, Vd, Kd, W, A, B, Mm, Y, U, H;
  ColVec<T> x;
  Hla2Workspace(Eigen::Index w, Eigen::Index d, Eigen::Index da)
      : V(w, da), Vd(w, da), Kd(w, d), W(w, w), A(w, w), B(w, w), Mm(w, w), Y(w, da), U(w, d), H(d, da), x(w) {}
};

// One chunk [c, c+len) from a zero incoming state: the intra-chunk outputs (augmented with the
// normalizer column) into `out`, and the chunk's contribution S_B, C_B = [C_B m_B], G_B = [G_B h_B].
template <class T, class Out, class SB, class CB, class GB>
void hla2_chunk_local(const Problem<T>& p, Eigen::Index c, Eigen::Index len, const Decay<T>& dec, bool ridge,
                      const T& lambda, Hla2Workspace<T>& ws, Out&& out, SB&& Sb, CB&& Cb, GB&& Gb) {
  const auto Q = p.Q.middleRows(c, len);
  const auto K = p.K.middleRows(c, len);
  auto V = ws.V.topRows(len);
  values_with_ones<T>(p.V.middleRows(c, len), V);
  const auto D = dec.D.topLeftCorner(len, len);
  auto W = ws.W.topLeftCorner(len, len);
  auto A = ws.A.topLeftCorner(len, len);
  auto B = ws.B.topLeftCorner(len, len);
  auto Mm = ws.Mm.topLeftCorner(len, len);
  // ((D ⊙ W)(L ⊙ W)ᵀ [+ λ Q Qᵀ]) ⊙ D, times [V 1]
  W.noalias() = Q * K.transpose();
  A = W.cwiseProduct(D);
  B = W.template triangularView<Eigen::Lower>();
  Mm.noalias() = A * B.transpose();
  if (ridge) Mm.noalias() += lambda * (Q * Q.transpose());
  Mm = Mm.cwiseProduct(D);
  out.noalias() = Mm * V;
  // S_B = Kᵀ diag(x) K, C_B = Qᵀ diag(x) V, G_B = Kᵀ diag(x) (SL ⊙ Wᵀ) diag(x) V, x_b = γ^{len−1−b}
  auto x = ws.x.head(len);
  dec.to_end(len, x);
  auto Vd = ws.Vd.topRows(len);
  auto Kd = ws.Kd.topRows(len);
  Vd = V;
  Kd = K;
  scale_rows<T>(Vd, x, dec.decays);
  scale_rows<T>(Kd, x, dec.decays);
  Sb.noalias() = Kd.transpose() * K;
  Cb.noalias() = Q.transpose() * Vd;
  B = W.transpose().template triangularView<Eigen::StrictlyLower>();
  auto Y = ws.Y.topRows(len);
  Y.noalias() = B * Vd;
  Gb.noalias() = Kd.transpose() * Y;
}

// The chunked form that carries the paper's semidirect-product state (S, [C m], [G h]) across chunks — the
// chunk-level version of the eq. 4.1 monoid (form "chunked-monoid"). hla2_chunked below is the faster
// factorisation; this one stays beside it because it exercises the paper's state and its carry.
template <class T> Run<T> hla2_chunked_monoid(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  using St = Hla2State<T, true>;
  const ChunkSetup<T> setup(p, opt);
  HLA_CHUNK_SETUP_NAMES(setup);
  const T lambda = from_rational<T>(opt.ridge);
  const bool ridge = opt.ridge != 0;

  const St st0 = load_state<St>(init, d, dv);
  Mat<T> S = st0.S, C = join(st0.C, st0.m), G = join(st0.G, st0.h);
  Mat<T> Sb(d, NG * d), Cb(d, NG * da), Gb(d, NG * da), Out(p.n(), da);
  const std::vector<T> g2 = setup.squared_factors();

  auto make_ws = [&] { return Hla2Workspace<T>(w, d, da); };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // 1. Chunk-local: intra-chunk outputs and each chunk's contribution (S_B, C_B, G_B) from a zero state.
    for_chunks(cnt, threads, make_ws, [&](Hla2Workspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      hla2_chunk_local(p, c, len, dec, ridge, lambda, ws, Out.middleRows(c, len), Sb.middleCols(kk * d, d),
                       Cb.middleCols(kk * da, da), Gb.middleCols(kk * da, da));
    });

    // 2. Carry: C first (G's coupling term needs the C entering each chunk), then g S_B C0 into G_B, then
    //    S and G.
    carry(Cb, C, g.data() + k0, cnt, decays, threads);
    for_chunks(
        cnt, threads, [] { return 0; },
        [&](int, Eigen::Index kk) {
          const Eigen::Index k = k0 + kk;
          auto Gk = Gb.middleCols(kk * da, da);
          if (decays)
            Gk.noalias() += g[k] * (Sb.middleCols(kk * d, d) * Cb.middleCols(kk * da, da));
          else
            Gk.noalias() += Sb.middleCols(kk * d, d) * Cb.middleCols(kk * da, da);
        });
    carry(Sb, S, g.data() + k0, cnt, decays, threads);
    carry(Gb, G, g2.data() + k0, cnt, decays, threads);

    // 3. Carry-dependent outputs: diag(γ^{a+1}) [ diag(γ^{a+1}) Q (S0 C0 − G0) + λ Q C0 + ((Q S0 Qᵀ) ⊙ D) V ].
    for_chunks(cnt, threads, make_ws, [&](Hla2Workspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = p.Q.middleRows(c, len);
      const auto S0 = Sb.middleCols(kk * d, d);
      const auto C0 = Cb.middleCols(kk * da, da);
      const auto G0 = Gb.middleCols(kk * da, da);
      auto V = ws.V.topRows(len);
      values_with_ones<T>(p.V.middleRows(c, len), V);
      auto x = ws.x.head(len);
      dec.after_start(len, 1, x);
      ws.H.noalias() = S0 * C0;
      ws.H -= G0;
      auto Y = ws.Y.topRows(len);
      Y.noalias() = Q * ws.H;
      scale_rows<T>(Y, x, decays);
      if (ridge) Y.noalias() += lambda * (Q * C0);
      auto U = ws.U.topRows(len);
      auto Mm = ws.Mm.topLeftCorner(len, len);
      U.noalias() = Q * S0;
      Mm.noalias() = U * Q.transpose();
      Mm = Mm.cwiseProduct(dec.D.topLeftCorner(len, len));
      Y.noalias() += Mm * V;
      scale_rows<T>(Y, x, decays);
      Out.middleRows(c, len) += Y;
    });
  }
  St fin{S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)};
  return {finish_outputs<T>(std::move(Out), opt.normalized, eps), export_state<St, T>(fin)};
}

// ---- the fast chunked form: hla2 as linear attention over the keys u_j = S_j q_j ---------------------------
//
// Group SPEC's weight γ^{(t−i)+(t−j)} = γ^{2(t−j)} · γ^{j−i}: the inner sum over i ≤ j is
// u_j = S_j q_j with S_j = Σ_{i≤j} γ^{j−i} k_i k_iᵀ (the serial S), so
//   o_t = Σ_{j≤t} γ^{2(t−j)} (q_t·u_j) v_j  [+ λ Σ_{j≤t} γ^{t−j} (q_t·q_j) v_j]
// — first-order linear attention with keys u_j and decay γ², whose state is C'_t = Σ_{j≤t} γ^{2(t−j)} u_j v_jᵀ.
// In the serial state's terms C' = S C − G (and m' = S m − h): with the corrected rule,
// S_t C_t − G_t = γ²(S C − G)_{t−1} + S_t q_t v_tᵀ, so q_tᵀ C'_t is Algorithm 1's numerator.
// Per chunk (local positions a, b < len; D_γ, D_γ² the decay-weighted causal masks; S0, C'0, C0 entering):
//   U   = diag(γ^{a+1}) Q S0 + ((Q Kᵀ) ⊙ D_γ) K                    rows u_{c+a}
//   out = ((Q Uᵀ) ⊙ D_γ²) [V 1] + diag(γ^{2(a+1)}) Q C'0
//         [+ λ ((Q Qᵀ) ⊙ D_γ) [V 1] + λ diag(γ^{a+1}) Q C0]
//   S  ← γ^len S0 + Kᵀ diag(γ^{len−1−b}) K
//   C' ← γ^{2len} C'0 + Uᵀ diag(γ^{2(len−1−b)}) [V 1],   C ← γ^len C0 + Qᵀ diag(γ^{len−1−b}) [V 1]
// (C only with ridge; otherwise once at the end, for the exported state)
// Three phases per group of chunks, each parallel over chunks: (A) the chunks' own S_B; carry S;
// (B) U and the chunks' own C'_B, C_B; carry C' and C; (C) the outputs. 8 matrix products per chunk
// (2 of them triangular) instead of the monoid form's 12, and no d×d×dv product per chunk.
// The final state is exported in the serial form's terms: G = S C − C', h = S m − m'.
//
// Multi-query (§5.2): heads with their own queries and shared keys and values share S — phase (A) and
// the S carry run once for all heads, phases (B) and (C) in parallel over (head, chunk) pairs. The
// one-head case is the registered form.
// The u-form's state entering token 0, from an initial state in the serial form's terms: S, C_init = [C m]
// and Cp = [C' m'] with C' = S C − G, m' = S m − h (d×(dv+1) each).
template <class T> struct Hla2UStart {
  Mat<T> S, C, Cp;
  Hla2UStart(const NamedState<T>* init, Eigen::Index d, Eigen::Index dv) {
    const Hla2State<T, true> st0 = load_state<Hla2State<T, true>>(init, d, dv);
    S = st0.S;
    C = join(st0.C, st0.m);
    Cp = S * C - join(st0.G, st0.h);
  }
};

// The final state exported in the serial form's terms (G = S C − C', h = S m − m'), from the u-form's S and
// Cp_full = [C' m'] after the last token. C is not carried chunk by chunk unless an output reads it (ridge):
// otherwise it is one weighted sum over the whole sequence, C = γ^n C_init + Qᵀ diag(γ^{n−1−j}) [V 1].
// `carried`: C's carried columns (d×dv, or d×(dv+1) with m), or null; what it lacks is summed here.
// Q and V: the sequence's rows (matrices, or blocks of a longer sequence's).
template <class T, class QRows, class VRows>
NamedState<T> hla2_u_final_state(const QRows& Q, const VRows& V, const Mat<T>& S, const Mat<T>& C_init,
                                 const Mat<T>* carried, const Mat<T>& Cp_full, const T& gamma, int threads) {
  const Eigen::Index n = Q.rows(), d = Q.cols(), dv = V.cols();
  Mat<T> C(d, dv + 1);
  if (carried && carried->cols() == dv + 1) {
    C = *carried;
  } else {
    ColVec<T> x;  // γ^{n−1−j}; empty (no weights) without decay
    T gn(1);
    if (gamma != T(1)) {
      x.resize(n);
      x(n - 1) = T(1);
      // In floating point γ^{n−1−j} falls below the smallest normal number after a few hundred tokens (γ = 0.9:
      // ~840 in float); the product over the sequence then runs on subnormals, about 11x slower in `make bench`,
      // and those terms carry no significant digit (each is below the smallest normal times |q||v|, far under u
      // of the weight-1 term). They are set to 0 instead.
      for (Eigen::Index j = n - 1; j > 0; --j) { flush_subnormal(x(j - 1) = x(j) * gamma); }
      gn = x(0) * gamma;
    }
    if (carried)
      C.leftCols(dv) = *carried;
    else
      C.leftCols(dv) = gn * C_init.leftCols(dv) + weighted_gram<T>(Q, x, V, threads);
    const Mat<T> ones = Mat<T>::Ones(n, 1);
    C.col(dv) = gn * C_init.col(dv) + weighted_gram<T>(Q, x, ones, threads);
  }
  const Mat<T> G = S * C - Cp_full;  // back to the serial state's terms (exact in rationals)
  return export_state<Hla2State<T, true>, T>({S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)});
}

template <class T> struct Hla2UWorkspace {
  Mat<T> Vd, Kd, Qs, W, P, F;
  ColVec<T> x;
  Hla2UWorkspace(Eigen::Index w, Eigen::Index d, Eigen::Index da, bool gated)
      : Vd(w, da), Kd(w, d), Qs(w, d), W(w, w), P(w, w), F(gated ? w : 0, gated ? w : 0), x(w) {}
};

// Heads' queries Qs[h] (n×d each) with shared K (n×d) and V (n×dv); init[h] the state of head h (or null
// for zero). The heads' states share S: a head whose initial S differs from head 0's is an input error.
// gates: per-token gates γ_t (Options::gamma must then be 1; the gated u-form of fast/chunked/gated.hpp's
// gated_hla2_chunked), their factors computed `how` — every γ-power below is then the Γ of the same ages
// (ChunkDecay); null: the fixed γ.
template <class T>
std::vector<Run<T>> hla2_chunked_heads(const std::vector<const Mat<T>*>& Qs, const Mat<T>& K, const Mat<T>& V,
                                       const Options& opt, const std::vector<const NamedState<T>*>& init,
                                       const ColVec<T>* gates = nullptr, GateFactors how = stable_gate_factors<T>()) {
  const ChunkSetup<T> setup(K.rows(), K.cols(), V.cols(), opt);
  const Eigen::Index n = setup.n, d = setup.d, dv = setup.dv, da = setup.da, M = setup.M, w = setup.w, NG = setup.NG;
  const ChunkPlan& plan = setup.plan;
  const int threads = setup.threads;
  const T eps = setup.eps, gamma = setup.gamma;
  const ChunkDecay<T> decay = gates ? ChunkDecay<T>(setup, *gates, how) : ChunkDecay<T>(setup);
  const bool decays = decay.decays(), gated = decay.gated();
  const std::vector<T>&g = decay.factors(1), &g2 = decay.factors(2);
  const T lambda = from_rational<T>(opt.ridge);
  const bool ridge = opt.ridge != 0;
  const Eigen::Index H = static_cast<Eigen::Index>(Qs.size());

  // The products carry the normalizer's column of ones only when an output needs it (normalized): va value
  // columns. Unnormalized, the state's vector parts m' = S m − h (and m) are matrix–vector products on the
  // side, so the products stay dv wide (a 65th column costs the GEMM micro-kernel a narrow remainder pass).
  // With gates and the final state, C (and m, on the side like m' unless normalized) is carried chunk by chunk: the
  // whole-sequence sum of hla2_u_final_state is for fixed γ only. The outputs' products are the same with and without
  // the state (outputs only gives the same outputs to the bit: tests/test_foundation.cpp).
  const bool aug = opt.normalized;
  const bool carry_c = ridge || (gated && opt.state);
  const bool carry_m = gated && opt.state && !aug;
  const Eigen::Index va = aug ? da : dv;
  Mat<T> S;
  std::vector<Mat<T>> C(H), Cp(H), Mp(H), Cm(H), Cb(H), Cpb(H), Mpb(H), Cmb(H), Ub(H), Out(H), C_init(H);
  for (Eigen::Index h = 0; h < H; ++h) {
    Hla2UStart<T> st0(init.empty() ? nullptr : init[h], d, dv);
    if (h == 0)
      S = st0.S;
    else if (st0.S != S)
      throw InputError("multi-query heads share S: head " + std::to_string(h) + "'s initial S differs from head 0's");
    C_init[h] = std::move(st0.C);
    const Mat<T>& Cp_full = st0.Cp;
    C[h] = C_init[h].leftCols(va);
    Cp[h] = Cp_full.leftCols(va);
    if (!aug) Mp[h] = Cp_full.rightCols(1);
    // Per group: the chunks' C'_B, C_B (then the states entering them), m'_B, and U rows.
    Cpb[h].resize(d, NG * va);
    Cb[h].resize(d, NG * va);
    if (!aug) Mpb[h].resize(d, NG);
    if (carry_m) {
      Cm[h] = C_init[h].rightCols(1);
      Cmb[h].resize(d, NG);
    }
    Ub[h].resize(NG * w, d);
    Out[h].resize(n, va);
  }
  // Per group, shared by the heads: the chunks' S_B (then S entering them) and, normalized, their [V 1]
  // rows. Unnormalized, the products read V's rows in place (no copy).
  Mat<T> Sb(d, NG * d), Vb(aug ? NG * w : 0, va);
  auto values = [&](Eigen::Index kk, Eigen::Index c, Eigen::Index len) -> Eigen::Ref<const Mat<T>> {
    if (aug) return Vb.middleRows(kk * w, len);
    return V.middleRows(c, len);
  };
  auto make_ws = [&] { return Hla2UWorkspace<T>(w, d, va, gated); };

  for (Eigen::Index k0 = 0; k0 < M; k0 += NG) {
    const Eigen::Index cnt = std::min(NG, M - k0);
    // (A) S_B = Kᵀ diag(γ^{len−1−b}) K, and [V 1]: once for every head.
    for_chunks(cnt, threads, make_ws, [&](Hla2UWorkspace<T>& ws, Eigen::Index kk) {
      const Eigen::Index c = plan.begin(k0 + kk), len = plan.len(k0 + kk);
      const auto Kc = K.middleRows(c, len);
      if (aug) values_with_ones<T>(V.middleRows(c, len), Vb.middleRows(kk * w, len));
      auto Sk = Sb.middleCols(kk * d, d);
      if (decays) {
        auto x = ws.x.head(len);
        decay.to_end(k0 + kk, 1, x);
        auto Kd = ws.Kd.topRows(len);
        Kd = Kc;
        scale_rows<T>(Kd, x, true);
        Sk.noalias() = Kd.transpose() * Kc;
      } else {
        Sk.noalias() = Kc.transpose() * Kc;
      }
    });
    carry(Sb, S, g.data() + k0, cnt, decays, threads);

    // (B) U = diag(γ^{a+1}) Q S0 + ((Q Kᵀ) ⊙ D_γ) K; C'_B = Uᵀ diag(γ^{2(len−1−b)}) [V 1]; C_B likewise with Q, γ.
    for_chunks(H * cnt, threads, make_ws, [&](Hla2UWorkspace<T>& ws, Eigen::Index i) {
      const Eigen::Index h = i / cnt, kk = i % cnt, k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = Qs[h]->middleRows(c, len);
      const auto Kc = K.middleRows(c, len);
      const auto Va = values(kk, c, len);
      auto U = Ub[h].middleRows(kk * w, len);
      auto W = ws.W.topLeftCorner(len, len);
      W.noalias() = Q * Kc.transpose();
      decay.mask(k, 1, W, ws.F);
      U.noalias() = W.template triangularView<Eigen::Lower>() * Kc;
      const auto S0 = Sb.middleCols(kk * d, d);
      auto Cpk = Cpb[h].middleCols(kk * va, va);
      auto Ck = Cb[h].middleCols(kk * va, va);
      if (decays) {
        auto Qs_ = ws.Qs.topRows(len);
        auto x = ws.x.head(len);
        auto Vd = ws.Vd.topRows(len);
        Qs_ = Q;
        decay.after_start(k, 1, x);
        scale_rows<T>(Qs_, x, true);
        U.noalias() += Qs_ * S0;
        decay.to_end(k, 2, x);
        Vd = Va;
        scale_rows<T>(Vd, x, true);
        Cpk.noalias() = U.transpose() * Vd;
        if (!aug) Mpb[h].col(kk).noalias() = U.transpose() * x;
        if (carry_c) {
          decay.to_end(k, 1, x);
          Vd = Va;
          scale_rows<T>(Vd, x, true);
          Ck.noalias() = Q.transpose() * Vd;
          if (carry_m) Cmb[h].col(kk).noalias() = Q.transpose() * x;
        }
      } else {
        U.noalias() += Q * S0;
        Cpk.noalias() = U.transpose() * Va;
        if (!aug) Mpb[h].col(kk) = U.colwise().sum().transpose();
        if (carry_c) Ck.noalias() = Q.transpose() * Va;
      }
    });
    for (Eigen::Index h = 0; h < H; ++h) {
      carry(Cpb[h], Cp[h], g2.data() + k0, cnt, decays, threads);
      if (!aug) carry(Mpb[h], Mp[h], g2.data() + k0, cnt, decays, threads);
      if (carry_c) carry(Cb[h], C[h], g.data() + k0, cnt, decays, threads);
      if (carry_m) carry(Cmb[h], Cm[h], g.data() + k0, cnt, decays, threads);
    }

    // (C) out = ((Q Uᵀ) ⊙ D_γ²) [V 1] + diag(γ^{2(a+1)}) Q C'0 [+ ridge terms].
    for_chunks(H * cnt, threads, make_ws, [&](Hla2UWorkspace<T>& ws, Eigen::Index i) {
      const Eigen::Index h = i / cnt, kk = i % cnt, k = k0 + kk;
      const Eigen::Index c = plan.begin(k), len = plan.len(k);
      const auto Q = Qs[h]->middleRows(c, len);
      const auto U = Ub[h].middleRows(kk * w, len);
      const auto Va = values(kk, c, len);
      auto out = Out[h].middleRows(c, len);
      auto P = ws.P.topLeftCorner(len, len);
      P.noalias() = Q * U.transpose();
      decay.mask(k, 2, P, ws.F);
      if (ridge) {
        auto W = ws.W.topLeftCorner(len, len);
        W.noalias() = Q * Q.transpose();
        decay.mask(k, 1, W, ws.F);
        P += lambda * W;
      }
      out.noalias() = P.template triangularView<Eigen::Lower>() * Va;
      const auto Cp0 = Cpb[h].middleCols(kk * va, va);
      auto Qs_ = ws.Qs.topRows(len);
      auto x = ws.x.head(len);
      if (decays) {
        Qs_ = Q;
        decay.after_start(k, 2, x);
        scale_rows<T>(Qs_, x, true);
        out.noalias() += Qs_ * Cp0;
      } else {
        out.noalias() += Q * Cp0;
      }
      if (ridge) {
        Qs_ = Q;
        decay.after_start(k, 1, x);
        scale_rows<T>(Qs_, x, decays);
        out.noalias() += lambda * (Qs_ * Cb[h].middleCols(kk * va, va));
      }
    });
  }
  std::vector<Run<T>> runs;
  for (Eigen::Index h = 0; h < H; ++h) {
    NamedState<T> fin;  // C not carried: summed here over the whole sequence, only when the state is wanted
    if (opt.state) {
      const Mat<T> carried = carry_m ? join(C[h], Cm[h]) : C[h];
      fin = hla2_u_final_state<T>(*Qs[h], V, S, C_init[h], carry_c ? &carried : nullptr,
                                  aug ? Cp[h] : join(Cp[h], Mp[h]), gamma, threads);
    }
    runs.push_back({aug ? finish_outputs<T>(std::move(Out[h]), true, eps) : std::move(Out[h]), std::move(fin)});
  }
  return runs;
}

template <class T> Run<T> hla2_chunked(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  return std::move(hla2_chunked_heads<T>({&p.Q}, p.K, p.V, opt, {init}).front());
}

}  // namespace hla::fast::chunked
