// The gated forms' name lists and exact-only helpers, and gated::run instantiated for the exact scalars
// (rational, fp61); mpfr256 in gated_forms_mpfr.cpp, double and float in gated_forms_float.cpp.
#include "fast/gated_forms_impl.hpp"

namespace hla::gated {
namespace {

const std::vector<std::string> kOperators{"linear", "hla2", "ahla"};
const std::vector<std::string> kScanForms{"scan-fold", "scan-blelloch", "scan-twolevel"};

}  // namespace

const std::vector<FormRef>& forms() {
  static const std::vector<FormRef> all = [] {
    std::vector<FormRef> f;
    for (const auto& op : kOperators) {
      f.push_back({op, "reference"});
      f.push_back({op, "serial"});
      for (const auto& s : kScanForms) f.push_back({op, s});
      f.push_back({op, "chunked"});
    }
    for (const char* v : {"algorithm1-rule", "proposal", "proposal-corrected"}) f.push_back({"hla2", "serial", v});
    return f;
  }();
  return all;
}

const std::vector<FormRef>& floating_only_forms() {
  static const std::vector<FormRef> all = [] {
    std::vector<FormRef> f;
    for (const auto& op : kOperators) f.push_back({op, "chunked-naive-cumprod"});
    return f;
  }();
  return all;
}

template <class T> T exact_square_root(const T& x) {
  if constexpr (std::is_same_v<T, fp61>) {
    const Fp root = x.pow((Fp::P + 1) / 4);  // p ≡ 3 (mod 4): a square's root is x^((p+1)/4)
    if (root * root != x)
      throw InputError("gates: a gate is not a square in F_p (the proposal needs a_t = sqrt(gamma_t))");
    return root;
  } else {
    const bmp::mpz_int num = bmp::numerator(x), den = bmp::denominator(x);
    const bmp::mpz_int rn = bmp::sqrt(num), rd = bmp::sqrt(den);
    if (rn * rn != num || rd * rd != den)
      throw InputError("gates: a gate is not the square of a rational (the proposal needs a_t = sqrt(gamma_t))");
    return T(rn, rd);
  }
}

template <class T> std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string& op, const GatedProblem<T>& g) {
  validate_gates(g);
  return detail::with_gated_scan_op<T>(op, Options{}, g.gamma,
                                       [&](const auto& alg) { return scan::associativity_sides(alg, g.qkv); });
}

#define HLA_GATED_INSTANTIATE(T)                                                                      \
  template std::pair<Mat<T>, Mat<T>> associativity_sides(const std::string&, const GatedProblem<T>&); \
  template T exact_square_root(const T&);
HLA_GATED_INSTANTIATE(rational)
HLA_GATED_INSTANTIATE(fp61)
#undef HLA_GATED_INSTANTIATE

}  // namespace hla::gated

HLA_GATED_INSTANTIATE_RUN(hla::rational)
HLA_GATED_INSTANTIATE_RUN(hla::fp61)
