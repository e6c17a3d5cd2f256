// Registers every chunked form for scalar T.
#pragma once

#include "core/registry.hpp"

namespace hla {

template <class T> void register_chunked(Registry<T>&) {}

}  // namespace hla
