// Randomized polynomial identity testing (Schwartz–Zippel) and counterexample search.
//
// A claim "form A = form B" is, for a fixed shape (n, d, dv), a family of polynomial (normalized:
// rational) identities in the entries of Q, K, V and in γ, ε, λ. We evaluate both sides at uniform
// random points of the prime field F_p, p = 2^61 − 1. If the identities are false, one of them is a
// nonzero polynomial of degree ≤ D, which vanishes at a random point with probability ≤ D/p; T
// independent points all agreeing then has probability ≤ (D/p)^T, and a union bound over the N output
// entries multiplies that by N. One mismatch proves the claim false (a mismatch mod p cannot come from
// polynomials that are equal over Q, as their integer coefficients are far below p).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/types.hpp"

namespace hla::verify {

// A field element that is also a valid rational parameter: r / 2^62 lies in (0, 1) for 0 < r < 2^62, and
// as r runs uniformly over [1, p) its image r·2^{−62} runs uniformly over F_p \ {0}.
inline rational field_uniform_parameter(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::uint64_t> pick(1, Fp::P - 1);
  return rational(bmp::mpz_int(pick(rng)), bmp::mpz_int(1) << 62);
}

struct IdentityOutcome {
  bool holds = true;
  int points = 0;  // T: random points evaluated (per shape)
  int shapes = 0;
  long identities = 0;    // N: scalar identities covered, summed over shapes (union bound)
  int degree = 0;         // D: max total degree of the identity polynomials
  double log2_bound = 0;  // log2(N · (D/p)^T): probability that a false claim passed
  std::string failure;    // first mismatch: shape, point seed, which entry
};

// One evaluation of both sides at a random field point; returns the two sides' values (matrices of any
// shape, compared entrywise). May throw NumericalError when a denominator vanishes at the point: the
// point is then redrawn (it is not evidence either way).
using FieldEvaluation = std::function<std::pair<Mat<fp61>, Mat<fp61>>(const Shape&, std::mt19937_64&)>;

struct IdentityPlan {
  std::vector<Shape> shapes;
  std::function<int(const Shape&)> degree;  // D for the identities at that shape
  double target_log2 = -60;                 // points are added until the bound reaches this
  int min_points = 2;
};

inline IdentityOutcome test_identity(const IdentityPlan& plan, const FieldEvaluation& eval, std::uint64_t seed) {
  IdentityOutcome out;
  std::mt19937_64 rng(seed);
  const double log2p = std::log2(static_cast<double>(Fp::P));
  double worst_log2 = -1e300;
  for (const Shape& s : plan.shapes) {
    const int D = plan.degree(s);
    out.degree = std::max(out.degree, D);
    const double per_point = std::log2(static_cast<double>(D)) - log2p;  // log2(D/p)
    long entries = 0;
    int points = 0, redraws = 0;
    // Enough points that this shape's bound N_s (D/p)^T reaches the target.
    while (true) {
      std::pair<Mat<fp61>, Mat<fp61>> sides;
      try {
        sides = eval(s, rng);
      } catch (const NumericalError&) {
        if (++redraws > 20) throw;
        continue;
      } catch (const std::domain_error&) {
        if (++redraws > 20) throw;
        continue;
      }
      entries = sides.first.size();
      if (sides.first.rows() != sides.second.rows() || sides.first.cols() != sides.second.cols()) {
        out.holds = false;
        out.failure = "shapes of the two sides differ";
        return out;
      }
      for (Eigen::Index i = 0; i < sides.first.size(); ++i)
        if (sides.first(i) != sides.second(i)) {
          out.holds = false;
          out.failure = "n=" + std::to_string(s.n) + " d=" + std::to_string(s.d) + " dv=" + std::to_string(s.dv) +
                        ": entry (" + std::to_string(i % sides.first.rows()) + "," +
                        std::to_string(i / sides.first.rows()) + ") differs at random point " +
                        std::to_string(points + 1);
          out.points = std::max(out.points, points + 1);
          return out;
        }
      ++points;
      const double shape_log2 = std::log2(static_cast<double>(std::max<long>(entries, 1))) + points * per_point;
      if (points >= plan.min_points && shape_log2 <= plan.target_log2) {
        worst_log2 = std::max(worst_log2, shape_log2);
        break;
      }
    }
    out.points = std::max(out.points, points);
    out.identities += entries;
    ++out.shapes;
  }
  // Union over shapes: log2(Σ 2^{b_s}) ≤ log2(#shapes) + max_s b_s.
  out.log2_bound = std::log2(static_cast<double>(std::max(out.shapes, 1))) + worst_log2;
  return out;
}

}  // namespace hla::verify
