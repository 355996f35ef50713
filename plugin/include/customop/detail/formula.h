#pragma once
// The typed halves of a backward formula as the core calls them: the grads a formula receives
// (one per return), a typed grads struct turned into grads by name (so every kind of grads is
// validated on one path, OpCore::grads_to_flat), and the one saved-state type both halves must
// share. Internal to customop (op.h).

#include <customop/detail/op_checks.h>
#include <customop/detail/saved_state.h>
#include <customop/grads.h>
#include <customop/op_core.h>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <boost/pfr.hpp>
#include <c10/util/Exception.h>

#include <cstddef>
#include <iterator>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace customop::detail {

/// The grads a formula receives for the returns `Returns` (a std::tuple of return types).
template <class Returns>
struct GradsFor;
template <class... R>
struct GradsFor<std::tuple<R...>> {
  using type = std::tuple<typename GradFor<R>::type...>;
};

/// The grad of return type T, taken from the flat grads of every Tensor output at `k` (a
/// Tensor[] return takes as many as it had elements, from the saved state's list sizes, in
/// order: `list` counts the Tensor[] returns seen); NoGrad for int/float/bool returns.
template <class T>
typename GradFor<T>::type take_grad(std::vector<at::Tensor>& grads, const SavedStateBase& state,
                                    std::size_t& k, std::size_t& list) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return std::move(grads[k++]);
  } else if constexpr (std::is_same_v<T, std::vector<at::Tensor>>) {
    const auto n = static_cast<std::size_t>(state.return_list_sizes[list++]);
    const auto first = grads.begin() + static_cast<std::ptrdiff_t>(k);
    std::vector<at::Tensor> out(std::make_move_iterator(first),
                                std::make_move_iterator(first + static_cast<std::ptrdiff_t>(n)));
    k += n;
    return out;
  } else {
    return NoGrad{};
  }
}

/// The flat grads of every Tensor output (moved out of `grads`) as one grad per return.
template <class Returns>
typename GradsFor<Returns>::type take_grads(std::vector<at::Tensor>& grads,
                                            const SavedStateBase& state) {
  std::size_t k = 0, list = 0;
  return [&]<class... R>(std::type_identity<std::tuple<R...>>) {
    // NB: a braced list runs its initializers in order, so returns take their grads in order.
    return typename GradsFor<Returns>::type{take_grad<R>(grads, state, k, list)...};
  }(std::type_identity<Returns>{});
}

/// A typed grads struct (fields named after the Tensor-like arguments, checked at compile
/// time and at registration) as grads by name: at::Tensor and std::optional<at::Tensor>
/// fields as a Tensor or None, std::vector fields as lists. Its fields are moved out.
template <class G>
Grads typed_grads_to_named(G& grads) {
  constexpr auto names = boost::pfr::names_as_array<G>();
  Grads named;
  named.entries().reserve(names.size());
  std::size_t i = 0;
  boost::pfr::for_each_field(grads, [&](auto& g) {
    using F = std::decay_t<decltype(g)>;
    c10::IValue value;
    if constexpr (std::is_same_v<F, at::Tensor>) {
      value = std::move(g);
    } else if constexpr (std::is_same_v<F, std::optional<at::Tensor>>) {
      if (g.has_value()) value = std::move(*g);
    } else if constexpr (std::is_same_v<F, std::vector<at::Tensor>>) {
      value = c10::List<at::Tensor>(std::move(g));
    } else {
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(g.size());
      for (auto& t : g) list.push_back(std::move(t));
      value = std::move(list);
    }
    named.entries().push_back({std::string(names[i++]), std::move(value)});
  });
  return named;
}

/// The saved-state type of an op's formula: the first half registered records it, and the
/// other half must use the same type.
class SavedTypeRecord {
 public:
  /// Throws c10::TypeError naming the op, the half `what` and where it is registered, and both
  /// types, when a type is recorded and `type` is another.
  void check(const std::string& op, const std::type_info& type, std::string_view type_name,
             const char* what, const std::source_location& loc) const {
    if (type_ == nullptr) return;
    TORCH_CHECK_TYPE(*type_ == type, op, ": ", what, " at ", format_location(loc),
                     " uses the saved-state type ", type_name, " but ", from_, " uses ", name_,
                     "; both must use the same type");
  }

  /// Records `type` unless one is recorded. NB: call only after the registration succeeded,
  /// so a refused one leaves no trace.
  void record(const std::type_info& type, std::string_view type_name, const char* what) {
    if (type_ != nullptr) return;
    type_ = &type;
    name_ = std::string(type_name);
    from_ = what;
  }

 private:
  const std::type_info* type_ = nullptr;
  std::string name_;
  const char* from_ = "";
};

}  // namespace customop::detail
