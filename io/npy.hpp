// Strict reader and writer of NumPy .npy files (and a reader of .npz archives) for arrays exchanged with
// other implementations through the black-box protocol. Everything read is untrusted input: only what
// NumPy writes for little-endian float64 ('<f8') and float32 ('<f4') is accepted, in C or Fortran order,
// format versions 1.0, 2.0 and 3.0 (numpy.lib.format / NEP 1). Anything else is refused with an NpyError
// (an InputError) whose message names the file and what was found. Sizes are checked against the bytes
// present before anything is allocated.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace hla::npy {

struct NpyError : InputError {
  using InputError::InputError;
};

struct Array {
  enum class DType { f64, f32 } dtype = DType::f64;
  std::vector<std::size_t> shape;  // () for a 0-d array (one value)
  std::vector<double> data;        // C-order values, converted exactly (a float is exactly a double)
  bool fortran_order = false;      // as it was on disk (data is C order regardless)

  std::size_t size() const { return data.size(); }
};
using DType = Array::DType;

// Largest array accepted by the readers: 2^31 values (16 GiB of doubles).
inline constexpr std::size_t max_values = std::size_t{1} << 31;

// `what` names the input in messages (e.g. the file name).
Array parse(std::string_view bytes, const std::string& what);
// A regular file, its header first: one holding more than max_count values is refused before its data is
// read, and only the bytes the header promises are read.
Array read(const std::filesystem::path& path, std::size_t max_count = max_values);

// .npz (np.savez: stored members; np.savez_compressed: deflate). Keys are member names without ".npy".
std::map<std::string, Array> parse_npz(std::string_view bytes, const std::string& what);
std::map<std::string, Array> read_npz(const std::filesystem::path& path);

// Format 1.0, C order, little-endian. Atomic (io/files.hpp: a fresh temporary file in the same folder,
// then renamed; an InputError naming the file when it cannot be written). Values are rounded to float for
// DType::f32.
void write(const std::filesystem::path& path, const std::vector<std::size_t>& shape, const double* data, DType dtype);
// A matrix as a 2-D row-major array (rows × cols), whatever Eigen's storage order.
void write(const std::filesystem::path& path, const Mat<double>& m, DType dtype = DType::f64);
// A 1-D array.
void write(const std::filesystem::path& path, const std::vector<double>& v, DType dtype = DType::f64);

// The bytes write() puts in a file (format 1.0, C order).
std::string serialize(const std::vector<std::size_t>& shape, const double* data, DType dtype);

// A 2-D array as a rows × cols matrix; NpyError naming `what` for another rank.
Mat<double> to_matrix(const Array& a, const std::string& what);

}  // namespace hla::npy
