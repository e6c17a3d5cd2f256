// Registers every scan form for scalar T: (scan-fold | scan-blelloch | scan-twolevel) × the operators of
// fast/scan/ × their variants ("paper" = as printed, "corrected" = derived, where the printed one fails).
#pragma once

#include "core/registry.hpp"
#include "fast/scan/gated.hpp"
#include "fast/scan/operators.hpp"

namespace hla {

namespace scan {
template <class T, class MakeOp>
void add_scan_forms(Registry<T>& r, const std::string& op, Variant v, const std::string& cite, Caps caps, MakeOp make) {
  using P = Problem<T>;
  using S = NamedState<T>;
  caps.state = true;
  r.add({op, "scan-fold", variant_name(v), cite + "; sequential fold", caps,
         [make](const P& p, const Options& o, const S* s) { return scan_fold(make(o), p, s); }});
  Caps par = caps;
  par.threads = true;
  r.add({op, "scan-blelloch", variant_name(v), cite + "; exclusive Blelloch scan + local inclusion (Remark 4.2)", par,
         [make](const P& p, const Options& o, const S* s) { return scan_blelloch(make(o), p, s, o.threads); }});
  par.chunk = true;
  r.add(
      {op, "scan-twolevel", variant_name(v), cite + "; scan within chunks, scan across chunk summaries (§4)", par,
       [make](const P& p, const Options& o, const S* s) { return scan_twolevel(make(o), p, s, o.chunk, o.threads); }});
}

// Gives op's three scan forms of gated_scan_variant(op) their gated computation: the same drivers over the
// operator whose single-token segment carries ρ = γ_t (gated.hpp).
template <class T> void add_gated_scan_forms(Registry<T>& r, const std::string& op) {
  using P = Problem<T>;
  using S = NamedState<T>;
  const std::string v = gated_scan_variant(op), cite = "segment decay ρ = Π γ_t over the segment (gated.hpp)";
  r.add_gates(op, "scan-fold", v, cite, [op](const P& p, const Options& o, const S* s) {
    return with_gated_scan_op<T>(op, o, p.gates, [&](const auto& alg) { return scan_fold(alg, p, s); });
  });
  r.add_gates(op, "scan-blelloch", v, cite, [op](const P& p, const Options& o, const S* s) {
    return with_gated_scan_op<T>(op, o, p.gates, [&](const auto& alg) { return scan_blelloch(alg, p, s, o.threads); });
  });
  r.add_gates(op, "scan-twolevel", v, cite, [op](const P& p, const Options& o, const S* s) {
    return with_gated_scan_op<T>(op, o, p.gates,
                                 [&](const auto& alg) { return scan_twolevel(alg, p, s, o.chunk, o.threads); });
  });
}
}  // namespace scan

template <class T> void register_scan(Registry<T>& r) {
  using namespace scan;
  const Caps second{.decay = true, .normalized = true, .ridge = true};
  const Caps first{.decay = true, .normalized = true};
  const Caps third{.normalized = true};
  add_scan_forms(r, "hla2", Variant::paper, "eq. 4.1; §4.2 decay-aware masked ⊕γ as printed; Thm 4.1", second,
                 [](const Options& o) { return Hla2Op<T, true>(o, Variant::paper); });
  add_scan_forms(r, "hla2", Variant::corrected, "eq. 4.1 with G = ρB²GA + GB + SB(ρB CA) (derived)", second,
                 [](const Options& o) { return Hla2Op<T, true>(o, Variant::corrected); });
  add_scan_forms(r, "hla2-unmasked", Variant::paper, "§4.1 monoid; §4.2 decay-aware (S, C, m, ρ)", second,
                 [](const Options& o) { return Hla2Op<T, false>(o, Variant::paper); });
  add_scan_forms(r, "ahla", Variant::paper, "eq. 6.2; §6.2 decay-aware concatenation as printed", first,
                 [](const Options& o) { return AhlaOp<T>(o, Variant::paper); });
  add_scan_forms(r, "ahla", Variant::corrected, "eq. 6.2 with undecayed R_AB = RA + RB (derived)", first,
                 [](const Options& o) { return AhlaOp<T>(o, Variant::corrected); });
  add_scan_forms(r, "hla3", Variant::paper, "⊗3 eqs. 7.6–7.7 (dense maps); Thm 7.2; Alg. 4", third,
                 [](const Options& o) { return Hla3TensorOp<T>(o); });
  add_scan_forms(r, "hla3", Variant::corrected, "minimal concatenation of F_t = F_{t−1} + S^K_t q_t q_tᵀ P_t (derived)",
                 third, [](const Options& o) { return Hla3MinimalOp<T>(o); });
  add_scan_forms(r, "linear", Variant::paper,
                 "first-order (S, z, ρ) decayed monoid (§4 connection to linear attention)", first,
                 [](const Options& o) { return LinearOp<T>(o); });
  for (const char* op : {"hla2", "ahla", "linear"}) add_gated_scan_forms(r, op);
}

}  // namespace hla

// What the generated unit of this kind compiles besides register_scan<T> (CMakeLists.txt): the operator classes,
// which every other unit declares extern (fast/scan/operators.hpp).
#define HLA_KIND_INSTANTIATIONS(T) \
  namespace hla::scan {            \
  HLA_SCAN_OPERATORS(, T)          \
  }
