// How a form's matrix products round: in its own scalar (every CPU form), or with operands rounded to a narrower
// format and accumulated in fp32 (the GPU forms' tensor-core products, fast/cuda/). The registry's Caps carry it, and
// the rounding bounds (numerics/bounds.hpp) read it: a narrower operand adds its roundings to every term.
#pragma once

#include "core/names.hpp"

namespace hla {

//   ieee  the scalar's own IEEE products (fp32 forms: no tensor-core down-conversion)
//   tf32  tensor-core products of operands rounded to TF32 (10-bit significand), fp32 accumulation
//   bf16  tensor-core products of operands rounded to bf16 (7-bit significand), fp32 accumulation
enum class Products { ieee, tf32, bf16 };

constexpr NameTable<Products, 3> name_table(Products) {
  return {"products", {{{Products::ieee, "ieee"}, {Products::tf32, "tf32"}, {Products::bf16, "bf16"}}}};
}

// The unit roundoff of an operand rounded for the products, to nearest (0 for ieee: the scalar's own).
inline double operand_roundoff(Products p) {
  switch (p) {
    case Products::ieee:
      return 0;
    case Products::tf32:
      return 0x1.0p-11;
    case Products::bf16:
      return 0x1.0p-8;
  }
  return 0;
}

}  // namespace hla
