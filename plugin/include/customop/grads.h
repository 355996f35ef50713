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
struct GradEntry {
  std::string name;   ///< schema argument name
  c10::IValue value;  ///< Tensor, None, or a list of those
};

/// The grads a backward formula returns by argument name (PyTorch's CustomOp `grad_inputs`
/// dict). It must hold exactly one entry for every Tensor-like argument (Tensor, Tensor?,
/// Tensor[]) and none for the others; the glue checks this when backward returns and throws
/// c10::Error naming the op, where its backward was registered, and what is wrong.
///
/// Example:
///   return customop::Grads{{"x", grad * s.alpha}, {"mask", std::nullopt}};
class Grads {
 public:
  Grads() = default;
  Grads(std::initializer_list<GradEntry> entries) : entries_(entries) {}

  /// Adds (or replaces) the gradient of argument `name`.
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

  const std::vector<GradEntry>& entries() const { return entries_; }
  std::vector<GradEntry>& entries() { return entries_; }

 private:
  std::vector<GradEntry> entries_;
};

/// The grad a backward formula receives for a non-tensor return (int, float, bool): there is
/// none, as in the reference, where autograd passes None for such outputs.
struct NoGrad {};

}  // namespace customop
