// Template definitions behind core/registry.hpp; included only by the generated per-scalar TUs.
#pragma once

#include <algorithm>
#include <sstream>

#include "core/registry.hpp"

namespace hla {

// fast/distributed/register.hpp: the sequence-parallel mpi-* forms (declared here, beside its only caller).
template <class T> void register_distributed(Registry<T>&);

template <class T> void validate(const Problem<T>& p, const Options& opt, const Caps& caps, const std::string& who) {
  auto fail = [&](const std::string& what) { throw InputError(who + ": " + what); };
  if (p.Q.rows() == 0) fail("n = 0: the sequence is empty");
  if (p.Q.cols() == 0) fail("d = 0: queries and keys need at least one feature");
  if (p.V.cols() == 0) fail("dv = 0: values need at least one feature");
  if (p.K.rows() != p.Q.rows() || p.V.rows() != p.Q.rows())
    fail("Q, K, V must have the same number of rows (tokens): got " + std::to_string(p.Q.rows()) + ", " +
         std::to_string(p.K.rows()) + ", " + std::to_string(p.V.rows()));
  if (p.K.cols() != p.Q.cols())
    fail("Q and K must have the same width d: got " + std::to_string(p.Q.cols()) + " and " +
         std::to_string(p.K.cols()));
  validate_options(opt, caps, who);
  for (const Mat<T>* m : {&p.Q, &p.K, &p.V})
    for (Eigen::Index i = 0; i < m->size(); ++i)
      if (!is_finite((*m)(i))) fail("inputs contain NaN or Inf");
  if (p.gates.size() == 0) return;
  if (!caps.gates) fail("this form does not take per-token gates (`hla list` marks the forms that do)");
  if (opt.gamma != 1) fail("per-token gates and a decay gamma != 1 together: the decay is the gates'");
  if (p.gates.size() != p.Q.rows())
    fail(std::to_string(p.gates.size()) + " gates for " + std::to_string(p.Q.rows()) + " tokens");
  // With an order (every scalar but F_p) a gate lies in (0, 1]; in F_p a gate is any field element (the
  // identities are polynomial in the gates, core/gates.hpp).
  for (Eigen::Index t = 0; t < p.gates.size(); ++t) {
    if (!is_finite(p.gates(t))) fail("gate " + std::to_string(t) + " is NaN or Inf");
    if constexpr (has_order_v<T>)
      if (!(p.gates(t) > T(0) && p.gates(t) <= T(1))) fail("gate " + std::to_string(t) + " lies outside (0, 1]");
  }
}

template <class T>
Run<T> Entry<T>::operator()(const Problem<T>& p, const Options& opt, const NamedState<T>* init) const {
  validate(p, opt, caps, key());
  if (init && !caps.state) throw InputError(key() + ": this form does not take an initial state");
  Run<T> r = p.gates.size() ? gated(p, opt, init) : fn(p, opt, init);
  for (Eigen::Index i = 0; i < r.O.size(); ++i)
    if (!is_finite(r.O(i)))
      throw NumericalError(key() + ": output is not finite at token " + std::to_string(i % r.O.rows()) +
                           " (a normalizer den_t + eps near zero, or overflow)");
  if (!opt.state) r.state = {};  // outputs only, from every form alike (Options::state)
  return r;
}

template <class T> void Registry<T>::add(Entry<T> e) {
  if (try_find(e.op, e.form, e.variant)) throw std::logic_error("registered twice: " + e.key());
  const OperatorInfo* op = find_operator(e.op);
  if (!op) throw std::logic_error(e.key() + ": the operator has no row in core/operators.hpp");
  // A form may take only what its operator defines (a form that took a ridge the definition lacks would be
  // computing some other operator).
  if ((e.caps.decay && !op->options.decay) || (e.caps.normalized && !op->options.normalized) ||
      (e.caps.ridge && !op->options.ridge))
    throw std::logic_error(e.key() + ": takes an option its operator does not define (core/operators.hpp)");
  if (e.caps.gates || e.gated) throw std::logic_error(e.key() + ": gates are given by add_gates");
  if (e.variant == "paper") e.target = Target::paper_formula;
  if (e.claim.empty())
    e.claim = e.variant == "paper"       ? paper_form_claim(e.op, e.form)
              : e.variant == "corrected" ? corrected_form_claim(e.op, e.form)
                                         : "";
  entries_.push_back(std::move(e));
}

template <class T> void Registry<T>::add_gates(const std::string& op, const std::string& form,
                                               const std::string& variant, std::string cite, FormFn<T> gated) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry<T>& e) { return e.op == op && e.form == form && e.variant == variant; });
  if (it == entries_.end())
    throw std::logic_error("gates for an unregistered form: " + op + "/" + form + "/" + variant);
  if (it->gated) throw std::logic_error("gates registered twice: " + it->key());
  if (!operator_info(op).options.gates)
    throw std::logic_error(it->key() + ": its operator defines no gates (core/operators.hpp)");
  it->caps.gates = true;
  it->gated = std::move(gated);
  it->gated_cite = std::move(cite);
}

// An empty variant means "the paper's formula, or the definition": the corrected variant is only
// ever chosen by name.
template <class T> const Entry<T>* Registry<T>::try_find(const std::string& op, const std::string& form,
                                                         const std::string& variant) const {
  for (const auto& e : entries_) {
    if (e.op != op || e.form != form) continue;
    if (variant.empty() ? (e.variant == "paper" || e.variant == "spec") : e.variant == variant) return &e;
  }
  return nullptr;
}

template <class T> const Entry<T>* Registry<T>::try_find_exact(const std::string& op, const std::string& form) const {
  if (const Entry<T>* e = try_find(op, form, "corrected")) return e;
  return try_find(op, form, "");
}

template <class T> const Entry<T>& Registry<T>::find_exact(const std::string& op, const std::string& form) const {
  if (const Entry<T>* e = try_find_exact(op, form)) return *e;
  return find(op, form, "");
}

template <class T>
const Entry<T>& Registry<T>::find(const std::string& op, const std::string& form, const std::string& variant) const {
  if (const Entry<T>* e = try_find(op, form, variant)) return *e;
  std::vector<const Entry<T>*> variants;  // every variant of (op, form)
  for (const auto& e : entries_)
    if (e.op == op && e.form == form) variants.push_back(&e);
  // No paper formula and no definition, but only one way to compute it: that one is what was meant.
  if (variant.empty() && variants.size() == 1) return *variants.front();
  std::ostringstream msg;
  msg << "no form '" << op << "/" << form << (variant.empty() ? "" : "/" + variant) << "' for scalar "
      << scalar_name<T>();
  if (!variants.empty()) {
    msg << "; " << op << "/" << form << " has the variants";
    for (const Entry<T>* e : variants) msg << " " << e->variant;
    msg << (variant.empty() ? " (name one)" : "");
  } else {
    msg << "; known:";
    for (const auto& e : entries_) msg << " " << e.key();
  }
  throw InputError(msg.str());
}

template <class T> const Registry<T>& registry() {
  static const Registry<T> reg = [] {
    Registry<T> r;
    register_reference(r);
    register_serial(r);
    register_scan(r);
    register_chunked(r);
    register_distributed(r);
    register_cuda(r);
    return r;
  }();
  return reg;
}

}  // namespace hla
