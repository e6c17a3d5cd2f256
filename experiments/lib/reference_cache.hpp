// A sweep's reference cache (<out>/refcache/<key>.bin, experiments/lib/sweep.hpp): the MPFR-256 reference of one
// point's inputs, and the double-precision abs operator its bound uses, as the file holds them.
//
//   HLAREF1\n <method>\n <abs_method>\n <rows> <cols> <abs rows> <abs cols>\n
//   rows × cols numbers, each kParts doubles (an unevaluated sum), then abs rows × abs cols doubles
//
// The file is outside input (a torn write, another version's file, a forged header): it is used only when it is
// exactly what reference_cache_bytes writes for the point, and computed again otherwise (fuzz_reference_cache).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/types.hpp"

namespace hla::sweep {

// For every streaming operator (all but the softmax baseline, core/operators.hpp) the reference is computed once per
// (op, inputs, γ, λ) on V augmented by a column of ones: the first dv columns are the unnormalized numerator, the last
// is den_t, so every (normalized, ε) point reuses it: o_t = num_t / (den_t + ε) (SPEC "normalized").
struct RefData {
  std::string method;  // literal | mpfr-proxy:<form>/<variant> ; empty = none
  std::string note;    // why there is none
  Mat<mpfr256> num;    // n × (dv+1); softmax: n × dv outputs
  Mat<double> abs;     // n × (dv+1): the abs operator on |Q|, |K|, [|V| 1] (empty: no bound)
  std::string abs_method;
};

// The point a cache file must be for: n rows of dv outputs (+ 1 denominator column for a streaming operator).
struct CacheShape {
  long long n = 0, dv = 0;
  bool streaming = true;
};

// The most bytes a valid file of the shape has (the header's 4096 and the numbers), saturating: read no more.
std::uint64_t reference_cache_most_bytes(const CacheShape& shape);

// The file's contents for a reference (RefData::note is not stored).
std::string reference_cache_bytes(const RefData& r);

// The reference the bytes hold, when they are exactly what reference_cache_bytes writes for a reference of the shape:
// magic, a known method (literal; mpfr-proxy:… for a streaming operator), rows = n, cols = dv (+ 1), the bound's
// n × cols or none, as many finite numbers as the header says and no byte more. Anything else: nullopt.
std::optional<RefData> parse_reference_cache(std::string_view bytes, const CacheShape& shape);

}  // namespace hla::sweep
