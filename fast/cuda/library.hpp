// The table of functions the CUDA library (libhla_cuda.so, fast/cuda/pass.cu) hands to fast/cuda/device.cpp, which
// loads it with dlopen on first use. The library links cuBLAS, whose shared objects take about a second to map: a
// process that never touches a GPU (every CPU tool and test, every machine without an NVIDIA driver) never loads it.
#pragma once

#include <string>

#include "fast/cuda/device.hpp"

namespace hla::fast::cuda {

inline constexpr int kLibraryVersion = 2;  // bumped when this table changes: an older library is refused

struct LibraryApi {
  int version;
  bool (*device_available)();
  std::string (*device_description)();
  void (*forward_float)(GpuOp, const Batch<float>&, const ForwardOptions&, const PassStates<float>*, float*,
                        PassStates<float>*);
  void (*forward_double)(GpuOp, const Batch<double>&, const ForwardOptions&, const PassStates<double>*, double*,
                         PassStates<double>*);
  void (*backward_float)(GpuOp, const Batch<float>&, const ForwardOptions&, const float*, float*, float*, float*,
                         float*);
  void (*backward_double)(GpuOp, const Batch<double>&, const ForwardOptions&, const double*, double*, double*, double*,
                          double*);
  Timing (*time_float)(GpuOp, int, int, int, int, double, double, const ForwardOptions&, int, std::uint64_t, bool);
  Timing (*time_double)(GpuOp, int, int, int, int, double, double, const ForwardOptions&, int, std::uint64_t, bool);
};

}  // namespace hla::fast::cuda

// The library's one exported symbol.
extern "C" const hla::fast::cuda::LibraryApi* hla_cuda_library();
