// fast/distributed/: the byte codec that carries exact and rounded scalars, matrices, named states and
// every scan segment across ranks (round trip bit for bit, malformed buffers refused), and the mpi-*
// forms run without MPI (one rank): equal to their serial forms, with and without an initial state.
// The multi-rank runs are scripts/test.sh's MPI suite (`mpirun -n P hla check --distributed-only`).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "fast/distributed/plan.hpp"
#include "fast/scan/operators.hpp"
#include "mpi/codec.hpp"
#include "mpi/comm.hpp"

using namespace hla;
using namespace hla::distributed;

namespace {

template <class T> bool same_bits(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::memcmp(&a, &b, sizeof a) == 0;
  else if constexpr (std::is_same_v<T, mpfr256>) {
    if (bmp::isnan(a) || bmp::isnan(b)) return bmp::isnan(a) && bmp::isnan(b);
    return a == b && bmp::signbit(a) == bmp::signbit(b);
  } else
    return a == b;
}

template <class T> T round_trip(const T& x) {
  ByteWriter w;
  put_scalar(w, x);
  const Bytes b = w.take();
  ByteReader r(b);
  T y = get_scalar<T>(r);
  REQUIRE(r.done());
  return y;
}

template <class T> std::vector<T> special_values() {
  std::vector<T> v{T(0), T(1), T(-1), from_rational<T>(rational(-7, 3))};
  if constexpr (std::is_same_v<T, rational>) {
    v.push_back(rational(bmp::mpz_int(1) << 300, (bmp::mpz_int(1) << 200) + 1));
    v.push_back(-rational(1, bmp::mpz_int(3) << 130));
  } else if constexpr (std::is_same_v<T, fp61>) {
    v.push_back(Fp::from_raw(Fp::P - 1));
    v.push_back(Fp::from_raw(0x123456789abcdefULL));
  } else if constexpr (std::is_same_v<T, mpfr256>) {
    v.push_back(mpfr256(1) / 3);
    v.push_back(-bmp::pow(mpfr256(2), -100000) * 5 / 7);
    v.push_back(bmp::pow(mpfr256(2), 100000) / 3);
    v.push_back(-mpfr256(0));
    v.push_back(std::numeric_limits<mpfr256>::infinity());
    v.push_back(-std::numeric_limits<mpfr256>::infinity());
    v.push_back(std::numeric_limits<mpfr256>::quiet_NaN());
  } else {
    v.push_back(std::numeric_limits<T>::denorm_min());
    v.push_back(-std::numeric_limits<T>::max());
    v.push_back(-T(0));
    v.push_back(std::numeric_limits<T>::infinity());
    v.push_back(std::numeric_limits<T>::quiet_NaN());
  }
  return v;
}

// Every operator's segment of rows [1, 6) of a random problem survives encode/decode part by part.
template <class T> void segments_round_trip() {
  const Problem<T> p = convert_problem<T>(gaussian_problem(Shape{7, 3, 2}, 11));
  Options o;
  o.gamma = rational(3, 4);
  for (const std::string op : {"hla2", "hla2-unmasked", "ahla", "hla3", "linear"})
    for (const scan::Variant v : {scan::Variant::paper, scan::Variant::corrected}) {
      Options oo = o;
      if (op == "hla3") oo.gamma = 1;
      scan::with_scan_op<T>(op, v, oo, [&](const auto& oper) {
        using Seg = typename std::decay_t<decltype(oper)>::Seg;
        const Seg s = scan::segment(oper, p, 1, 6);
        const Bytes b = encode_segment<T>(s);
        const Seg back = decode_segment<T, Seg>(b.data(), b.size());
        INFO(op << " " << scan::variant_name(v));
        CHECK(scan::same_segment(s, back));
        // Truncation anywhere, or a trailing byte, is refused.
        for (std::size_t cut : {std::size_t(0), b.size() / 2, b.size() - 1})
          CHECK_THROWS_AS((decode_segment<T, Seg>(b.data(), cut)), InputError);
        Bytes longer = b;
        longer.push_back(std::byte{0});
        CHECK_THROWS_AS((decode_segment<T, Seg>(longer.data(), longer.size())), InputError);
      });
    }
}

}  // namespace

TEMPLATE_TEST_CASE("codec: every scalar round-trips bit for bit, special values included", "[distributed][codec]",
                   rational, fp61, mpfr256, double, float) {
  using T = TestType;
  for (const T& x : special_values<T>()) CHECK(same_bits(round_trip(x), x));
  const Problem<T> p = convert_problem<T>(gaussian_problem(Shape{5, 4, 3}, 3));
  ByteWriter w;
  put_matrix(w, p.Q);
  put_matrix(w, Mat<T>(0, 3));
  NamedState<T> st;
  st.parts = {{"S", p.K}, {"rho", scalar_part(T(1) / T(3))}};
  put_state(w, st);
  const Bytes b = w.take();
  ByteReader r(b);
  CHECK(scan::same_matrix(get_matrix<T>(r), p.Q));
  const Mat<T> empty = get_matrix<T>(r);
  CHECK((empty.rows() == 0 && empty.cols() == 3));
  CHECK(scan::same_named(get_state<T>(r), st));
  CHECK(r.done());
}

TEMPLATE_TEST_CASE("codec: every scan segment round-trips; truncated or padded buffers are refused",
                   "[distributed][codec]", rational, fp61, mpfr256, double, float) {
  segments_round_trip<TestType>();
}

TEST_CASE("codec: malformed buffers are InputError, never a crash", "[distributed][codec]") {
  ByteWriter w;
  w.i64(1LL << 40);  // rows
  w.i64(1LL << 40);  // cols: far more entries than bytes
  const Bytes b = w.take();
  ByteReader r(b);
  CHECK_THROWS_AS(get_matrix<double>(r), InputError);
  ByteWriter f;
  f.u64(Fp::P);  // not a residue
  const Bytes fb = f.take();
  ByteReader fr(fb);
  CHECK_THROWS_AS(get_scalar<fp61>(fr), InputError);
  ByteWriter q;  // a rational 1/0
  q.i64(1), q.u64(1), q.u64(1), q.i64(0), q.u64(0);
  const Bytes qb = q.take();
  ByteReader qr(qb);
  CHECK_THROWS_AS(get_scalar<rational>(qr), InputError);
}

TEMPLATE_TEST_CASE("mpi-* forms without MPI: one rank, equal to the serial form (outputs and final state)",
                   "[distributed]", rational, fp61) {
  using T = TestType;
  REQUIRE_FALSE(mpi_active());  // the test binary never initializes MPI
  REQUIRE(world_size() == 1);
  const auto& reg = registry<T>();
  const Problem<T> p = convert_problem<T>(gaussian_problem(Shape{9, 3, 2}, 5));
  const Problem<T> pre = convert_problem<T>(gaussian_problem(Shape{4, 3, 2}, 6));
  int forms = 0;
  for (const DistributedPlan& plan : distributed_plan())
    for (const auto& [form, how] : distributed_forms()) {
      const Entry<T>& mpi = reg.find(plan.op, form, scan::variant_name(plan.scan_variant));
      const Entry<T>& serial = reg.find(plan.op, plan.serial_form, plan.serial_variant);
      Options o;
      o.chunk = 4;
      if (mpi.caps.decay) o.gamma = rational(2, 3);
      o.normalized = true;
      o.eps = rational(1, 4);
      if (mpi.caps.ridge) o.ridge = rational(1, 2);
      const NamedState<T> init = serial(pre, o).state;
      const Run<T> a = mpi(p, o, &init), b = serial(p, o, &init);
      INFO(mpi.key());
      CHECK(scan::same_matrix(a.O, b.O));
      CHECK(scan::same_named(a.state, b.state));
      ++forms;
    }
  CHECK(forms == 8);
}

#ifdef HLA_CLI
TEST_CASE("hla check --distributed-only without mpirun: one rank, exit 0", "[distributed][cli]") {
  CHECK(std::system((std::string(HLA_CLI) + " check --distributed-only >/dev/null 2>&1").c_str()) == 0);
}
#endif
