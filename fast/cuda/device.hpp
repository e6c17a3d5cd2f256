// The GPU forms' host interface (fast/cuda/): plain C++ (no CUDA, no Eigen), so that the registry, the CLI and the
// tests include it in every build (fast/cuda/device.cpp). Built with CUDA (CMake found nvcc), the functions run on
// the first CUDA device through libhla_cuda.so, loaded on first use; built without, compiled() is false and the rest
// throws.
//
// Every GPU form is composed of one building block, a chunked gated first-order pass (fast/cuda/pass.cu):
//   out_t = Σ_{j≤t} Γ(t,j)^p (qry_t·key_j) val_j + Γ(t,−1)^p qry_tᵀ X_in,   X_out = Γ(n−1,−1)^p X_in + Σ_j Γ(n−1,j)^p
//   key_j val_jᵀ
// with Γ(t, s) = Π_{r=s+1..t} γ_r (SPEC "Gated decay"; a fixed γ is the constant gate) and p = 1 or 2:
//   linear  one pass  (q, k, [v 1], p = 1): state [S z]
//   hla2    u_j = S_j q_j is the pass (q, k, k, 1) (state S); o is the pass (q, u, [v 1], 2) from C' = S C − G (the
//           u-form of fast/chunked/hla2.hpp: C' = S C − G); ridge adds λ × the pass (q, q, [v 1], 1), whose state is
//           [C m] (run for the state alone when there is no ridge)
//   ahla    r_i = P_iᵀ q_i is the pass (q, k, [v 1], 1) (state [P m]); o is the pass (q, k, r, 1) (state [E n])
// and normalized outputs divide the value columns by the ones column's + ε.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/products.hpp"

namespace hla::fast::cuda {

// How a GPU form's matrix products multiply (core/products.hpp): ieee is cuBLAS's pedantic fp32 / fp64.
using hla::Products;

// Whether this build has the CUDA forms; whether a CUDA device can run them now (a driver and a card).
bool compiled();
bool device_available();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB), driver 13.0, runtime 13.0, cuBLAS 13.0.0" or why there is none.
std::string device_description();

enum class GpuOp { linear, hla2, ahla };
// The operator a GpuOp computes, by its operator id (core/operators.hpp); none for an operator without GPU forms.
inline std::optional<GpuOp> gpu_op_named(const std::string& op) {
  if (op == "linear") return GpuOp::linear;
  if (op == "hla2") return GpuOp::hla2;
  if (op == "ahla") return GpuOp::ahla;
  return std::nullopt;
}

// The fused forms' chunk width (fast/cuda/fused.cuh): fixed, their kernels' tiles are cut for it.
inline constexpr int kFusedChunk = 64;

struct ForwardOptions {
  bool normalized = false;
  double eps = 0;
  double ridge = 0;  // λ (hla2)
  int chunk = 64;    // chunk width w (kFusedChunk for the fused pass)
  Products products = Products::ieee;
  bool fused = false;  // the fused kernels (fused.cuh) instead of the cuBLAS products
  bool state = true;   // compute the final state
};

// The states the passes carry, per sequence, each part [seqs][rows][cols] row-major (the pass states above):
//   linear: {[S z]} (d × (dv+1));  hla2: {Sᵀ (d×d), [C' m'] (d×(dv+1)), [C m] (d×(dv+1))};  ahla: {[P m], [E n]}
// The registry's adapters (fast/cuda/register.hpp) convert them to and from the operators' named states.
template <class T> struct PassStates { std::vector<std::vector<T>> parts; };
// The shape of each pass state part, in the order above.
// Inline: the CUDA library (pass.cu) and the host side (device.cpp, the registry) both read it, and the library is
// loaded with dlopen, so it cannot take the symbol from the host program (the first GPU run failed on exactly that).
inline std::vector<std::pair<int, int>> pass_state_shapes(GpuOp op, int d, int dv) {
  switch (op) {
    case GpuOp::linear:
      return {{d, dv + 1}};
    case GpuOp::hla2:
      return {{d, d}, {d, dv + 1}, {d, dv + 1}};
    case GpuOp::ahla:
      return {{d, dv + 1}, {d, dv + 1}};
  }
  return {};
}

// seqs independent sequences of T tokens, row-major [seqs][T][d] (q, k) and [seqs][T][dv] (v), gates [seqs][T]
// (empty: the fixed decay gamma for every token). Outputs [seqs][T][dv]. state_in: null for the zero state.
// Throws std::runtime_error naming the CUDA error (no device, out of memory, ...), and hla-style messages for a
// vanishing normalizer (NormalizerError).
struct NormalizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <class T> struct Batch {
  int seqs = 1, T_len = 0, d = 0, dv = 0;
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const double* gates = nullptr;
  double gamma = 1;
};
template <class T> void forward(GpuOp op, const Batch<T>& in, const ForwardOptions& o, const PassStates<T>* state_in,
                                T* out, PassStates<T>* state_out);

// The gradients of L = Σ_t ⟨dO_t, o_t⟩ (dO [seqs][T][dv]) from the zero state: dq, dk [seqs][T][d], dv [seqs][T][dv],
// and with gates dgamma [seqs][T] (∂L/∂γ_t; null: not wanted). Every operator's backward is the same first-order pass
// run forward and backward in time (pass.cu says how); o.state is ignored (no final state is carried).
template <class T>
void backward(GpuOp op, const Batch<T>& in, const ForwardOptions& o, const T* dO, T* dq, T* dk, T* dv, T* dgamma);

// Timing on the device: random inputs made there (q, k scaled by d^-1/2, v unit normal, gates in [gate_lo, 1] or the
// fixed gamma when gate_lo <= 0), `reps` timed forward calls (forward + backward with `with_backward`, from a
// uniform upstream) after one warm-up, CUDA events around each.
struct Timing {
  std::vector<double> ms;      // each rep's time
  double device_bytes = 0;     // what the form allocated on the device (inputs, outputs, workspace)
  double peak_bytes_used = 0;  // the device's used memory at its highest (cudaMemGetInfo), minus before the call
};
template <class T> Timing time_forward(GpuOp op, int seqs, int T_len, int d, int dv, double gate_lo, double gamma,
                                       const ForwardOptions& o, int reps, std::uint64_t seed,
                                       bool with_backward = false);

}  // namespace hla::fast::cuda
