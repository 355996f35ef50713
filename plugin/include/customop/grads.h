#pragma once
/// \file
/// `customop::Grads`: the gradients a backward formula returns, keyed by argument name.

#include <ATen/core/ivalue.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace customop {

/// One named gradient: `{"x", grad_x}`. The value is what the reference accepts in its grads
/// dict: a Tensor, None (`c10::IValue()` or `std::nullopt`), or for a `Tensor[]` argument a
/// list of Tensor-or-None (`std::vector<at::Tensor>`, `c10::List<std::optional<at::Tensor>>`).
/// A Tensor grad has its input's shape (or one that sums to it), is real for a real input and
/// complex for a complex one, and is on the input's device; the glue checks that when backward
/// returns (see Grads).
///
/// Example:
///   customop::GradEntry e{"weight", grad_weight};  // grad_weight: [D], as weight
struct GradEntry {
  std::string name;   ///< schema argument name
  c10::IValue value;  ///< Tensor, None, or a list of those
};

/// The grads a backward formula returns by argument name (PyTorch's CustomOp `grad_inputs`
/// dict). It must hold exactly one entry for every Tensor-like argument (Tensor, Tensor?,
/// Tensor[]) and none for the others; the glue checks this when backward returns and throws
/// c10::Error naming the op, where its backward was registered, and what is wrong.
///
/// The checks (the reference's, in its order): no name twice; the names are exactly the
/// Tensor-like arguments'; per entry, for a Tensor[] argument a list of None-or-Tensor of the
/// argument's length in that call, else None or a Tensor (None only, for a Tensor? argument
/// that was None); then each Tensor grad against its input: the input's shape or one that sums
/// to it, real for a real input (complex for a complex one), the input's device (a 0-dim
/// input's grad may be on another, non-meta device). None (or an undefined tensor) is "no grad".
/// \throws nothing itself; the glue's c10::Error comes when backward returns (see above).
///
/// Example:
///   return customop::Grads{{"x", grad * s.alpha}, {"mask", std::nullopt}};
class Grads {
 public:
  /// No entries, or `entries` in order (a name given twice is refused when backward returns).
  Grads() = default;
  Grads(std::initializer_list<GradEntry> entries) : entries_(entries) {}

  /// Adds (or replaces) the gradient of argument `name`.
  /// \param name   schema argument name (Tensor, Tensor? or Tensor[] argument)
  /// \param value  the gradient: a Tensor of the argument's shape, dtype class and device;
  ///               None; or for a Tensor[] argument a list of Tensor-or-None, one per element
  /// \returns      *this, for chaining
  /// \throws nothing: names and values are checked when backward returns
  /// Example:
  ///   customop::Grads g;
  ///   g.set("x", grad * s.alpha).set("mask", c10::IValue());
  Grads& set(std::string name, c10::IValue value) {
    for (auto& e : entries_) {
      if (e.name == name) {
        e.value = std::move(value);
        return *this;
      }
    }
    entries_.push_back({std::move(name), std::move(value)});
    return *this;
  }

  /// The entries in insertion order (set() replaces in place).
  const std::vector<GradEntry>& entries() const { return entries_; }
  /// The entries, mutable.
  std::vector<GradEntry>& entries() { return entries_; }

 private:
  std::vector<GradEntry> entries_;
};

/// The grad a backward formula receives for a non-tensor return (int, float, bool): there is
/// none, as in the reference, where autograd passes None for such outputs.
struct NoGrad {};

}  // namespace customop
