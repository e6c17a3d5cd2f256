// The names of an enum's values as the command line, reports and files write them: one table per enum, read both
// ways, so that a name and its value are paired in one place. An enum gets its table from a constexpr function
// `name_table(E)` declared in the enum's own namespace (where argument-dependent lookup finds it), e.g.
//   constexpr NameTable<Products, 3> name_table(Products) {
//     return {"products", {{{Products::ieee, "ieee"}, {Products::tf32, "tf32"}, {Products::bf16, "bf16"}}}};
//   }
// and name_of(e), try_parse<E>(text), parse<E>(text), known_names<E>() and values_of<E>() then work for it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.hpp"

namespace hla {

template <class E> struct EnumName {
  E value;
  const char* name;
};

// what: what the names name, for the error ("precision", "case kind"). The first pair of a value gives its name; a
// later pair of the same value is an alias that parsing also accepts (dtype's "f8", "double").
template <class E, std::size_t N> struct NameTable {
  const char* what;
  std::array<EnumName<E>, N> pairs;
};

// The name of e; "?" for a value outside the table (a cast integer).
template <class E> std::string name_of(E e) {
  for (const auto& [value, name] : name_table(E{}).pairs)
    if (value == e) return name;
  return "?";
}

// Every value once, in the table's order.
template <class E> std::vector<E> values_of() {
  std::vector<E> values;
  for (const auto& [value, name] : name_table(E{}).pairs)
    if (name_of(value) == name) values.push_back(value);
  return values;
}

// The values' names for a message, aliases left out: "a, b or c".
template <class E> std::string known_names() {
  const std::vector<E> values = values_of<E>();
  std::string all;
  for (std::size_t i = 0; i < values.size(); ++i)
    all += std::string(i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + name_of(values[i]);
  return all;
}

// The value a name or alias stands for; none for any other text.
template <class E> std::optional<E> try_parse(std::string_view text) {
  for (const auto& [value, name] : name_table(E{}).pairs)
    if (text == name) return value;
  return std::nullopt;
}

// The value a name or alias stands for; InputError for any other text, listing the names.
template <class E> E parse(std::string_view text) {
  if (const auto value = try_parse<E>(text)) return *value;
  throw InputError("unknown " + std::string(name_table(E{}).what) + " '" + std::string(text) + "' (" +
                   known_names<E>() + ")");
}

}  // namespace hla
