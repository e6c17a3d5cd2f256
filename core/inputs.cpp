#include "core/inputs.hpp"

#include <cmath>

namespace hla {

namespace {
template <class Draw> Problem<double> fill(const Shape& s, Draw&& draw) {
  Problem<double> p{Mat<double>(s.n, s.d), Mat<double>(s.n, s.d), Mat<double>(s.n, s.dv)};
  for (Mat<double>* m : {&p.Q, &p.K, &p.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) (*m)(i) = draw(m == &p.V);
  return p;
}
}  // namespace

Problem<double> gaussian_problem(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  return fill(s, [&](bool is_value) {
    double x = normal(rng);
    return static_cast<double>(static_cast<float>(is_value ? x : x * scale));
  });
}

Problem<double> integer_problem(const Shape& s, std::uint64_t seed, int r) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-r, r);
  return fill(s, [&](bool) { return static_cast<double>(pick(rng)); });
}

Problem<fp61> field_problem(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> pick(0, Fp::P - 1);
  Problem<fp61> p{Mat<fp61>(s.n, s.d), Mat<fp61>(s.n, s.d), Mat<fp61>(s.n, s.dv)};
  for (Mat<fp61>* m : {&p.Q, &p.K, &p.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) (*m)(i) = Fp::from_raw(pick(rng));
  return p;
}

}  // namespace hla
