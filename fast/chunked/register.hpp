// Registers every chunked form for scalar T.
//
// Variant convention: "corrected" where the paper's own formula for that operator fails against SPEC
// (decayed hla2: §4.3's G update; hla3: Alg. 3 / eq. 7.5) and the chunked form implements the derived
// algebra; "paper" where the paper's algebra holds (ahla, linear). The drawn figure formulas are their
// own forms (chunk-figure1c, chunk-figure2c-lt / -le), variant "paper", implemented as printed.
#pragma once

#include "core/registry.hpp"
#include "fast/chunked/ahla.hpp"
#include "fast/chunked/figures.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/chunked/hla2_fused.hpp"
#include "fast/chunked/hla3.hpp"
#include "fast/chunked/linear.hpp"

namespace hla {

template <class T> void register_chunked(Registry<T>& r) {
  namespace c = hla::fast::chunked;
  using P = Problem<T>;
  using S = NamedState<T>;
  const Caps second{.decay = true, .normalized = true, .ridge = true, .state = true, .chunk = true, .threads = true};
  const Caps decayed{.decay = true, .normalized = true, .state = true, .chunk = true, .threads = true};
  const Caps third{.normalized = true, .state = true, .chunk = true, .threads = true};
  const Caps figure{.state = true, .chunk = true};
  r.add({"hla2", "chunked", "corrected",
         "derived from SPEC hla2: linear attention over keys u_j = S_j q_j with decay γ² (C' = S C − G), chunk matrix form (γ, λ, normalize)",
         second, c::hla2_chunked<T>});
  r.add({"hla2", "chunked-fused", "corrected",
         "the u-form of hla2/chunked in one pass per block of chunks: one contiguous block per thread, its S summary, "
         "a scan over the blocks, each block's outputs corrected by its prefix; each chunk's inputs copied once, "
         "small-GEMM kernels (LIBXSMM for float/double) (γ, λ, normalize)",
         second, c::hla2_chunked_fused<T>});
  r.add({"hla2", "chunked-monoid", "corrected",
         "Fig. 1(C) chunk form re-derived from SPEC hla2, carrying the eq. 4.1 state (S, C, G) with the corrected decay (γ, λ, normalize)",
         second, c::hla2_chunked_monoid<T>});
  r.add({"ahla", "chunked", "paper", "Fig. 2(C) with R^{KQ}_{≤t}, eq. 6.2 carry, §6.1 decay (derived matrix form)",
         decayed, c::ahla_chunked<T>});
  r.add({"hla3", "chunked", "corrected", "F_t = F_{t−1} + S^K_t q_t q_tᵀ P_t in chunk matrix form (derived)", third,
         c::hla3_chunked<T>});
  r.add({"linear", "chunked", "paper", "first-order chunk form with decay-weighted mask", decayed, c::linear_chunked<T>});
  r.add({"hla2", "chunk-figure1c", "paper", "Figure 1(C) per-chunk output as drawn (γ = 1)", figure,
         c::hla2_figure1c<T>});
  r.add({"ahla", "chunk-figure2c-lt", "paper", "Figure 2(C) as drawn, R^{KQ}_{<t} = Σ_{i<t} (literal reading)", figure,
         [](const P& p, const Options& o, const S* s) { return c::ahla_figure2c<T>(p, o, s, false); }});
  r.add({"ahla", "chunk-figure2c-le", "paper", "Figure 2(C) as drawn, R^{KQ}_{<t} read as Σ_{i≤t}", figure,
         [](const P& p, const Options& o, const S* s) { return c::ahla_figure2c<T>(p, o, s, true); }});
}

}  // namespace hla
