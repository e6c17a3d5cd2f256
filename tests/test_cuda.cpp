// The GPU forms (fast/cuda/, docs/gpu.md) against the exact operators, on the device: every registered GPU form
// (linear, hla2, ahla × fp32 / tf32 / bf16 products, and fp64) × options (γ = 1, fixed γ, normalized, ridge, weak and
// strong per-token gates) × n × chunk width (n a multiple of none but 1), held to the proven rounding bound of the
// precision it computes in (numerics/gated_check.hpp); a sequence split in two and carried through the GPU form's own
// state, and through a state the CPU's serial form made; outputs only; several sequences in one call.
// Tagged [gpu] and hidden ([.]): `make test-gpu` runs them where a CUDA device is, and fails where there is none.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/gates.hpp"
#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "fast/cuda/device.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/gated_check.hpp"
#include "tests/gated_cases.hpp"
#include "verify/battery.hpp"
#include "verify/exec.hpp"

using namespace hla;
namespace cuda = hla::fast::cuda;

namespace {

// One option set of the GPU test: fixed γ (opt.gamma) or gates of a strength (0: none), and the options.
struct GpuCase {
  std::string label;
  Options opt;
  double gate_strength = 0;
};

std::vector<GpuCase> gpu_cases(const std::string& op) {
  std::vector<GpuCase> cs;
  cs.push_back({"plain", {}, 0});
  Options g34;
  g34.gamma = rational(3, 4);
  cs.push_back({"gamma=3/4", g34, 0});
  Options norm;
  norm.normalized = true;
  norm.eps = rational(1, 8);
  cs.push_back({"normalized eps=1/8", norm, 0});
  cs.push_back({"weak gates", {}, 0.02});
  cs.push_back({"strong gates, normalized", norm, 0.7});
  if (op == "hla2") {
    Options ridge;
    ridge.ridge = rational(1, 2);
    cs.push_back({"ridge=1/2", ridge, 0});
    Options both = norm;
    both.ridge = rational(3, 2);
    cs.push_back({"ridge=3/2 normalized, gates", both, 0.1});
  }
  return cs;
}

// Float-representable inputs, and the gates the reference runs with (a fixed γ as its constant gate).
struct Prepared {
  GatedProblem<double> g;   // what the reference sees
  Problem<double> form_in;  // what the form sees: gates only when the case has them
};
Prepared prepare(const Shape& s, const GpuCase& c, std::uint64_t seed) {
  Prepared p;
  p.form_in = gaussian_problem(s, seed);
  p.g.qkv = p.form_in;
  if (c.gate_strength > 0) {
    p.g.gamma = gated_tests::gates_of_strength(s.n, c.gate_strength, seed + 1);
    p.form_in.gates = p.g.gamma;
  } else {
    p.g.gamma = ColVec<double>::Constant(s.n, from_rational<double>(c.opt.gamma));
  }
  return p;
}

Options reference_options(const GpuCase& c) {
  Options o = c.opt;
  o.gamma = 1;  // the reference's decay is its gates
  return o;
}

// Held to the form's own depth (bounds::accumulation_depth: w + n/w per level for the GPU forms, the fused ones at
// their own width; log-domain gate factors), plus the serial form's where a CPU serial run did part of the work.
template <class T> gated::FloatingCheck held(const Entry<T>& e, const Mat<T>& O, const gated::FloatingReference& ref,
                                             const Options& o, const ColVec<double>& gates, int w, Eigen::Index d,
                                             bool with_serial = false) {
  const long h = gated::gated_form_depth(e.op, e.form, gates, w, d) +
                 (with_serial ? gated::gated_form_depth(e.op, "serial", gates, w, d) : 0);
  return gated::check_within_bound(O, ref, o, h, e.op, e.caps.products);
}

template <class T> std::vector<const Entry<T>*> device_forms() {
  std::vector<const Entry<T>*> out;
  for (const auto& e : registry<T>().entries())
    if (e.caps.device) out.push_back(&e);
  return out;
}

template <class T> void check_every_gpu_form() {
  const auto forms = device_forms<T>();
  REQUIRE(!forms.empty());
  const Shape base{0, 5, 3};
  std::uint64_t seed = 11;
  for (const Eigen::Index n : {Eigen::Index(1), Eigen::Index(7), Eigen::Index(40), Eigen::Index(131)}) {
    for (const std::string op : {"linear", "hla2", "ahla"}) {
      for (const GpuCase& c : gpu_cases(op)) {
        Shape s = base;
        s.n = n;
        const Prepared in = prepare(s, c, ++seed);
        const Options ro = reference_options(c);
        const gated::FloatingReference ref = gated::floating_reference(op, in.g, ro);
        const Problem<T> p = convert_problem<T>(in.form_in);
        for (const Entry<T>* e : forms) {
          if (e->op != op) continue;
          for (const int w : {1, 3, 16, 64}) {
            Options o = c.opt;
            o.chunk = w;
            INFO(e->key() << " [" << name_of(e->caps.products) << "] " << c.label << " n=" << n << " w=" << w);
            const Run<T> r = (*e)(p, o);
            const gated::FloatingCheck chk = held(*e, r.O, ref, ro, in.g.gamma, w, s.d);
            INFO("error / bound " << chk.err_over_bound << ", normwise relative error " << chk.normwise_rel);
            CHECK(chk.err_over_bound <= 1);
            // Outputs only: the same outputs to the bit, no state.
            Options bare = o;
            bare.state = false;
            const Run<T> only = (*e)(p, bare);
            CHECK(only.O == r.O);
            CHECK(only.state.parts.empty());
          }
        }
      }
    }
  }
}

// A sequence split at m and carried: the second call starts from the first call's final state (the GPU form's own),
// or from the CPU serial form's (the named states are exchangeable); its outputs within the whole sequence's bound.
template <class T> void check_split_and_carry() {
  const Shape s{40, 4, 3};
  const Eigen::Index m = 17;
  std::uint64_t seed = 500;
  for (const Entry<T>* e : device_forms<T>()) {
    for (const GpuCase& c : gpu_cases(e->op)) {
      const Prepared in = prepare(s, c, ++seed);
      const Options ro = reference_options(c);
      const gated::FloatingReference ref = gated::floating_reference(e->op, in.g, ro);
      const Problem<T> all = convert_problem<T>(in.form_in);
      auto rows = [&](Eigen::Index from, Eigen::Index count) {
        Problem<T> part{all.Q.middleRows(from, count), all.K.middleRows(from, count), all.V.middleRows(from, count)};
        if (all.gates.size()) part.gates = all.gates.segment(from, count);
        return part;
      };
      const Problem<T> head = rows(0, m), tail = rows(m, s.n - m);
      gated::FloatingReference tail_ref = ref;
      tail_ref.O = ref.O.bottomRows(s.n - m);
      tail_ref.den = ref.den.tail(s.n - m);
      tail_ref.A = ref.A.bottomRows(s.n - m);
      for (const int w : {3, 16}) {
        Options o = c.opt;
        o.chunk = w;
        INFO(e->key() << " [" << name_of(e->caps.products) << "] " << c.label << " w=" << w);
        const Run<T> first = (*e)(head, o);
        const Run<T> second = (*e)(tail, o, &first.state);
        CHECK(held(*e, second.O, tail_ref, ro, in.g.gamma, w, s.d).err_over_bound <= 1);
        // The CPU serial form's state (the corrected variant where the paper's fails) as the initial state.
        const Entry<T>& serial = registry<T>().find_exact(e->op, "serial");
        const Run<T> cpu = serial(head, o);
        const Run<T> continued = (*e)(tail, o, &cpu.state);
        CHECK(held(*e, continued.O, tail_ref, ro, in.g.gamma, w, s.d, true).err_over_bound <= 1);
        // and the GPU's final state continues on the CPU
        REQUIRE(first.state.parts.size() == cpu.state.parts.size());
        const Run<T> on_cpu = serial(tail, o, &first.state);
        CHECK(held(*e, on_cpu.O, tail_ref, ro, in.g.gamma, w, s.d, true).err_over_bound <= 1);
      }
    }
  }
}

}  // namespace

TEST_CASE("GPU forms: a device, and every GPU form registered", "[.][gpu]") {
  INFO(cuda::device_description());
  REQUIRE(cuda::compiled());
  REQUIRE(cuda::device_available());
  CHECK(device_forms<float>().size() == 18);  // linear, hla2, ahla × ieee, tf32, bf16 × cuBLAS, fused
  CHECK(device_forms<double>().size() == 6);
  for (const Entry<float>* e : device_forms<float>()) CHECK(e->gated);
}

TEST_CASE("GPU forms: within the rounding bound of their precision, every option, n and width", "[.][gpu]") {
  check_every_gpu_form<float>();
  check_every_gpu_form<double>();
}

TEST_CASE("GPU forms: split and carried through their own and the CPU's state", "[.][gpu]") {
  check_split_and_carry<float>();
  check_split_and_carry<double>();
}

TEST_CASE("GPU forms: several sequences in one call, each its own", "[.][gpu]") {
  // Three independent gated sequences (B × H = 3) in one batch, each against its own reference.
  const Shape s{50, 6, 4};
  for (const cuda::GpuOp op : {cuda::GpuOp::linear, cuda::GpuOp::hla2, cuda::GpuOp::ahla}) {
    const std::string name = op == cuda::GpuOp::linear ? "linear" : op == cuda::GpuOp::hla2 ? "hla2" : "ahla";
    std::vector<float> q, k, v;
    std::vector<double> gates;
    std::vector<gated::FloatingReference> refs;
    std::vector<ColVec<double>> gs;
    Options o;
    o.normalized = true;
    o.eps = rational(1, 4);
    for (int seq = 0; seq < 3; ++seq) {
      const Problem<double> p = gaussian_problem(s, 900 + seq);
      const ColVec<double> g = gated_tests::gates_of_strength(s.n, 0.05 * (seq + 1), 950 + seq);
      refs.push_back(gated::floating_reference(name, GatedProblem<double>{p, g}, o));
      gs.push_back(g);
      const auto add = [](std::vector<float>& to, const Mat<double>& m) {
        for (Eigen::Index r = 0; r < m.rows(); ++r)
          for (Eigen::Index c = 0; c < m.cols(); ++c) to.push_back(static_cast<float>(m(r, c)));
      };
      add(q, p.Q);
      add(k, p.K);
      add(v, p.V);
      for (Eigen::Index t = 0; t < s.n; ++t) gates.push_back(g(t));
    }
    cuda::Batch<float> b;
    b.seqs = 3;
    b.T_len = static_cast<int>(s.n);
    b.d = static_cast<int>(s.d);
    b.dv = static_cast<int>(s.dv);
    b.q = q.data();
    b.k = k.data();
    b.v = v.data();
    b.gates = gates.data();
    cuda::ForwardOptions fo;
    fo.normalized = true;
    fo.eps = 0.25;
    fo.chunk = 16;
    std::vector<float> out(static_cast<std::size_t>(3 * s.n * s.dv));
    cuda::forward<float>(op, b, fo, nullptr, out.data(), nullptr);
    for (int seq = 0; seq < 3; ++seq) {
      Mat<float> O(s.n, s.dv);
      for (Eigen::Index t = 0; t < s.n; ++t)
        for (Eigen::Index c = 0; c < s.dv; ++c) O(t, c) = out[static_cast<std::size_t>((seq * s.n + t) * s.dv + c)];
      const long h = gated::gated_form_depth(name, "chunked", gs[seq], 16, s.d);
      INFO(name << " sequence " << seq);
      CHECK(gated::check_within_bound(O, refs[seq], o, h).err_over_bound <= 1);
    }
  }
}

// The outside path: every GPU form answers `hla verify`'s battery through `hla exec-form` (the --exec protocol's
// files, a kept process), forward and backward, and is judged as a kernel written elsewhere would be: exact cases
// (dyadic and weak gates, every option group), random ones up to n = 100 (d = dv = 8), n not a multiple of the chunk
// width, the gradients dq, dk, dv (and dgamma with gates) against the exact ones within their bounds, at the precision
// its products declare (fp32 / fp64 for ieee, tf32, bf16); split and carried through the form's own state (ieee forms).
TEST_CASE("GPU forms: hla verify through exec-form, forward and backward, every form", "[.][gpu]") {
  using verify::ext::Request;
  REQUIRE(cuda::device_available());
  struct Setting {
    std::string label;
    bool gates, grad, state, normalized;
  };
  const std::vector<Setting> settings = {{"gates, grad", true, true, false, false},
                                         {"gamma=9/10, normalized, grad", false, true, false, true},
                                         {"gates, normalized, state", true, false, true, true}};
  for (const auto& e : registry<float>().entries()) {
    if (!e.caps.device || !e.gated) continue;
    for (const bool dbl : {false, true}) {
      if (dbl && e.caps.products != Products::ieee) continue;
      for (const Setting& st : settings) {
        if (st.state && e.caps.products != Products::ieee) continue;  // the carry is the pass's, whatever products
        Request req;
        req.op = e.op;
        req.dtype = dbl ? verify::ext::DType::float64 : verify::ext::DType::float32;
        if (e.caps.products == Products::tf32) req.precision = verify::ext::Precision::tf32;
        if (e.caps.products == Products::bf16) req.precision = verify::ext::Precision::bf16;
        req.gates = st.gates;
        req.grad = st.grad;
        req.state = st.state;
        req.max_n = 100;
        req.d = req.dv = 8;
        req.opt.normalized = st.normalized;
        if (st.normalized) req.opt.eps = rational(1, 8);
        if (!st.gates) req.opt.gamma = rational(9, 10);
        if (e.op == "hla2" && st.grad) req.opt.ridge = rational(1, 2);
        verify::ext::ExecImplementation impl(std::string(HLA_CLI) + " exec-form --form " + e.form, 300);
        const nlohmann::json report = verify::ext::run_battery(impl, req);
        INFO(e.op << "/" << e.form << (dbl ? " double" : " float") << ", " << st.label << "\n"
                  << verify::ext::summary_text(report));
        CHECK(report["verdict"].get<std::string>() == "computes");
      }
    }
  }
}
