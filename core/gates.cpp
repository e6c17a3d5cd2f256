// Drawing a problem's gates from a GateSpec (core/gates.hpp).
#include "core/gates.hpp"

#include <cmath>
#include <limits>

#include "core/parse.hpp"

namespace hla {

GateSpec parse_gate_spec(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InputError("gates '" + text + "': " + why +
                      " (accepted: none, range:LO,HI with 0 < LO <= HI <= 1, strength:S with 0 < S <= 50)");
  };
  GateSpec g;
  g.text = text;
  if (text == "none") return g;
  const auto colon = text.find(':');
  if (colon == std::string::npos) throw bad("no kind");
  const std::string kind = text.substr(0, colon), args = text.substr(colon + 1);
  // parse_rational: exact decimal or p/q, refuses nan, inf and over-long numbers with a message.
  const auto number = [&](const std::string& s) { return from_rational<double>(parse_rational(s, "gates")); };
  if (kind == "range") {
    const auto comma = args.find(',');
    if (comma == std::string::npos) throw bad("range takes LO,HI");
    g.kind = GateSpec::Kind::range;
    g.lo = number(args.substr(0, comma));
    g.hi = number(args.substr(comma + 1));
    // Rounded to float, as the gates will be: LO must stay positive there.
    if (!(static_cast<float>(g.lo) > 0 && g.lo <= g.hi && g.hi <= 1)) throw bad("LO and HI out of range");
    return g;
  }
  if (kind == "strength") {
    g.kind = GateSpec::Kind::strength;
    g.strength = number(args);
    if (!(g.strength > 0 && g.strength <= 50)) throw bad("S out of range");
    return g;
  }
  throw bad("unknown kind '" + kind + "'");
}

ColVec<double> draw_gates(const GateSpec& spec, Eigen::Index n, std::uint64_t seed) {
  if (!spec.any()) return {};
  // A stream of its own (the inputs' generator draws from `seed`), so that adding gates leaves Q, K, V as they were.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  ColVec<double> g(n);
  for (Eigen::Index t = 0; t < n; ++t) {
    const double u = unit(rng);
    const double x =
        spec.kind == GateSpec::Kind::range ? spec.lo + (spec.hi - spec.lo) * u : std::exp(-spec.strength * (0.5 + u));
    // Float-representable and inside (0, 1] after rounding: every scalar sees this very gate.
    float f = static_cast<float>(x);
    if (f > 1.0f) f = 1.0f;
    if (f < static_cast<float>(spec.lo) && spec.kind == GateSpec::Kind::range) f = static_cast<float>(spec.lo);
    if (!(f > 0.0f)) f = std::numeric_limits<float>::min();
    g(t) = static_cast<double>(f);
  }
  return g;
}

}  // namespace hla
