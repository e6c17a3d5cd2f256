// The names of an enum's values as reports and case files write them: one list per enum, read both ways.
#pragma once

#include <array>
#include <string>

#include "core/types.hpp"

namespace hla::verify::ext {

// names[i] is the name of the i-th enumerator; `what` says what they name, for the error.
template <class E, std::size_t N> struct EnumNames {
  std::array<const char*, N> names;
  const char* what;

  std::string operator()(E e) const { return names.at(static_cast<std::size_t>(e)); }
  // InputError for anything but one of the names, listing them.
  E parse(const std::string& text) const {
    std::string all;
    for (std::size_t i = 0; i < N; ++i) {
      if (text == names[i]) return static_cast<E>(i);
      all += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i];
    }
    throw InputError("unknown " + std::string(what) + " '" + text + "' (" + all + ")");
  }
};

}  // namespace hla::verify::ext
