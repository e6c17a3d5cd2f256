// What `hla verify` concludes (docs/verify.md): the verdict of a battery, and the exit code that carries it.
//
//   computes         within the rounding bound on every exact, random and carry case
//   lower-precision  right on the exact cases, but random-case error above the dtype's bound while still
//                    small relative to the outputs (float32 arithmetic behind a float64 interface, TF32
//                    products, a lossy accumulation)
//   differs          beyond the bound on an exact case, a carry case, or by more than any rounding could
//                    explain on a random one: a different function, with the smallest counterexample
//   error            the protocol failed (crash, time-out, missing or malformed output, wrong shape, ...);
//                    NaN or Inf where the operator is finite is a wrong value: differs
//   incomplete       an option group's only (the report's localization): some of its cases went unanswered
// Exit codes: 0 computes, 1 differs or lower-precision, 2 error or bad input.
#pragma once

#include <string>

namespace hla::verify::ext {

enum class Verdict { computes, lower_precision, differs, error, incomplete };
std::string to_string(Verdict v);                // as the report writes it: "computes", "lower-precision", ...
Verdict parse_verdict(const std::string& text);  // InputError for anything else

// 0 computes, 1 differs / lower-precision, 2 error (and incomplete, which no battery concludes).
int exit_code_for(Verdict v);

}  // namespace hla::verify::ext
