// `hla verify`: the cases an outside implementation is held to, and what each must return.
//
// Three kinds of evidence (docs/verify.md):
//   exact   small-integer Q, K, V in {−1, 0, 1} and dyadic γ, ε, λ, sized so that the abs operator A (the
//           unmasked operator on |Q|, |K|, |V|, which bounds every partial sum a serial, scan or chunked
//           algorithm forms) stays ≤ 2^10: at γ = 1 every such intermediate is an integer that float64,
//           float32 and even TF32's 11-bit significand hold exactly. A correct implementation returns the
//           reference exactly there (up to a normalized output's final division and decay through exp/log,
//           which the rounding bound covers); a mismatch beyond the bound proves a different function.
//           The bound there uses float32's roundoff whatever the dtype (cases.cpp says why).
//   random  Gaussian inputs at the user's own γ, ε, λ and several n ≤ max_n: error against MPFR-256 over
//           the rounding bound of numerics/bounds.hpp with the serial (deepest) accumulation depth.
//   carry   (--state) a state handed in (the harness's exact state after a prefix) and handed on (the
//           implementation's own state, split-and-carry): scan-equals-serial for code we cannot read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/registry.hpp"
#include "verify/gradients.hpp"

namespace hla::verify::ext {

enum class DType { float64, float32 };
std::string dtype_name(DType t);
DType parse_dtype(const std::string& s);  // float64 | float32 (also f8/f4, double/float); InputError otherwise
double unit_roundoff(DType t);
double round_to(DType t, double x);  // x rounded to the dtype, as a double

// The arithmetic an implementation declares it computes in (--precision); the arrays stay float32/float64.
//   fp64, fp32   every operation in that format
//   tf32, bf16, fp16   inputs and the operands of matrix products in the format, accumulation and state in
//                fp32 (tensor-core kernels); outputs may be rounded to the format
enum class Precision { fp64, fp32, tf32, bf16, fp16 };
std::string precision_name(Precision p);
Precision parse_precision(const std::string& s);  // InputError for anything else

// How a declared precision enters the bounds (numerics/bounds.hpp): operand roundings at u_operand (0 when the
// format is the arrays' own), accumulation at u_accumulate; u_format is the format's own roundoff, in which
// errors are reported, and "every operation in the format" at u_format is the bound beyond which an error is
// no longer a precision problem. significand_bits counts the implicit bit (bf16: 8).
struct PrecisionModel {
  double u_format = 0, u_operand = 0, u_accumulate = 0;
  int significand_bits = 53;
};
PrecisionModel precision_model(Precision p, DType dtype);

// What the user asked for: the operator, its options (exact rationals), the dtype and the battery's reach.
struct Request {
  std::string op = "hla2";
  Options opt;  // γ, ε, λ, normalized as the user gave them (chunk/threads unused)
  DType dtype = DType::float64;
  std::optional<Precision> precision;  // declared arithmetic; none = the dtype's own
  Precision declared() const {
    return precision ? *precision : dtype == DType::float64 ? Precision::fp64 : Precision::fp32;
  }
  bool state = false;    // the implementation takes and returns its recurrent state
  bool grad = false;     // the implementation also returns ∂L/∂(Q, K, V) for L = Σ ⟨dO, O⟩ (gradients.hpp)
  long max_n = 512;      // largest random case
  long d = 16, dv = 16;  // widths of the random cases (exact cases use their own small widths)
  std::uint64_t seed = 1;
  // Shape constraints of kernels that cannot take every shape (a CUDA/Triton kernel built for one head
  // size, or for whole blocks of tokens): every case, exact ones and counterexample candidates included,
  // then has widths d × dv and a length that is a multiple of n_multiple.
  bool fixed_widths = false;
  long n_multiple = 1;
  // The shape a case gets under those constraints.
  long fit_n(long n) const { return (n + n_multiple - 1) / n_multiple * n_multiple; }
  // --gates: every case carries per-token gates γ_t (Case::gamma, gamma.npy) and the decay is theirs (opt.gamma
  // stays 1). Exact cases use dyadic gates (exact_gates); random cases draw γ_t uniformly from [gate_lo, gate_hi].
  bool gates = false;
  double gate_lo = 0.8, gate_hi = 1;
  // An implementation that packs a round's cases into batched calls (an op taking [B, T, H, K]: python/, layout=)
  // needs several cases of one shape and options to fill a call with different inputs at every (b, h): the short
  // exact shapes (4 to 11 tokens) then get this many cases each, drawn apart (with gates, their exact gates relabelled
  // per case). 1: one each.
  long per_shape = 1;
  // GQA (several query heads reading one key/value head): those copies come in runs of this many that share their
  // keys, values and gates, a different query each, so that a packed call's key/value head serves that many cases.
  long shared_kv = 1;
};
// The shapes under the request's constraints (lengths rounded up to n_multiple, widths fixed), repeats dropped.
std::vector<Shape> constrained(const Request& r, std::vector<Shape> shapes);

// Refuses operators without a battery (softmax) and options the operator does not define.
void validate_request(const Request& r);

// The gates of an exact --gates case of n tokens: dyadic squares (1/4, 9/16, 49/64), varying per token, and 1 only at
// t = 7 and 13 of short cases (so ≠ 1 on the first tokens and on every token that starts a chunk of an even width;
// see cases.cpp).
// variant: the same placement (1 at t = 7 and 13, ≠ 1 elsewhere) with the three squares relabelled, for per_shape.
ColVec<double> exact_gates(Eigen::Index n, int variant = 0);
// Weak gates of an exact --gates case: dyadics 1 − 2^-k … 1 − 2^-(k+2) (cases.cpp says why).
ColVec<double> weak_gates(Eigen::Index n, int k);
// The gates of the prefix that a carry case's state_in summarizes (1/2 each: the state stays exact in the dtype).
ColVec<double> prefix_gates(Eigen::Index n);
// Refuses given gates (file mode) that are not one per token, each in (0, 1].
void check_gates(const ColVec<double>& gamma, Eigen::Index n);

// One state part as the protocol names it: SPEC's part names for the operator (verify --list-state).
struct PartShape {
  std::string name;
  Eigen::Index rows = 0, cols = 0;
  bool vector = false;  // a d×1 part travels as a 1-D array of length d
};
std::vector<PartShape> state_layout(const std::string& op, Eigen::Index d, Eigen::Index dv);

// What a case is for: exact, random and carry evidence (above), the two halves of a split-and-carry check and the whole
// sequence they are checked against, a simplification in the counterexample search, file mode's given arrays.
enum class CaseKind { exact, random, carry, split_a, split_b, whole, shrink, given };
std::string to_string(CaseKind k);                  // as case.json and the case names write it: "exact", "split-a", ...
CaseKind parse_case_kind(const std::string& text);  // InputError for anything else

struct Case {
  std::string name;  // the case's directory: kind, group and shape, e.g. "exact-012-decay-n5-d2-dv1"
  CaseKind kind = CaseKind::exact;
  std::string group;  // exact cases: base | decay | normalized | ridge | all; others: user
  Options opt;
  Problem<double> in;      // entries exactly representable in the dtype
  ColVec<double> gamma;    // --gates: γ_t per token of `in`, in (0, 1] and in the dtype; empty: the fixed γ of opt
  Problem<double> prefix;  // carry cases: the tokens the state_in summarizes (not sent)
  ColVec<double> prefix_gamma;  // --gates with a prefix: its gates (not sent; the state_in is decayed by them)
  NamedState<double> state_in;  // no parts = none
  bool want_state = false;
  std::string pair;           // split cases: the name of the whole-sequence case they are checked against
  Eigen::Index split_at = 0;  // split-b: where it starts within the whole sequence
  bool alone = false;         // an implementation that packs cases into batched calls calls this one by itself

  // What it must return (filled by compute_expected).
  Mat<mpfr256> expected;               // n × dv
  Mat<mpfr256> forward;                // n × (dv + 1): the unnormalized numerators and the divisor (den + ε, or 1)
  Mat<double> bound;                   // n × dv tolerance per entry (∞ where no bound exists)
  std::string bound_kind;              // how `bound` was set: sharp | proven | calibrated (cases.cpp, set_bounds)
  bool sharp = false;                  // exact for the declared arithmetic: any excess proves another function
  Mat<double> format_bound;            // where a precision problem ends (cases.cpp, compute_expected): an error
                                       // beyond it and 5% normwise is another function, not a lower precision
  NamedState<mpfr256> expected_state;  // when want_state
  NamedState<double> state_bound;      // tolerance per state entry

  // --grad: the upstream gradient (do.npy, n × dv), the gradients it must return and their tolerances.
  Mat<double> dO;
  GradientValues expected_grad;
  GradientBounds grad_bound, grad_format_bound;  // format: where a precision problem ends (as format_bound)

  Eigen::Index n() const { return in.Q.rows(); }
};

// The exact rational inputs of an exact case (every double is a dyadic rational).
Problem<rational> exact_inputs(const Problem<double>& p);

// Every case of a battery but the split-b halves, whose state comes from the implementation.
std::vector<Case> make_cases(const Request& r);
// The second half of a split: tokens [split_at, n) of `whole`, starting from the implementation's state.
Case make_split_b(const Case& whole, const Case& split_a, const NamedState<double>& their_state, const Request& r);

// Fills expected, bound, expected_state, state_bound: in exact rationals for exact and carry cases, in
// MPFR-256 for the others; the abs operator in double. With --grad the gradients too: in rationals for the exact
// cases up to 24 tokens, in MPFR-256 for longer ones (cases.cpp says why that decides as exactly).
void compute_expected(Case& c, const Request& r);

// The bounds of a computed case (bound, sharp, format_bound, state_bound and the gradients') for an implementation
// that computes in format f instead of the declared arithmetic: does f explain what the implementation returned?
// (A narrow format's calibrated bound on exact inputs keeps the proven floor only where its emulation is exact.)
struct EmulatedFormat;
void bound_as(Case& c, const Request& r, const EmulatedFormat& f);

// The streaming form (form, variant) of `op` the prime field proves equal to the reference for opt's γ and λ
// (InputError when none is): it gives the exact values at large n and defines the state's parts.
std::pair<std::string, std::string> streaming_form(const std::string& op, const Options& opt);

// The operator's output in T (rational: exact; double: for the diagnosis of long cases) through its literal
// reference at small n, else through the streaming form the prime field proves equal to it.
template <class T> Mat<T> operator_value(const std::string& op, const Problem<T>& p, const Options& opt);
extern template Mat<rational> operator_value<rational>(const std::string&, const Problem<rational>&, const Options&);
extern template Mat<double> operator_value<double>(const std::string&, const Problem<double>&, const Options&);

}  // namespace hla::verify::ext
