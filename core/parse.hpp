// Exact parsing of user-supplied parameters: "3/4", "0.99", "1e-6" all become exact rationals, so a
// decay typed on the command line or in a config means the same number in every scalar type.
#pragma once

#include <string>

#include "core/scalar.hpp"

namespace hla {

// Throws InputError (core/errors.hpp) naming `what` when `text` is not a number.
rational parse_rational(const std::string& text, const std::string& what);
std::string format_rational(const rational& r);

}  // namespace hla
