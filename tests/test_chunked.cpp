// Chunked matrix forms (fast/chunked/): exact agreement with SPEC's references in rationals and in the
// prime field for every chunk width (1, 2, 3, 5, n, > n), decay, normalization and ridge; split-and-carry
// exactness and agreement of the final state with the serial forms'; the drawn figure formulas
// implemented as printed (with their exact, derived deviation from the reference); and the float/double
// fast path against MPFR within a tolerance derived from a rounding-error bound.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "fast/chunked/hla2.hpp"
#include "fast/gemm/transpose.hpp"
#include "fast/heads.hpp"
#include "numerics/compare.hpp"

using namespace hla;

namespace {

// The chunked forms that claim SPEC-exact algebra, with the serial form whose state they share.
struct ExactForm {
  std::string op, form, variant, serial_variant;
  bool decay, ridge;
};
const std::vector<ExactForm>& exact_forms() {
  static const std::vector<ExactForm> f{
      {"hla2", "chunked", "corrected", "corrected", true, true},
      {"hla2", "chunked-monoid", "corrected", "corrected", true, true},
      {"hla2", "chunked-fused", "corrected", "corrected", true, true},
      {"ahla", "chunked", "paper", "paper", true, false},
      {"hla3", "chunked", "corrected", "corrected", false, false},
      {"linear", "chunked", "paper", "paper", true, false},
  };
  return f;
}

Options make_options(const rational& gamma, bool normalized, int chunk, int threads = 1, const rational& ridge = 0) {
  Options o;
  o.gamma = gamma;
  o.normalized = normalized;
  o.eps = normalized ? rational(1, 8) : rational(0);
  o.ridge = ridge;
  o.chunk = chunk;
  o.threads = threads;
  return o;
}

template <class T> void require_same_state(const NamedState<T>& a, const NamedState<T>& b) {
  REQUIRE(a.parts.size() == b.parts.size());
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    INFO("state part " << a.parts[i].first);
    REQUIRE(a.parts[i].first == b.parts[i].first);
    REQUIRE(compare_exact(a.parts[i].second, b.parts[i].second).exact_equal);
  }
}

}  // namespace

TEST_CASE("chunked forms equal the reference exactly in rationals for every chunk width", "[chunked]") {
  const Eigen::Index n = 7;
  const Problem<rational> p = convert_problem<rational>(gaussian_problem({n, 3, 2}, 11));
  for (const auto& f : exact_forms()) {
    const Entry<rational>& e = registry<rational>().find(f.op, f.form, f.variant);
    for (int w : {1, 2, 3, 5, int(n), int(n) + 3})
      for (const rational& gamma : {rational(1), rational(3, 4)})
        for (bool normalized : {false, true})
          for (const rational& ridge : {rational(0), rational(1, 2)}) {
            if ((gamma != 1 && !f.decay) || (ridge != 0 && !f.ridge)) continue;
            const Options o = make_options(gamma, normalized, w, 1, ridge);
            INFO(e.key() << " w=" << w << " gamma=" << gamma << " normalized=" << normalized << " ridge=" << ridge);
            const Mat<rational> ref = registry<rational>().reference(f.op)(p, o).O;
            REQUIRE(compare_exact(e(p, o).O, ref).exact_equal);
          }
  }
}

TEST_CASE("chunked forms split and carried equal one call, and end in the serial form's state", "[chunked]") {
  const Eigen::Index n = 9;
  const Problem<rational> p = convert_problem<rational>(gaussian_problem({n, 3, 2}, 12));
  for (const auto& f : exact_forms()) {
    const Entry<rational>& e = registry<rational>().find(f.op, f.form, f.variant);
    const Entry<rational>& serial = registry<rational>().find(f.op, "serial", f.serial_variant);
    for (const rational& gamma : {rational(1), rational(3, 4)}) {
      if (gamma != 1 && !f.decay) continue;
      for (int w : {2, 3, 4}) {
        const Options o = make_options(gamma, true, w, 2);
        INFO(e.key() << " w=" << w << " gamma=" << gamma);
        const Run<rational> whole = e(p, o);
        require_same_state(whole.state, serial(p, o).state);
        for (Eigen::Index split : {1, 4, 5}) {
          INFO("split at " << split);
          const Run<rational> first = e(slice_rows(p, 0, split), o);
          const Run<rational> second = e(slice_rows(p, split, n), o, &first.state);
          REQUIRE(compare_exact(Mat<rational>(first.O), Mat<rational>(whole.O.topRows(split))).exact_equal);
          REQUIRE(compare_exact(Mat<rational>(second.O), Mat<rational>(whole.O.bottomRows(n - split))).exact_equal);
          require_same_state(second.state, whole.state);
        }
      }
    }
  }
}

TEST_CASE("chunked forms over many groups of chunks equal the serial form exactly, in parallel", "[chunked]") {
  // Chunks are processed in groups (16 chunks on one thread, 32 per thread on more), the state carried
  // from one group to the next, or (chunked-fused) in one contiguous block per thread, the blocks joined by
  // a scan of their summaries and a correction of their outputs. n = 300 at w = 1..3 gives 2–19 groups and
  // 1–4 blocks, so every thread count runs across group and block boundaries, with decay, normalization,
  // ridge and an initial state: a block prefix that missed a term, a decay or a block would differ here.
  const Eigen::Index n = 300;
  const Problem<fp61> p = field_problem({n, 4, 3}, 17);
  for (const auto& f : exact_forms()) {
    const Entry<fp61>& e = registry<fp61>().find(f.op, f.form, f.variant);
    const Entry<fp61>& serial = registry<fp61>().find(f.op, "serial", f.serial_variant);
    for (int w : {1, 2, 3})
      for (int threads : {1, 2, 3, 4})
        for (bool normalized : {false, true}) {
          const Options o = make_options(f.decay ? rational(3, 4) : rational(1), normalized, w, threads,
                                         f.ridge && normalized ? rational(1, 3) : rational(0));
          INFO(e.key() << " w=" << w << " threads=" << threads << " normalized=" << normalized);
          const Run<fp61> expected = serial(p, o), got = e(p, o);
          REQUIRE(compare_exact(got.O, expected.O).exact_equal);
          require_same_state(got.state, expected.state);
          const Run<fp61> first = serial(slice_rows(p, 0, 37), o);  // continue from a nonzero state
          const Problem<fp61> rest = slice_rows(p, 37, n);
          REQUIRE(compare_exact(e(rest, o, &first.state).O, serial(rest, o, &first.state).O).exact_equal);
        }
  }
}

TEST_CASE("chunked forms equal the reference exactly in the prime field at larger n, in parallel", "[chunked]") {
  const Problem<fp61> p = field_problem({45, 4, 3}, 13);
  for (const auto& f : exact_forms()) {
    const Entry<fp61>& e = registry<fp61>().find(f.op, f.form, f.variant);
    for (int w : {4, 7, 16}) {
      const Options o =
          make_options(f.decay ? rational(3, 4) : rational(1), true, w, 2, f.ridge ? rational(1, 3) : rational(0));
      INFO(e.key() << " w=" << w);
      REQUIRE(compare_exact(e(p, o).O, registry<fp61>().reference(f.op)(p, o).O).exact_equal);
    }
  }
}

// Figure 1(C) as drawn omits the pairs (i in earlier chunks, j in the current chunk): derived in
// fast/chunked/figures.hpp, figure1c_t = hla2_t − q_tᵀ S^{K,(k−1)} Σ_{c≤j≤t} q_j v_jᵀ.
TEST_CASE("Figure 1(C) is implemented as drawn: exact on one chunk, off by the derived cross term", "[chunked]") {
  const Eigen::Index n = 8;
  const Problem<rational> p = convert_problem<rational>(gaussian_problem({n, 3, 2}, 14));
  const Entry<rational>& fig = registry<rational>().find("hla2", "chunk-figure1c", "paper");
  const Entry<rational>& ref = registry<rational>().reference("hla2");
  const Mat<rational> expected = ref(p, Options{}).O;
  for (int w : {int(n), int(n) + 2}) REQUIRE(compare_exact(fig(p, make_options(1, false, w)).O, expected).exact_equal);
  for (int w : {1, 2, 3, 5}) {
    INFO("w=" << w);
    const Mat<rational> got = fig(p, make_options(1, false, w)).O;
    Mat<rational> fixed = got;
    for (Eigen::Index t = 0; t < n; ++t) {
      const Eigen::Index c = (t / w) * w;
      Mat<rational> S0 = Mat<rational>::Zero(3, 3), Cin = Mat<rational>::Zero(3, 2);
      for (Eigen::Index i = 0; i < c; ++i) S0 += p.K.row(i).transpose() * p.K.row(i);
      for (Eigen::Index j = c; j <= t; ++j) Cin += p.Q.row(j).transpose() * p.V.row(j);
      fixed.row(t) += p.Q.row(t) * S0 * Cin;
    }
    REQUIRE(compare_exact(fixed, expected).exact_equal);
    REQUIRE_FALSE(compare_exact(got, expected).exact_equal);  // the omitted term is nonzero here
  }
}

// Figure 2(C): R^{KQ}_{≤t} gives SPEC's ahla; the literal R^{KQ}_{<t} misses (q_t·k_t) q_tᵀ P^{(k−1)}.
TEST_CASE("Figure 2(C) is implemented as drawn under both readings of R_<t", "[chunked]") {
  const Eigen::Index n = 8;
  const Problem<rational> p = convert_problem<rational>(gaussian_problem({n, 3, 2}, 15));
  const Entry<rational>& lt = registry<rational>().find("ahla", "chunk-figure2c-lt", "paper");
  const Entry<rational>& le = registry<rational>().find("ahla", "chunk-figure2c-le", "paper");
  const Mat<rational> expected = registry<rational>().reference("ahla")(p, Options{}).O;
  for (int w : {1, 2, 3, 5, int(n), int(n) + 2}) {
    INFO("w=" << w);
    const Options o = make_options(1, false, w);
    REQUIRE(compare_exact(le(p, o).O, expected).exact_equal);
    const Mat<rational> got = lt(p, o).O;
    if (w >= n) {
      REQUIRE(compare_exact(got, expected).exact_equal);  // one chunk from the zero state: P^{(0)} = 0
      continue;
    }
    Mat<rational> fixed = got;
    for (Eigen::Index t = 0; t < n; ++t) {
      Mat<rational> P0 = Mat<rational>::Zero(3, 2);
      for (Eigen::Index j = 0; j < (t / w) * w; ++j) P0 += p.K.row(j).transpose() * p.V.row(j);
      fixed.row(t) += p.Q.row(t).dot(p.K.row(t)) * (p.Q.row(t) * P0);
    }
    REQUIRE(compare_exact(fixed, expected).exact_equal);
    REQUIRE_FALSE(compare_exact(got, expected).exact_equal);
  }
  // Split and carry: the figure forms hand over the state the serial Algorithm 2 would have.
  const Options o = make_options(1, false, 3);
  REQUIRE(
      compare_exact(le(p, o).state.at("E"), registry<rational>().find("ahla", "serial", "paper")(p, o).state.at("E"))
          .exact_equal);
}

// Rounding error of the float/double fast path. Each output entry is computed as a signed sum of
// products of inputs in which every product passes through at most h roundings (dot products of length d,
// intra-chunk sums of length ≤ w, the carry over n/w chunks, and the state products of length d), so
// |ô − o| ≤ γ_h Σ|terms| (Higham, Thm 3.1 / §3.5). Σ|terms| is the same computation on |Q|, |K|, |V|:
// for linear, ahla, hla3 the chunked form only adds, so it is the reference on absolute inputs; hla2 forms
// q_tᵀ(S0 C0 − G0), whose terms are all pairs (i, j) ≤ t, so it is at most 2 × hla2-unmasked on |inputs|.
template <class T> double worst_ratio(const Mat<T>& got, const Mat<mpfr256>& ref, const Mat<mpfr256>& mag,
                                      double factor, double h, const std::string& what) {
  const double u = unit_roundoff<T>(), gamma_h = h * u / (1 - h * u);
  double worst = 0;
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    const double err = abs(to_mpfr(got(i)) - ref(i)).template convert_to<double>();
    const double bound = gamma_h * factor * mag(i).template convert_to<double>();
    worst = std::max(worst, err / bound);
    INFO(what << " " << scalar_name<T>() << " entry " << i << " err " << err << " bound " << bound);
    REQUIRE(err <= bound);
  }
  return worst;
}

void check_rounding(const std::string& op, const std::string& form, const std::string& variant, bool decay) {
  const Shape shape{120, 8, 4};
  const Problem<double> in = gaussian_problem(shape, 16);
  const Problem<double> absin{in.Q.cwiseAbs(), in.K.cwiseAbs(), in.V.cwiseAbs()};
  for (int w : {7, 32}) {
    const Options o = make_options(decay ? rational(3, 4) : rational(1), false, w, 2);
    const std::string what = op + "/" + form + " w=" + std::to_string(w);
    const Mat<mpfr256> ref = registry<mpfr256>().reference(op)(convert_problem<mpfr256>(in), o).O;
    const std::string abs_op = op == "hla2" ? "hla2-unmasked" : op;
    const Mat<mpfr256> mag = registry<mpfr256>().reference(abs_op)(convert_problem<mpfr256>(absin), o).O;
    const double h = 3.0 * shape.d + 3.0 * w + std::ceil(double(shape.n) / w) + 8, factor = op == "hla2" ? 2.0 : 1.0;
    const double wd = worst_ratio(registry<double>().find(op, form, variant)(in, o).O, ref, mag, factor, h, what);
    const double wf = worst_ratio(registry<float>().find(op, form, variant)(convert_problem<float>(in), o).O, ref, mag,
                                  factor, h, what);
    // Errors are real (nonzero), so the check is not vacuous.
    INFO(what << " worst err/bound double " << wd << " float " << wf);
    CHECK(wd > 0);
    CHECK(wf > 0);
  }
}

TEST_CASE("chunked float/double fast path is within the rounding-error bound of MPFR", "[chunked]") {
  for (const auto& f : exact_forms()) check_rounding(f.op, f.form, f.variant, f.decay);
}

TEST_CASE("multi-query chunked (shared K, V, one S) equals the per-head reference exactly, in parallel", "[chunked]") {
  // §5.2: heads with their own queries share keys and values, hence S. Every head's output and final
  // state must be the single-head reference's / serial form's for that head's queries.
  const int heads = 3;
  const Eigen::Index n = 11;
  const Problem<rational> base = convert_problem<rational>(gaussian_problem({n, 3, 2}, 5));
  std::vector<Mat<rational>> Qs;
  for (int h = 0; h < heads; ++h) Qs.push_back(convert_problem<rational>(gaussian_problem({n, 3, 2}, 40 + h)).Q);
  std::vector<const Mat<rational>*> qptr;
  for (const auto& q : Qs) qptr.push_back(&q);
  for (const rational& gamma : {rational(1), rational(3, 4)})
    for (bool normalized : {false, true})
      for (int chunk : {1, 3, 4, 16})
        for (int threads : {1, 2}) {
          const Options o = make_options(gamma, normalized, chunk, threads, rational(1, 5));
          INFO("gamma " << gamma << " normalized " << normalized << " chunk " << chunk << " threads " << threads);
          const auto runs = fast::chunked::hla2_chunked_heads<rational>(qptr, base.K, base.V, o, {});
          REQUIRE(runs.size() == std::size_t(heads));
          for (int h = 0; h < heads; ++h) {
            const Problem<rational> ph{Qs[h], base.K, base.V};
            CHECK(
                compare_exact(runs[h].O, registry<rational>().find("hla2", "reference", "spec")(ph, o).O).exact_equal);
            require_same_state(runs[h].state, registry<rational>().find("hla2", "serial", "corrected")(ph, o).state);
          }
        }
  // Heads that disagree about the shared S are refused, not silently merged.
  const Problem<rational> p0{Qs[0], base.K, base.V}, p1{Qs[1], base.K.reverse().eval(), base.V};
  const Options o = make_options(1, false, 4);
  const auto s0 = registry<rational>().find("hla2", "serial", "corrected")(p0, o).state;
  const auto s1 = registry<rational>().find("hla2", "serial", "corrected")(p1, o).state;
  CHECK_THROWS_AS(fast::chunked::hla2_chunked_heads<rational>(qptr, base.K, base.V, o, {&s0, &s1, &s0}), InputError);
}

TEST_CASE("multi-head: every head through one form equals that form on the head alone, exactly, in parallel",
          "[chunked]") {
  // §5.2 multi-head: heads with their own Q, K, V and state. Parallel over heads (heads ≥ threads) or over
  // each head's chunks (heads < threads) must not change a single output or state entry.
  const Eigen::Index n = 9;
  std::vector<Problem<rational>> ps;
  for (int h = 0; h < 3; ++h) ps.push_back(convert_problem<rational>(gaussian_problem({n, 3, 2}, 60 + h)));
  std::vector<const Problem<rational>*> heads;
  for (const auto& p : ps) heads.push_back(&p);
  const Options base = make_options(rational(3, 4), true, 4, 1, rational(1, 5));
  std::vector<NamedState<rational>> starts;  // a nonzero initial state per head: each head's own prefix
  for (const auto& p : ps)
    starts.push_back(registry<rational>().find("hla2", "serial", "corrected")(slice_rows(p, 0, 4), base).state);
  const std::vector<const NamedState<rational>*> init{&starts[0], &starts[1], &starts[2]};
  for (const auto& [op, variant] : {std::pair{"hla2", "corrected"}, {"ahla", "paper"}, {"linear", "paper"}})
    for (int threads : {1, 2, 4}) {
      const Entry<rational>& form = registry<rational>().find(op, "chunked", variant);
      Options o = base;
      o.threads = threads;
      if (!form.caps.ridge) o.ridge = 0;
      INFO(form.key() << " threads " << threads);
      const auto runs = fast::multi_head(form, heads, o);
      REQUIRE(runs.size() == heads.size());
      for (std::size_t h = 0; h < heads.size(); ++h) {
        const Run<rational> alone = form(ps[h], o);
        CHECK(compare_exact(runs[h].O, alone.O).exact_equal);
        require_same_state(runs[h].state, alone.state);
      }
      if (std::string(op) == "hla2") {  // with initial states: head h continues from its own state
        const auto cont = fast::multi_head(form, heads, o, init);
        for (std::size_t h = 0; h < heads.size(); ++h)
          CHECK(compare_exact(cont[h].O, form(ps[h], o, init[h]).O).exact_equal);
      }
    }
  // A bad head is an InputError that names it, also from inside the parallel region; so is a miscount.
  Problem<rational> bad = ps[1];
  bad.V = Mat<rational>(n + 1, 2);
  const std::vector<const Problem<rational>*> with_bad{heads[0], &bad, heads[2]};
  const Entry<rational>& hla2 = registry<rational>().find("hla2", "chunked", "corrected");
  for (int threads : {1, 2}) {
    Options o = base;
    o.threads = threads;
    CHECK_THROWS_WITH(fast::multi_head(hla2, with_bad, o), Catch::Contains("head 1"));
  }
  CHECK_THROWS_AS(fast::multi_head(hla2, heads, base, {init[0]}), InputError);
  CHECK_THROWS_AS(fast::multi_head(hla2, {}, base), InputError);
}

namespace {
// gemm::transpose of every rows × cols up to 2 tiles and a remainder, with leading dimensions larger than the block,
// against Eigen's transpose: every entry equal to the bit, and B's padding (rows of B beyond A's columns) untouched.
template <class T> void check_transpose() {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (Eigen::Index rows = 1; rows <= 19; ++rows)
    for (Eigen::Index cols : {1, 3, 4, 7, 8, 9, 16, 17, 65}) {
      const Eigen::Index lda = rows + 3, ldb = cols + 2;
      Mat<T> A(lda, cols), B = Mat<T>::Constant(ldb, rows, T(42));
      for (Eigen::Index i = 0; i < A.size(); ++i) A.data()[i] = T(u(rng));
      gemm::transpose<T>(A.data(), lda, rows, cols, B.data(), ldb);
      CAPTURE(rows, cols);
      REQUIRE(B.topRows(cols) == A.topRows(rows).transpose());
      REQUIRE((B.bottomRows(ldb - cols).array() == T(42)).all());
    }
}
}  // namespace

TEST_CASE("the chunk kernels' transpose moves every value to the bit, tiled or not", "[chunked][transpose]") {
  check_transpose<float>();
  check_transpose<double>();
  check_transpose<rational>();
}

// Issue 49: chunked-fused's state products accumulated into the carried state inside the GEMM kernel (β = 1), a
// sum as deep as the sequence, and its float error grew like √n (hla2, γ = 1, d = dv = 16, w = 64: 5.8 u at n = 256,
// 37.7 u at n = 8192) where hla2/chunked's stayed flat (3.0 → 5.1 u). Each chunk's sum is now added to the carried
// state (depth w + n/w): 3.7 → 5.2 u. Held here as float against the same form in double, growth from n = 256 to
// 8192 at most 3x (it was 6.5x and 8x on the two seeds measured).
TEST_CASE("chunked-fused's float error stays flat in n at γ = 1, like chunked's", "[chunked]") {
  const Entry<float>& fused = registry<float>().find("hla2", "chunked-fused", "corrected");
  const Entry<double>& exact_enough = registry<double>().find("hla2", "chunked-fused", "corrected");
  Options o;
  o.chunk = 64;
  auto error = [&](Eigen::Index n, std::uint64_t seed) {
    const Problem<double> in = gaussian_problem({n, 16, 16}, seed);
    const Mat<double> want = exact_enough(in, o).O;
    const Mat<double> got = fused(convert_problem<float>(in), o).O.cast<double>();
    return (got - want).cwiseAbs().maxCoeff() / want.cwiseAbs().maxCoeff();
  };
  for (std::uint64_t seed : {1, 2}) {
    const double small = error(256, seed), large = error(8192, seed);
    INFO("seed " << seed << ": normwise error " << small << " at n = 256, " << large << " at n = 8192");
    CHECK(large < 3 * small);
  }
}
