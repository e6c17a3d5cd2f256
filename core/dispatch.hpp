// Runs a generic lambda with the scalar type named on the command line or in a config.
#pragma once

#include <string>
#include <vector>

#include "core/types.hpp"

namespace hla {

inline const std::vector<std::string>& scalar_names() {
  static const std::vector<std::string> names{"rational", "fp61", "mpfr256", "double", "float"};
  return names;
}

// f.template operator()<T>() for the scalar called `name`; InputError for an unknown name.
template <class F> decltype(auto) with_scalar(const std::string& name, F&& f) {
  if (name == "rational") return f.template operator()<rational>();
  if (name == "fp61") return f.template operator()<fp61>();
  if (name == "mpfr256") return f.template operator()<mpfr256>();
  if (name == "double") return f.template operator()<double>();
  if (name == "float") return f.template operator()<float>();
  throw InputError("unknown scalar '" + name + "' (rational, fp61, mpfr256, double, float)");
}

}  // namespace hla
