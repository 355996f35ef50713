#pragma once
// Saved-state packing: the tensor fields of a user's Saved aggregate go through the autograd
// context's save_for_backward (version-counter checks, no reference cycle through outputs);
// the other fields stay in the C++ object, so they round-trip exactly.

#include <customop/op_core.h>

#include <ATen/core/Tensor.h>
#include <boost/pfr.hpp>

#include <optional>
#include <type_traits>
#include <vector>

namespace customop::detail {

template <class T>
struct IsSavedTensorField : std::false_type {};
template <>
struct IsSavedTensorField<at::Tensor> : std::true_type {};
template <>
struct IsSavedTensorField<std::optional<at::Tensor>> : std::true_type {};
template <>
struct IsSavedTensorField<std::vector<at::Tensor>> : std::true_type {};

template <class Saved>
struct SavedState final : SavedStateBase {
  Saved value;  // tensor fields emptied by take_tensors(): held by the context instead

  /// Moves the tensor fields out (in field order, lists flattened) for save_for_backward.
  std::vector<at::Tensor> take_tensors() {
    std::vector<at::Tensor> out;
    boost::pfr::for_each_field(value, [&](auto& field) {
      using F = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<F, at::Tensor>) {
        out.push_back(std::move(field));
        field = at::Tensor();
      } else if constexpr (std::is_same_v<F, std::optional<at::Tensor>>) {
        if (field.has_value()) {
          out.push_back(std::move(*field));
          *field = at::Tensor();  // keeps has_value() so restore() knows to fill it
        }
      } else if constexpr (std::is_same_v<F, std::vector<at::Tensor>>) {
        for (auto& t : field) {
          out.push_back(std::move(t));
          t = at::Tensor();
        }
      }
    });
    return out;
  }

  /// A copy of the saved state with the tensor fields refilled from `tensors` (the unpacked
  /// saved variables, in take_tensors() order). A copy, so backward can run again.
  Saved restore(const std::vector<at::Tensor>& tensors) const {
    Saved s = value;
    std::size_t k = 0;
    boost::pfr::for_each_field(s, [&](auto& field) {
      using F = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<F, at::Tensor>) {
        field = tensors[k++];
      } else if constexpr (std::is_same_v<F, std::optional<at::Tensor>>) {
        if (field.has_value()) *field = tensors[k++];
      } else if constexpr (std::is_same_v<F, std::vector<at::Tensor>>) {
        for (auto& t : field) t = tensors[k++];
      }
    });
    return s;
  }
};

}  // namespace customop::detail
