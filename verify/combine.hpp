// `hla verify --combine`: hold an outside chunk-parallel code's associative operator to the algebra it rests on.
//
// A chunk-parallel (scan) implementation summarizes segments of tokens and combines summaries; everything it
// computes is exact only if its combine is associative and agrees with its segment function. The protocol asks
// the command for two kinds of answers, told apart by case.json's "kind":
//   segment   DIR/<case>/q.npy, k.npy (n×d), v.npy (n×dv), n ≥ 0  →  DIR/<case>/summary/<part>.npy
//   combine   DIR/<case>/a/<part>.npy, b/<part>.npy (a precedes b; case.json has a_tokens, b_tokens)
//                                                               →  DIR/<case>/ab/<part>.npy
// The parts are the command's own: SPEC's segment part names by default (the harness's scan operators,
// fast/scan: hla2 S, C, m, G, h, rho; ahla P, m, E, n, R, rho; hla3 SK, P, m, F, eta, SQ, X, x, Y; linear S, z,
// rho), or any names, declared in `--parts FILE.json` as {"user name": "SPEC name" | null}. Parts travel in the
// shapes the command writes them (a scalar as a 0-d array); the harness hands each back unchanged.
//
// Checks, on exact segments (ternary tokens, γ ∈ {1, 1/2, 3/4}; γ = 1 at two widths without decay) and on random ones
// at the user's γ, for triples of segments A, B, C of several lengths (single tokens and longer):
//   associativity    (A ⊕ B) ⊕ C = A ⊕ (B ⊕ C)
//   identity         I ⊕ A = A = A ⊕ I, with I the command's summary of the empty segment
//   segments         (A ⊕ B) ⊕ C = segment(ABC): the combine folds to the segment function
//   the operator     (when every part maps onto SPEC's) segment(A) = the harness's exact summary, and
//                    A ⊕ B = the harness's exact combine of the command's own A and B
// within a tolerance of h·u times the part's size (h = 4(n + d + dv), u the dtype's roundoff). A failing check
// reports the smallest triple that breaks it (tokens, summaries, both sides), and which of the harness's
// combines — the paper's printed one or the corrected — the command's combine equals.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "verify/cases.hpp"
#include "verify/exec.hpp"
#include "verify/implementation.hpp"

namespace hla::verify::ext {

// A summary part as the command gave it: any shape (0-d, 1-D, 2-D), values in C order.
struct Part {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<double> values;
};
using Summary = std::vector<Part>;

// What a case asks the command for (case.json's "kind"): a segment's summary, or the combine of two summaries.
enum class CombineKind { segment, combine };
std::string to_string(CombineKind k);                     // "segment" | "combine"
CombineKind parse_combine_kind(const std::string& text);  // InputError for anything else

struct CombineCase {
  std::string name;
  CombineKind kind = CombineKind::segment;
  std::string group;       // base | decay | decay-half | user
  Options opt;             // only γ enters a summary
  Problem<double> tokens;  // segment: its tokens (n may be 0)
  Summary a, b;            // combine: the operands, as the command returned them
  long a_tokens = 0, b_tokens = 0;
  Eigen::Index d = 0, dv = 0;
};
struct CombineOutcome {
  std::string error;  // a protocol finding
  Summary summary;    // segment: its summary; combine: a ⊕ b
};

class CombineImplementation {
 public:
  virtual ~CombineImplementation() = default;
  virtual std::vector<CombineOutcome> run(const std::vector<CombineCase>& cases, const Request& req, RoundLog& log) = 0;
};

// The command through files (the protocol above).
class ExecCombine : public CombineImplementation {
 public:
  ExecCombine(std::string command, double timeout_seconds, bool keep_dirs = false, bool fresh_process = false)
      : session_(std::move(command), fresh_process), timeout_(timeout_seconds), keep_(keep_dirs) {}
  std::vector<CombineOutcome> run(const std::vector<CombineCase>& cases, const Request& req, RoundLog& log) override;

 private:
  InterruptGuard session_guard_;  // signals caught between rounds too (ExecImplementation's); goes after session_
  CommandSession session_;        // verify/exec.hpp: one process across rounds when the command answers
  double timeout_;
  bool keep_;
};

// The user's part names mapped onto SPEC's (--parts): user name → SPEC name, "" for a part of their own.
using PartMap = std::vector<std::pair<std::string, std::string>>;
PartMap read_part_map(const std::string& file);  // InputError for anything but {"name": "SPEC name" | null}

// SPEC's segment part names of op's (corrected) scan operator, in order.
std::vector<std::string> spec_segment_parts(const std::string& op);

// The whole report (same top-level keys as the forward battery: verdict, findings, rounds, timings, summary).
nlohmann::json run_combine_battery(CombineImplementation& impl, const Request& req, const PartMap& map,
                                   std::ostream* progress = nullptr);

}  // namespace hla::verify::ext
