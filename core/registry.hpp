// The registry of (operator, form, variant, scalar) → function, with what each form supports.
// Tests, the claims ledger, the CLI, sweeps and benchmarks all iterate it: registering a form once makes
// it verified, swept and benchmarked everywhere.
//
// Each kind of form registers itself from its own folder (reference/, fast/serial/, fast/scan/,
// fast/chunked/) through `register_<kind><T>(Registry<T>&)`; core/registry.cpp instantiates the kinds for
// each scalar in separate translation units so rebuilds stay incremental and parallel.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/operators.hpp"
#include "core/products.hpp"
#include "core/types.hpp"

namespace hla {

// What a form accepts; anything else is rejected with InputError before it runs.
struct Caps {
  bool decay = false;                  // γ < 1
  bool normalized = false;             // divide by den_t + ε
  bool ridge = false;                  // λ > 0
  bool state = false;                  // initial state in / final state out
  bool chunk = false;                  // uses Options::chunk
  bool threads = false;                // uses Options::threads
  bool gates = false;                  // per-token gates (Problem::gates): set by Registry::add_gates, never by hand
  bool device = false;                 // runs on a CUDA GPU (fast/cuda/): registered only where one is present
  Products products = Products::ieee;  // how its matrix products round (core/products.hpp)
};

// What a registered form computes, and so what the tests hold it to.
//   definition     the operator itself: equal to its reference (op/reference/spec) on every input its Caps accept
//                  (exactly, in the exact scalars). The references, the harness's corrections (variant
//                  "corrected") and the harness's own forms (e.g. chunked-naive-cumprod) compute the definition.
//   paper_formula  the formula as the paper prints it (variant "paper"): it equals the definition exactly when its
//                  claim (Entry::claim) holds in the ledger (results/claims.md); where the claim fails the form still
//                  computes the printed formula, and is held to that.
enum class Target { definition, paper_formula };

template <class T> using FormFn = std::function<Run<T>(const Problem<T>&, const Options&, const NamedState<T>*)>;

template <class T> struct Entry {
  std::string op;       // operator id (SPEC table)
  std::string form;     // reference | serial | scan-fold | scan-blelloch | scan-twolevel | chunked | ...
  std::string variant;  // "spec" for references, "paper" for a formula as printed, "corrected" for ours (see target)
  std::string cite;     // where the formula is, e.g. "§3.1 online updates; Alg. 1"
  Caps caps;
  FormFn<T> fn;
  // The same form with per-token gates γ_t (docs/operators.md "Gated decay"), side by side with its fixed-γ
  // computation: run when the problem has gates. Empty for forms that do not take gates (they refuse them).
  FormFn<T> gated = {};
  std::string gated_cite = {};
  // Filled by Registry::add when not given: variant "paper" is a paper_formula, every other variant the definition.
  Target target = Target::definition;
  // The ledger claim (claims/list.cpp, results/claims.md) the entry stands for, "" if none. Registry::add fills an
  // empty one from the operator table: a paper formula's claim is paper_form_claim(op, form), a correction's is
  // corrected_form_claim(op, form) (that claim's ".corrected" entry); a form no table row names stands for none
  // unless its registration names its claim.
  std::string claim = {};

  std::string key() const { return op + "/" + form + "/" + variant; }
  // Validates the inputs against the form's capabilities, runs it, and refuses a non-finite result.
  Run<T> operator()(const Problem<T>& p, const Options& opt, const NamedState<T>* init = nullptr) const;
};

template <class T> class Registry {
 public:
  // Registers a form; fills its target and, if empty, its claim (Entry::target, Entry::claim).
  void add(Entry<T> e);
  // Gives the registered (op, form, variant) its gated computation; a form is given gates once.
  void add_gates(const std::string& op, const std::string& form, const std::string& variant, std::string cite,
                 FormFn<T> gated);
  const std::vector<Entry<T>>& entries() const { return entries_; }
  // An empty variant means the paper's formula or the definition (try_find: only those); when (op, form)
  // has neither but a single variant, find takes that one. Throws InputError naming the variants of
  // (op, form), or the known keys, when there is no such entry.
  const Entry<T>& find(const std::string& op, const std::string& form, const std::string& variant = "") const;
  const Entry<T>* try_find(const std::string& op, const std::string& form, const std::string& variant = "") const;
  const Entry<T>& reference(const std::string& op) const { return find(op, "reference", "spec"); }
  // The variant of (op, form) that computes the operator with every option it takes: the harness's correction
  // where one is registered (the paper's formula is then wrong, results/claims.md), else the paper's formula.
  const Entry<T>& find_exact(const std::string& op, const std::string& form) const;
  const Entry<T>* try_find_exact(const std::string& op, const std::string& form) const;

 private:
  std::vector<Entry<T>> entries_;
};

// The process-wide registry for scalar T, built on first use from every kind of form.
template <class T> const Registry<T>& registry();

// The most OpenMP threads a form may ask for (Options::threads), and a refusal (InputError) of an OMP_NUM_THREADS
// past it: the CLI checks the environment before anything runs.
int max_threads();
void check_thread_environment();

// Checks the options' ranges and that the form defines them; throws InputError naming `who` and the problem.
void validate_options(const Options& opt, const Caps& caps, const std::string& who);
// Also checks shapes and finiteness; throws InputError with a message that names the problem.
template <class T> void validate(const Problem<T>& p, const Options& opt, const Caps& caps, const std::string& who);

// The kinds register themselves; each is defined in its own folder's register.hpp.
template <class T> void register_reference(Registry<T>&);
template <class T> void register_serial(Registry<T>&);
template <class T> void register_scan(Registry<T>&);
template <class T> void register_chunked(Registry<T>&);
template <class T> void register_cuda(Registry<T>&);

}  // namespace hla
