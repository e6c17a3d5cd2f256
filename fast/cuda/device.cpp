// The GPU forms' interface (fast/cuda/device.hpp) in every build. Where CMake built the CUDA library
// (libhla_cuda.so: HLA_CUDA_LIBRARY names it), it is loaded with dlopen the first time a process asks for a device, and
// only where an NVIDIA driver is present: the library links cuBLAS, which takes about a second to map, so no CPU
// process pays for it. HLA_CUDA_LIBRARY in the environment names another copy; HLA_NO_CUDA=1 hides the device.
#include "fast/cuda/device.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <type_traits>

#include "fast/cuda/library.hpp"

namespace hla::fast::cuda {

namespace {

// Why there is no library (empty when there is one).
std::string g_missing;

const LibraryApi* library() {
  static const LibraryApi* api = []() -> const LibraryApi* {
#ifdef HLA_CUDA_LIBRARY
    const char* off = std::getenv("HLA_NO_CUDA");
    if (off && *off && std::string(off) != "0") {
      g_missing = "HLA_NO_CUDA is set";
      return nullptr;
    }
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/proc/driver/nvidia/version", F_OK) != 0) {
      g_missing = "no NVIDIA driver on this machine";
      return nullptr;
    }
    const char* path = std::getenv("HLA_CUDA_LIBRARY");
    void* handle = dlopen(path && *path ? path : HLA_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      g_missing = std::string("the CUDA library did not load: ") + dlerror();
      return nullptr;
    }
    using Entry = const LibraryApi* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, "hla_cuda_library"));
    const LibraryApi* a = entry ? entry() : nullptr;
    if (!a || a->version != kLibraryVersion) {
      g_missing = "the CUDA library is of another build (rebuild it)";
      return nullptr;
    }
    return a;
#else
    g_missing = "this build has no GPU forms: CUDA (nvcc) was not found when it was configured";
    return nullptr;
#endif
  }();
  return api;
}

const LibraryApi& required() {
  const LibraryApi* a = library();
  if (!a) throw std::runtime_error("GPU forms: " + g_missing);
  return *a;
}

}  // namespace

bool compiled() {
#ifdef HLA_CUDA_LIBRARY
  return true;
#else
  return false;
#endif
}

bool device_available() {
  static const bool ok = [] {
    const LibraryApi* a = library();
    if (a && !a->device_available()) g_missing = "no CUDA device";
    return a && a->device_available();
  }();
  return ok;
}

std::string device_description() {
  const LibraryApi* a = library();
  return a ? a->device_description() : g_missing;
}

template <class T> void forward(GpuOp op, const Batch<T>& in, const ForwardOptions& o, const PassStates<T>* s, T* out,
                                PassStates<T>* fin) {
  if constexpr (std::is_same_v<T, float>)
    required().forward_float(op, in, o, s, out, fin);
  else
    required().forward_double(op, in, o, s, out, fin);
}
template <class T>
void backward(GpuOp op, const Batch<T>& in, const ForwardOptions& o, const T* dO, T* dq, T* dk, T* dv, T* dgamma) {
  if constexpr (std::is_same_v<T, float>)
    required().backward_float(op, in, o, dO, dq, dk, dv, dgamma);
  else
    required().backward_double(op, in, o, dO, dq, dk, dv, dgamma);
}
template <class T> Timing time_forward(GpuOp op, int seqs, int T_len, int d, int dv, double gate_lo, double gamma,
                                       const ForwardOptions& o, int reps, std::uint64_t seed, bool with_backward) {
  if constexpr (std::is_same_v<T, float>)
    return required().time_float(op, seqs, T_len, d, dv, gate_lo, gamma, o, reps, seed, with_backward);
  else
    return required().time_double(op, seqs, T_len, d, dv, gate_lo, gamma, o, reps, seed, with_backward);
}
template void forward<float>(GpuOp, const Batch<float>&, const ForwardOptions&, const PassStates<float>*, float*,
                             PassStates<float>*);
template void forward<double>(GpuOp, const Batch<double>&, const ForwardOptions&, const PassStates<double>*, double*,
                              PassStates<double>*);
template void backward<float>(GpuOp, const Batch<float>&, const ForwardOptions&, const float*, float*, float*, float*,
                              float*);
template void backward<double>(GpuOp, const Batch<double>&, const ForwardOptions&, const double*, double*, double*,
                               double*, double*);
template Timing time_forward<float>(GpuOp, int, int, int, int, double, double, const ForwardOptions&, int,
                                    std::uint64_t, bool);
template Timing time_forward<double>(GpuOp, int, int, int, int, double, double, const ForwardOptions&, int,
                                     std::uint64_t, bool);

}  // namespace hla::fast::cuda
