// The gated forms' name lists, and gated::run instantiated for the exact scalars (rational, fp61); mpfr256 in
// gated_forms_mpfr.cpp, double and float in gated_forms_float.cpp.
#include "fast/gated_forms_impl.hpp"

namespace hla::gated {
namespace {

// The operators with gated forms the ledger and hla verify --gates check (core/operators.hpp `verify_gates`; the
// [operators] tests hold the two lists equal), in the ledger's order.
const std::vector<std::string> kGatedOperators{"linear", "hla2", "ahla"};
const std::vector<std::string> kScanForms{"scan-fold", "scan-blelloch", "scan-twolevel"};

}  // namespace

const std::vector<FormRef>& forms() {
  static const std::vector<FormRef> all = [] {
    std::vector<FormRef> f;
    for (const auto& op : kGatedOperators) {
      f.push_back({op, "reference"});
      f.push_back({op, "serial"});
      for (const auto& s : kScanForms) f.push_back({op, s});
      f.push_back({op, "chunked"});
      f.push_back({op, "decode"});
    }
    f.push_back({"hla2", "chunked-fused"});  // hla2's chunk form in one pass per block of chunks
    for (const char* v : {"algorithm1-rule", "proposal", "proposal-corrected"}) f.push_back({"hla2", "serial", v});
    return f;
  }();
  return all;
}

const std::vector<FormRef>& floating_only_forms() {
  static const std::vector<FormRef> all = [] {
    std::vector<FormRef> f;
    for (const auto& op : kGatedOperators) f.push_back({op, "chunked-naive-cumprod"});
    return f;
  }();
  return all;
}

HLA_GATED_INSTANTIATE(rational)
HLA_GATED_INSTANTIATE(fp61)
}  // namespace hla::gated
