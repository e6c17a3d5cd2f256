// Registers the GPU forms (fast/cuda/device.hpp) for float and double where a CUDA device is present, so that every
// registry-driven tool (hla check, hla run, sweeps, the [gpu] tests) takes them up with no code of its own:
//   <op>/cuda-chunked        fp32 (float) or fp64 (double) products, cuBLAS pedantic: IEEE arithmetic throughout
//   <op>/cuda-chunked-tf32   float: TF32 tensor-core products, fp32 accumulation
//   <op>/cuda-chunked-bf16   float: bf16 tensor-core products, fp32 accumulation
//   <op>/cuda-fused[-tf32|-bf16]  the same in fused kernels (fast/cuda/fused.cuh), chunks of kFusedChunk tokens
// for linear, hla2 and ahla, fixed γ and per-token gates, normalized (ε), ridge (hla2), initial and final state.
// Caps::device marks them; Caps::products says how their products round (numerics/bounds.hpp reads it).
// The adapters below move a Problem (column-major) into the row-major batch of one sequence and convert the
// operators' named states to the passes' states and back.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "core/registry.hpp"
#include "core/state.hpp"
#include "fast/chunked/common.hpp"
#include "fast/cuda/device.hpp"
#include "fast/serial/ahla.hpp"
#include "fast/serial/hla2.hpp"
#include "fast/serial/linear.hpp"

namespace hla::fast::cuda {

using chunked::join;

template <class T> std::vector<T> row_major(const Mat<T>& m) {
  std::vector<T> out(static_cast<std::size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) out[static_cast<std::size_t>(r * m.cols() + c)] = m(r, c);
  return out;
}
template <class T> Mat<T> from_row_major(const std::vector<T>& v, Eigen::Index rows, Eigen::Index cols) {
  Mat<T> m(rows, cols);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c) m(r, c) = v[static_cast<std::size_t>(r * cols + c)];
  return m;
}

// The operators' typed states (fast/serial/) in the passes' terms (device.hpp), and back.
template <class T> PassStates<T> to_pass_states(GpuOp op, const NamedState<T>* init, Eigen::Index d, Eigen::Index dv) {
  PassStates<T> ps;
  auto add = [&](const Mat<T>& m) { ps.parts.push_back(row_major<T>(m)); };
  switch (op) {
    case GpuOp::linear: {
      const auto s = load_state<LinearState<T>>(init, d, dv);
      add(join(s.S, s.z));
      break;
    }
    case GpuOp::hla2: {  // u-form (fast/chunked/hla2.hpp): pass 1 reads qᵀ Sᵀ = (S q)ᵀ; C' = S C − G, m' = S m − h
      const auto s = load_state<Hla2State<T, true>>(init, d, dv);
      const Mat<T> C = join(s.C, s.m);
      add(s.S.transpose());
      add(Mat<T>(s.S * C - join(s.G, s.h)));
      add(C);
      break;
    }
    case GpuOp::ahla: {
      const auto s = load_state<AhlaState<T>>(init, d, dv);
      add(join(s.P, s.m));
      add(join(s.E, s.n));
      break;
    }
  }
  return ps;
}

template <class T> NamedState<T> from_pass_states(GpuOp op, const PassStates<T>& ps, Eigen::Index d, Eigen::Index dv) {
  auto part = [&](std::size_t i, Eigen::Index cols) { return from_row_major<T>(ps.parts.at(i), d, cols); };
  switch (op) {
    case GpuOp::linear: {
      const Mat<T> Sz = part(0, dv + 1);
      return export_state<LinearState<T>, T>({Sz.leftCols(dv), Sz.rightCols(1)});
    }
    case GpuOp::hla2: {  // G = S C − C', h = S m − m'
      const Mat<T> S = part(0, d).transpose(), Cp = part(1, dv + 1), C = part(2, dv + 1);
      const Mat<T> G = S * C - Cp;
      return export_state<Hla2State<T, true>, T>({S, C.leftCols(dv), C.rightCols(1), G.leftCols(dv), G.rightCols(1)});
    }
    case GpuOp::ahla: {
      const Mat<T> Pm = part(0, dv + 1), En = part(1, dv + 1);
      return export_state<AhlaState<T>, T>({Pm.leftCols(dv), Pm.rightCols(1), En.leftCols(dv), En.rightCols(1)});
    }
  }
  return {};
}

// One sequence's inputs in the device interface's terms: row-major copies, the batch that points into them, and the
// options (γ, ε, λ as this scalar holds them, as the CPU forms do; the fused kernels' own chunk width).
template <class T> struct DeviceCall {
  std::vector<T> q, k, v;
  std::vector<double> gates;
  Batch<T> batch;
  ForwardOptions o;
  DeviceCall(Products prec, bool fused, const Problem<T>& p, const Options& opt)
      : q(row_major<T>(p.Q)), k(row_major<T>(p.K)), v(row_major<T>(p.V)) {
    gates.resize(static_cast<std::size_t>(p.gates.size()));
    for (Eigen::Index t = 0; t < p.gates.size(); ++t)
      gates[static_cast<std::size_t>(t)] = static_cast<double>(p.gates(t));
    batch.T_len = static_cast<int>(p.n());
    batch.d = static_cast<int>(p.d());
    batch.dv = static_cast<int>(p.dv());
    batch.q = q.data();
    batch.k = k.data();
    batch.v = v.data();
    batch.gates = gates.empty() ? nullptr : gates.data();
    batch.gamma = static_cast<double>(from_rational<T>(opt.gamma));
    o.normalized = opt.normalized;
    o.eps = static_cast<double>(from_rational<T>(opt.eps));
    o.ridge = static_cast<double>(from_rational<T>(opt.ridge));
    o.chunk = fused ? kFusedChunk : opt.chunk;
    o.products = prec;
    o.fused = fused;
    o.state = opt.state;
  }
  // Runs f, with the device's errors in the registry's terms.
  template <class F> void run(F&& f) const {
    try {
      f();
    } catch (const NormalizerError& e) { throw NumericalError(e.what()); } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
  }
};

// One sequence through the GPU form: Problem in, Run out, errors in the registry's terms.
template <class T> Run<T> run_on_device(GpuOp op, Products prec, bool fused, const Problem<T>& p, const Options& opt,
                                        const NamedState<T>* init) {
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  PassStates<T> in = to_pass_states<T>(op, init, d, dv);  // checks an initial state's parts and shapes
  if (n == 0) return {Mat<T>(0, dv), opt.state ? from_pass_states<T>(op, in, d, dv) : NamedState<T>{}};
  const DeviceCall<T> call(prec, fused, p, opt);
  std::vector<T> out(static_cast<std::size_t>(n * dv));
  PassStates<T> fin;
  call.run([&] { forward<T>(op, call.batch, call.o, init ? &in : nullptr, out.data(), &fin); });
  return {from_row_major<T>(out, n, dv), opt.state ? from_pass_states<T>(op, fin, d, dv) : NamedState<T>{}};
}

// The gradients of L = Σ_t ⟨dO_t, o_t⟩ through the same GPU form from the zero state (device.hpp's backward): ∂L/∂Q,
// ∂L/∂K, ∂L/∂V, and ∂L/∂γ_t when the problem has gates (else empty).
template <class T> struct DeviceGradients {
  Mat<T> dQ, dK, dV;
  ColVec<T> dgamma;
};
template <class T> DeviceGradients<T> gradients_on_device(GpuOp op, Products prec, bool fused, const Problem<T>& p,
                                                          const Options& opt, const Mat<T>& dO) {
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  if (dO.rows() != n || dO.cols() != dv) throw InputError("GPU backward: dO must be n x dv");
  DeviceGradients<T> g{Mat<T>::Zero(n, d), Mat<T>::Zero(n, d), Mat<T>::Zero(n, dv), ColVec<T>::Zero(p.gates.size())};
  if (n == 0) return g;
  const DeviceCall<T> call(prec, fused, p, opt);
  const std::vector<T> up = row_major<T>(dO);
  std::vector<T> dq(static_cast<std::size_t>(n * d)), dk(dq.size()), dvv(static_cast<std::size_t>(n * dv)),
      dg(call.gates.size());
  call.run([&] {
    backward<T>(op, call.batch, call.o, up.data(), dq.data(), dk.data(), dvv.data(), dg.empty() ? nullptr : dg.data());
  });
  g.dQ = from_row_major<T>(dq, n, d);
  g.dK = from_row_major<T>(dk, n, d);
  g.dV = from_row_major<T>(dvv, n, dv);
  for (std::size_t t = 0; t < dg.size(); ++t) g.dgamma(static_cast<Eigen::Index>(t)) = dg[t];
  return g;
}

}  // namespace hla::fast::cuda

namespace hla {

template <class T> void register_cuda(Registry<T>& r) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    namespace c = hla::fast::cuda;
    if (!c::device_available()) return;
    std::vector<Products> precisions{Products::ieee};
    if constexpr (std::is_same_v<T, float>) precisions = {Products::ieee, Products::tf32, Products::bf16};
    const std::string cublas_how =
        "; chunked passes on the GPU, products batched over every chunk (cuBLAS), gate factors from within-chunk "
        "log-gates in double";
    const std::string fused_how =
        "; chunked passes on the GPU in fused kernels (each chunk's state; a scan across chunks; each chunk's "
        "outputs with its masked products in shared memory), chunks of 64, gate factors as the cuBLAS form's";
    for (const bool fused : {false, true})
      for (const Products prec : precisions) {
        std::string form = fused ? "cuda-fused" : "cuda-chunked";
        if (prec != Products::ieee) form.append("-").append(name_of(prec));
        const std::string how = fused ? fused_how : cublas_how;
        auto fn = [prec, fused](c::GpuOp op) {
          return [op, prec, fused](const Problem<T>& p, const Options& o, const NamedState<T>* s) {
            return c::run_on_device<T>(op, prec, fused, p, o, s);
          };
        };
        Caps caps{.decay = true, .normalized = true, .state = true, .chunk = !fused, .device = true, .products = prec};
        struct Op {
          const char* name;
          const char* variant;
          c::GpuOp op;
          const char* cite;
        };
        for (const Op& op :
             {Op{"linear", "paper", c::GpuOp::linear, "first-order chunk form: one pass (q, k, [v 1])"},
              Op{"hla2", "corrected", c::GpuOp::hla2,
                 "u-form of hla2/chunked: u_j = S_j q_j by the pass (q, k, k), o by the pass (q, u, [v 1]) with Γ², "
                 "ridge by the pass (q, q, [v 1])"},
              Op{"ahla", "paper", c::GpuOp::ahla,
                 "Alg. 2 as two passes: r_i = P_iᵀ q_i by the pass (q, k, [v 1]), o by the pass (q, k, r)"}}) {
          caps.ridge = op.op == c::GpuOp::hla2;
          const std::string cite = std::string(op.cite).append(how);
          r.add({.op = op.name, .form = form, .variant = op.variant, .cite = cite, .caps = caps, .fn = fn(op.op)});
          r.add_gates(op.name, form, op.variant, std::string(op.cite).append(" with per-token gates").append(how),
                      fn(op.op));
        }
      }
  }
}

}  // namespace hla
