// Registers every chunked form for scalar T.
//
// Variant convention: "corrected" where the paper's own formula for that operator fails against SPEC
// (decayed hla2: §4.3's G update; hla3: Alg. 3 / eq. 7.5) and the chunked form implements the derived
// algebra; "paper" where the paper's algebra holds (ahla, linear). The drawn figure formulas are their
// own forms (chunk-figure1c, chunk-figure2c-lt / -le), variant "paper", implemented as printed.
#pragma once

#include <tuple>

#include "core/registry.hpp"
#include "fast/chunked/ahla.hpp"
#include "fast/chunked/figures.hpp"
#include "fast/chunked/gated.hpp"
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
  // hla2's chunk forms correct Figure 1(C) (chunk-figure1c) under names of their own: their claim is named here.
  auto hla2_chunk_form = [&r, &second](std::string form, std::string cite, FormFn<T> fn) {
    r.add({.op = "hla2",
           .form = std::move(form),
           .variant = "corrected",
           .cite = std::move(cite),
           .caps = second,
           .fn = std::move(fn),
           .claim = "hla2.chunk-form.corrected"});
  };
  hla2_chunk_form("chunked",
                  "derived from SPEC hla2: linear attention over keys u_j = S_j q_j with decay γ² (C' = S C − G), "
                  "chunk matrix form (γ, λ, normalize)",
                  c::hla2_chunked<T>);
  hla2_chunk_form("chunked-fused",
                  "the u-form of hla2/chunked in one pass per block of chunks: one contiguous block per thread, its S "
                  "summary, a scan over the blocks, each block's outputs corrected by its prefix; each chunk's inputs "
                  "copied once, small-GEMM kernels (LIBXSMM for float/double) (γ, λ, normalize)",
                  c::hla2_chunked_fused<T>);
  hla2_chunk_form("chunked-monoid",
                  "Fig. 1(C) chunk form re-derived from SPEC hla2, carrying the eq. 4.1 state (S, C, G) with the "
                  "corrected decay (γ, λ, normalize)",
                  c::hla2_chunked_monoid<T>);
  r.add({"ahla", "chunked", "paper", "Fig. 2(C) with R^{KQ}_{≤t}, eq. 6.2 carry, §6.1 decay (derived matrix form)",
         decayed, c::ahla_chunked<T>});
  r.add({"hla3", "chunked", "corrected", "F_t = F_{t−1} + S^K_t q_t q_tᵀ P_t in chunk matrix form (derived)", third,
         c::hla3_chunked<T>});
  r.add(
      {"linear", "chunked", "paper", "first-order chunk form with decay-weighted mask", decayed, c::linear_chunked<T>});
  r.add({"hla2", "chunk-figure1c", "paper", "Figure 1(C) per-chunk output as drawn (γ = 1)", figure,
         c::hla2_figure1c<T>});
  r.add({"ahla", "chunk-figure2c-lt", "paper", "Figure 2(C) as drawn, R^{KQ}_{<t} = Σ_{i<t} (literal reading)", figure,
         [](const P& p, const Options& o, const S* s) { return c::ahla_figure2c<T>(p, o, s, false); }});
  r.add({"ahla", "chunk-figure2c-le", "paper", "Figure 2(C) as drawn, R^{KQ}_{<t} read as Σ_{i≤t}", figure,
         [](const P& p, const Options& o, const S* s) { return c::ahla_figure2c<T>(p, o, s, true); }});

  // Per-token gates (gated.hpp): each chunk's gate factors Γ ≤ 1 from products of gates (exact scalars) or from
  // differences of within-chunk cumulative log-gates (floating point), never a quotient of cumulative products.
  const std::string stable =
      "per-chunk gate factors Γ(t, s) ≤ 1, exp of within-chunk log-gate differences (floating) "
      "or products of gates (exact); the serial form's state";
  r.add_gates("hla2", "chunked", "corrected", "u-form with Γ² on C' = S C − G; " + stable,
              [](const P& p, const Options& o, const S* s) {
                return c::gated_hla2_chunked<T>(p, p.gates, o, s, c::stable_gate_factors<T>());
              });
  r.add_gates(
      "hla2", "chunked-fused", "corrected",
      "hla2/chunked's gated u-form in one pass per block of chunks: the chunk's gate factors as in hla2/chunked "
      "with gates, running products of gates across blocks; " +
          stable,
      c::hla2_chunked_fused<T>);
  r.add_gates("ahla", "chunked", "paper", stable, [](const P& p, const Options& o, const S* s) {
    return c::gated_ahla_chunked<T>(p, p.gates, o, s, c::stable_gate_factors<T>());
  });
  r.add_gates("linear", "chunked", "paper", stable, [](const P& p, const Options& o, const S* s) {
    return c::gated_linear_chunked<T>(p, p.gates, o, s, c::stable_gate_factors<T>());
  });
  // The formulation many kernels start with, kept to measure where it fails (configs/gated.toml): every factor a
  // quotient P_t / P_s of gate products over the whole call. Floating scalars only; a fixed γ runs it with γ_t ≡ γ.
  if constexpr (!is_exact_v<T>) {
    using GatedChunked = Run<T> (*)(const P&, const ColVec<T>&, const Options&, const S*, c::GateFactors);
    auto naive = [](GatedChunked form) {
      return [form](const P& p, const Options& o, const S* s) {
        return form(p, p.gates, o, s, c::GateFactors::naive_cumprod);
      };
    };
    auto constant_gates = [](auto gated) {
      return [gated](const P& p, const Options& o, const S* s) {
        P with = p;
        with.gates = ColVec<T>::Constant(p.n(), from_rational<T>(o.gamma));
        Options none = o;
        none.gamma = 1;
        return gated(with, none, s);
      };
    };
    const std::string cite =
        "chunk factors as quotients of cumulative gate products P_t / P_s (naive; kept to measure it)";
    const std::tuple<const char*, Caps, GatedChunked> forms[] = {{"hla2", second, c::gated_hla2_chunked<T>},
                                                                 {"ahla", decayed, c::gated_ahla_chunked<T>},
                                                                 {"linear", decayed, c::gated_linear_chunked<T>}};
    for (const auto& [op, caps, form] : forms) {
      r.add({op, "chunked-naive-cumprod", "naive", cite, caps, constant_gates(naive(form))});
      r.add_gates(op, "chunked-naive-cumprod", "naive", cite, naive(form));
    }
  }
}

}  // namespace hla

// What the generated unit of this kind compiles besides register_chunked<T> (CMakeLists.txt): the fused form's
// pieces, which the sequence-parallel forms declare extern (fast/chunked/hla2_fused.hpp).
#define HLA_KIND_INSTANTIATIONS(T) \
  namespace hla::fast::chunked {   \
  HLA_FUSED_PASS(, T)              \
  }
