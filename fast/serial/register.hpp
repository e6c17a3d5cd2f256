// Registers every serial (streaming) form for scalar T.
#pragma once

#include "core/registry.hpp"
#include "fast/serial/ahla.hpp"
#include "fast/serial/decode.hpp"
#include "fast/serial/gated.hpp"
#include "fast/serial/hla2.hpp"
#include "fast/serial/hla2_variants.hpp"
#include "fast/serial/hla3.hpp"
#include "fast/serial/linear.hpp"

namespace hla {

template <class T> void register_serial(Registry<T>& r) {
  namespace f = hla::fast;
  using P = Problem<T>;
  using S = NamedState<T>;
  const Caps second{.decay = true, .normalized = true, .ridge = true, .state = true};
  const Caps third{.normalized = true, .state = true};
  r.add(
      {"hla2", "serial", "paper", "§3.1 online updates; §4.3 decayed updates; Alg. 1 (γ, λ, normalize)", second,
       [](const P& p, const Options& o, const S* s) { return f::hla2_serial<T, true>(p, o, s, f::DecayRule::paper); }});
  r.add({"hla2", "serial", "corrected", "§4.3 with G_t = γ²G_{t−1} + γ k_t k_tᵀ C_{t−1} (derived; see claims)", second,
         [](const P& p, const Options& o, const S* s) {
           return f::hla2_serial<T, true>(p, o, s, f::DecayRule::corrected);
         }});
  // The ledger holds it to hla2/serial/corrected (hla2.packed-symmetric), not the "serial" prefix's claim.
  r.add({.op = "hla2",
         .form = "serial-packed",
         .variant = "corrected",
         .cite = "§5.2 packed symmetric S (upper triangle) over the corrected serial form",
         .caps = second,
         .fn = [](const P& p, const Options& o,
                  const S* s) { return f::hla2_packed_serial<T>(p, o, s, f::DecayRule::corrected); },
         .claim = "hla2.packed-symmetric"});
  r.add({"hla2-unmasked", "serial", "paper", "eq. 3.1; eq. 3.2; §4.3 decayed S, C, m", second,
         [](const P& p, const Options& o, const S* s) {
           return f::hla2_serial<T, false>(p, o, s, f::DecayRule::paper);
         }});
  r.add({"ahla",
         "serial",
         "paper",
         "Alg. 2; §6.1 decay mechanism; Thm 6.1",
         {.decay = true, .normalized = true, .state = true},
         f::ahla_serial<T>});
  r.add({"hla3", "serial", "paper", "Alg. 3; eqs. 7.1–7.3; Thm 7.1", third, f::hla3_alg3<T>});
  r.add({"hla3", "serial-eq75", "paper", "eq. 7.4 state, eq. 7.5 recurrence", third, f::hla3_eq75<T>});
  r.add({"hla3", "serial", "corrected", "F_t = F_{t−1} + S^K_t q_t q_tᵀ P_t (derived from SPEC hla3)", third,
         f::hla3_corrected_serial<T>});
  r.add({"hla3-unmasked", "serial", "paper", "§7.1 unmasked factorization", third, f::hla3_unmasked_serial<T>});
  r.add({"linear",
         "serial",
         "paper",
         "§2.2 running sums, identity features",
         {.decay = true, .normalized = true, .state = true},
         f::linear_serial<T>});
  // Decoding kernels (decode.hpp): the same recurrences, inputs read a block of tokens at a time, state
  // augmented and laid out as contiguous columns, no allocation per token. Each kernel takes the problem's
  // gates itself (a fixed γ is the constant case), so its gated computation, given below, is the same function.
  const FormFn<T> hla2_decode = [](const P& p, const Options& o, const S* s) {
    return f::hla2_decode<T>(p, o, s, f::DecayRule::corrected);
  };
  const FormFn<T> hla2_decode_packed = [](const P& p, const Options& o, const S* s) {
    return f::hla2_decode<T, true>(p, o, s, f::DecayRule::corrected);
  };
  const FormFn<T> ahla_decode = [](const P& p, const Options& o, const S* s) { return f::ahla_decode<T>(p, o, s); };
  const FormFn<T> linear_decode = [](const P& p, const Options& o, const S* s) { return f::linear_decode<T>(p, o, s); };
  r.add({"hla2", "decode", "corrected",
         "§4.3 corrected G_t = γ²G_{t−1} + γ k_t k_tᵀ C_{t−1}, h likewise; Alg. 1 lines 7–15 (λ, normalize); cache "
         "layout",
         second, hla2_decode});
  r.add({"hla2", "decode-packed", "corrected", "hla2/decode/corrected with §5.2 packed symmetric S (upper triangle)",
         second, hla2_decode_packed});
  r.add({"ahla",
         "decode",
         "paper",
         "Alg. 2 lines 3–10 with the §6.1 decay (Thm 6.1 normalizer); cache layout",
         {.decay = true, .normalized = true, .state = true},
         ahla_decode});
  r.add({"linear",
         "decode",
         "paper",
         "§2.2 running sums S_t = γS_{t−1} + k_t v_tᵀ, z_t (normalize); cache layout",
         {.decay = true, .normalized = true, .state = true},
         linear_decode});

  // Per-token gates (gated.hpp): each token's step decayed by its own γ_t. Alg. 1 as printed keeps its rule
  // G_t = γ_t G_{t−1} + …, which the ledger holds against the gated definition (gated.hla2.algorithm1-rule).
  r.add_gates("hla2", "serial", "paper", "Alg. 1's rule with γ_t per token",
              [](const P& p, const Options& o, const S* s) {
                return f::gated_hla2_serial<T>(split_gates(p), o, s, f::DecayRule::paper);
              });
  r.add_gates("hla2", "serial", "corrected", "SPEC gated: G_t = γ_t² G_{t−1} + γ_t k_t k_tᵀ C_{t−1}",
              [](const P& p, const Options& o, const S* s) {
                return f::gated_hla2_serial<T>(split_gates(p), o, s, f::DecayRule::corrected);
              });
  r.add_gates("hla2", "serial-packed", "corrected", "SPEC gated rule over §5.2 packed S: S_t = γ_t S_{t−1} + k_t k_tᵀ",
              [](const P& p, const Options& o, const S* s) {
                return f::hla2_packed_serial<T>(p, o, s, f::DecayRule::corrected);
              });
  r.add_gates("hla2-unmasked", "serial", "paper", "S_t = γ_t S_{t−1} + k_t k_tᵀ, C_t likewise; o_t = q_tᵀ S_t C_t",
              [](const P& p, const Options& o, const S* s) {
                return f::gated_hla2_serial<T, false>(split_gates(p), o, s, f::DecayRule::corrected);
              });
  r.add_gates("ahla", "serial", "paper", "SPEC gated ahla: Alg. 2 with γ_t per token",
              [](const P& p, const Options& o, const S* s) { return f::gated_ahla_serial<T>(split_gates(p), o, s); });
  r.add_gates("linear", "serial", "paper", "SPEC gated linear: S_t = γ_t S_{t−1} + k_t v_tᵀ",
              [](const P& p, const Options& o, const S* s) { return f::gated_linear_serial<T>(split_gates(p), o, s); });
  // The decoding kernels with γ_t per token: the gated serial forms above (hla2: the corrected rule), re-laid out.
  r.add_gates("hla2", "decode", "corrected", "SPEC gated: G_t = γ_t² G_{t−1} + γ_t k_t k_tᵀ C_{t−1}; cache layout",
              hla2_decode);
  r.add_gates("hla2", "decode-packed", "corrected", "hla2/decode/corrected gated, §5.2 packed S", hla2_decode_packed);
  r.add_gates("ahla", "decode", "paper", "SPEC gated ahla: Alg. 2 with γ_t per token; cache layout", ahla_decode);
  r.add_gates("linear", "decode", "paper", "SPEC gated linear: S_t = γ_t S_{t−1} + k_t v_tᵀ; cache layout",
              linear_decode);
}

}  // namespace hla
