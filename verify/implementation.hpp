// An implementation under test, as the battery sees it: something that answers a round of cases.
// Two kinds answer through it: a command run on case files (exec.hpp, `hla verify --exec`) and a Python
// callable (python/hla_harness.cpp). The battery (battery.hpp) is the same for both.
#pragma once

#include <string>
#include <vector>

#include "verify/cases.hpp"

namespace hla::verify::ext {

// What the implementation returned for one case. A non-empty `error` is a protocol finding (it crashed,
// timed out, skipped the case, wrote a wrong shape or dtype, ...), said in one line. NaN or Inf in an
// answer is not a protocol failure but a wrong value, judged with the rest.
// Where a case went when the implementation packed a round's cases into batched calls (python/hla_harness.cpp,
// layout=: fla's ops take [B, T, H, K]): the call (numbered over the battery), its batch and head counts, and the
// case's (b, h) in it; with GQA, kv_group query heads share one key/value head (h // kv_group). A case called alone,
// or by an implementation that does not pack, has batch = heads = 1.
struct Slot {
  long call = -1;
  long b = 0, h = 0, batch = 1, heads = 1, kv_group = 1;
  bool packed() const { return batch * heads > 1; }
};

struct Outcome {
  std::string error;
  Slot slot;
  Mat<double> O;                 // n × dv, values as the dtype held them
  NamedState<double> state_out;  // when the case asked for it
  Mat<double> dQ, dK, dV;        // --grad: ∂L/∂Q, ∂L/∂K, ∂L/∂V
  NamedState<double> dstate_in;  // --grad from a given state: ∂L/∂state_in, when the implementation gives it
  Mat<double> dgamma;            // --grad --gates: ∂L/∂γ (n × 1), when the implementation gives it
};

// One round's facts beyond the cases (for the report).
struct RoundLog {
  std::string what;  // "battery", "split second halves", "shrink 3", ...
  std::size_t cases = 0;
  double seconds = 0;
  std::string failure;  // the round as a whole failed (non-zero exit, time-out): its message
};

class Implementation {
 public:
  virtual ~Implementation() = default;
  // Answers every case of one round (outcomes in the same order). Must not throw for anything the
  // implementation does wrong: that is an Outcome::error (or RoundLog::failure for the whole round).
  virtual std::vector<Outcome> run(const std::vector<Case>& cases, const Request& req, RoundLog& log) = 0;
};

// Checks what an implementation returned against the case's shape and dtype: the one place where a
// returned array becomes an Outcome or a finding (used by every kind of implementation).
std::string check_returned_output(const Case& c, const Mat<double>& o);
std::string check_returned_state(const Case& c, const NamedState<double>& s, const Request& req);
std::string check_returned_gradients(const Case& c, const Outcome& o, const Request& req);
// What a shape error adds when the array came back transposed; a state part's names convention:transposed-state.
std::string transposed_hint(bool state_part);

}  // namespace hla::verify::ext
