// The gated forms, instantiated for the exact scalars (rational, fp61) in this one unit: see gated_forms.hpp.
#include "fast/gated_forms_impl.hpp"

namespace hla::gated {

const std::vector<FormRef>& forms() {
  static const std::vector<FormRef> all = [] {
    std::vector<FormRef> f;
    for (const auto& op : kOperators) {
      f.push_back({op, "reference"});
      f.push_back({op, "serial"});
      for (const auto& s : kScanForms) f.push_back({op, s});
    }
    for (const char* v : {"algorithm1-rule", "proposal", "proposal-corrected"}) f.push_back({"hla2", "serial", v});
    return f;
  }();
  return all;
}

HLA_GATED_INSTANTIATE(rational)
HLA_GATED_INSTANTIATE(fp61)
}  // namespace hla::gated
