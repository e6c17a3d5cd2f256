// The reference cache's file format (experiments/lib/reference_cache.hpp).
#include "experiments/lib/reference_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/limits.hpp"

namespace hla::sweep {
namespace {

// A number of MPFR-256 stored exactly as the unevaluated sum of 5 doubles (5 × 53 ≥ 259 bits).
constexpr int kParts = 5;
void split(const mpfr256& x, double* out) {
  mpfr256 r = x;
  for (int i = 0; i < kParts; ++i) {
    out[i] = r.convert_to<double>();
    r -= mpfr256(out[i]);
  }
}
mpfr256 join(const double* in) {
  mpfr256 r(0);
  for (int i = kParts - 1; i >= 0; --i) r += mpfr256(in[i]);
  return r;
}

}  // namespace

std::uint64_t reference_cache_most_bytes(const CacheShape& shape) {
  const auto n = static_cast<std::uint64_t>(std::max(shape.n, 0LL)),
             dv = static_cast<std::uint64_t>(std::max(shape.dv, 0LL));
  // The header, then n x (dv + 1) numbers of kParts doubles and the bound's n x (dv + 1).
  return saturating_add(4096, saturating_mul(saturating_mul(n, dv + 1), (kParts + 1) * 8));
}

std::string reference_cache_bytes(const RefData& r) {
  std::ostringstream out;
  out << "HLAREF1\n"
      << r.method << "\n"
      << r.abs_method << "\n"
      << r.num.rows() << " " << r.num.cols() << " " << r.abs.rows() << " " << r.abs.cols() << "\n";
  std::vector<double> buf(static_cast<std::size_t>(r.num.size()) * kParts);
  for (Eigen::Index i = 0; i < r.num.size(); ++i) split(r.num(i), &buf[static_cast<std::size_t>(i) * kParts]);
  out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * sizeof(double)));
  out.write(reinterpret_cast<const char*>(r.abs.data()), static_cast<std::streamsize>(r.abs.size() * sizeof(double)));
  return out.str();
}

// A torn write, another version's file or a forged header (1 x 1 read past its end, 10^9 x 10^9 allocated) is not
// the point's: nullopt, and the caller computes the reference again.
std::optional<RefData> parse_reference_cache(std::string_view bytes, const CacheShape& shape) {
  if (bytes.size() > reference_cache_most_bytes(shape)) return std::nullopt;
  std::istringstream in{std::string(bytes)};
  std::string magic, method, abs_method;
  long long rows = -1, cols = -1, arows = -1, acols = -1;
  std::getline(in, magic);
  std::getline(in, method);
  std::getline(in, abs_method);
  in >> rows >> cols >> arows >> acols;
  if (magic != "HLAREF1" || !in || in.get() != '\n') return std::nullopt;
  const bool known = method == "literal" || (shape.streaming && method.rfind("mpfr-proxy:", 0) == 0);
  const long long width = shape.dv + (shape.streaming ? 1 : 0);
  if (!known || shape.n < 1 || shape.dv < 1 || rows != shape.n || cols != width ||
      !((arows == 0 && acols == 0) || (arows == rows && acols == cols)))
    return std::nullopt;
  // rows and cols are the shape's now, whose numbers fit in the bytes checked above: no product overflows.
  const auto values = static_cast<std::size_t>(rows * cols) * kParts,
             abs_values = static_cast<std::size_t>(arows * acols);
  const auto at = static_cast<std::size_t>(in.tellg());
  if (bytes.size() - at != (values + abs_values) * sizeof(double)) return std::nullopt;
  std::vector<double> buf(values + abs_values);
  std::memcpy(buf.data(), bytes.data() + at, buf.size() * sizeof(double));
  if (!std::all_of(buf.begin(), buf.end(), [](double x) { return std::isfinite(x); })) return std::nullopt;
  RefData r;
  r.method = method;
  r.abs_method = abs_method;
  r.num.resize(rows, cols);
  for (Eigen::Index i = 0; i < r.num.size(); ++i) r.num(i) = join(&buf[static_cast<std::size_t>(i) * kParts]);
  r.abs = Eigen::Map<const Mat<double>>(buf.data() + values, arows, acols);
  return r;
}

}  // namespace hla::sweep
