#pragma once
// Types behind Op::define_backward (a backward formula that calls a second op, the backward
// op, whose kernels are hand-written per device): what the backward op returns, which of its
// args-struct fields receive the grads of the forward's outputs, and the conversion of its
// returns into grads by argument name.

#include <customop/arg_types.h>
#include <customop/detail/stack.h>
#include <customop/grads.h>

#include <ATen/core/Tensor.h>
#include <boost/pfr.hpp>

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace customop::detail {

/// What the backward op returns for one field of the forward's args struct: a Tensor for a
/// Tensor or Tensor? argument (undefined: no grad), a Tensor[] for a Tensor[] argument, nothing
/// for the others.
template <class Field>
struct GradReturnOf {
  using type = std::tuple<>;
};
template <>
struct GradReturnOf<at::Tensor> {
  using type = std::tuple<at::Tensor>;
};
template <>
struct GradReturnOf<std::optional<at::Tensor>> {
  using type = std::tuple<at::Tensor>;
};
template <>
struct GradReturnOf<std::vector<at::Tensor>> {
  using type = std::tuple<std::vector<at::Tensor>>;
};

template <class T>
struct UnwrapSingle {
  using type = T;
};
template <class T>
struct UnwrapSingle<std::tuple<T>> {
  using type = T;
};

template <class Args, class = std::make_index_sequence<kNumFields<Args>>>
struct BackwardOpReturns;
template <class Args, std::size_t... I>
struct BackwardOpReturns<Args, std::index_sequence<I...>> {
  using tuple = decltype(std::tuple_cat(
      std::declval<typename GradReturnOf<boost::pfr::tuple_element_t<I, Args>>::type>()...));
  // One return is the value itself (`-> Tensor`), several a std::tuple (`-> (Tensor, Tensor)`).
  using type = typename UnwrapSingle<tuple>::type;
};

/// The C++ return type of the backward op of an op with args struct `Args`: one grad per
/// Tensor-like argument, in schema order.
template <class Args>
using BackwardOpRet = typename BackwardOpReturns<Args>::type;

/// The grads of an op's outputs that a backward op receives: one per Tensor (at::Tensor) or
/// Tensor[] (std::vector<at::Tensor>) return, none for int/float/bool returns.
template <class Returns>
struct OutputGrads;
template <class... R>
struct OutputGrads<std::tuple<R...>> {
  using type = decltype(std::tuple_cat(std::declval<typename GradReturnOf<R>::type>()...));
};

/// The grads of the forward's outputs as a tuple without the NoGrad placeholders of its
/// int/float/bool returns: the values the backward op's leading fields receive.
template <class G>
auto grad_as_tuple(G& g) {
  if constexpr (std::is_same_v<std::decay_t<G>, NoGrad>) {
    return std::tuple<>{};
  } else {
    return std::tuple<std::decay_t<G>>{std::move(g)};
  }
}

/// True when the leading fields of `BwdArgs` have exactly the types in `GradTuple`.
template <class BwdArgs, class GradTuple>
constexpr bool leading_fields_take_grads() {
  constexpr std::size_t n = std::tuple_size_v<GradTuple>;
  if constexpr (kNumFields<BwdArgs> < n) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::is_same_v<boost::pfr::tuple_element_t<I, BwdArgs>,
                             std::tuple_element_t<I, GradTuple>> &&
              ...);
    }
    (std::make_index_sequence<n>{});
  }
}

/// Writes the grads of the forward's outputs into the leading fields of `call`.
template <class BwdArgs, class GradTuple>
void fill_grad_fields(BwdArgs& call, GradTuple&& grads) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((boost::pfr::get<I>(call) = std::move(std::get<I>(grads))), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<std::decay_t<GradTuple>>>{});
}

/// A backward op's returns as one grad value per Tensor-like argument, in schema order: an
/// undefined Tensor becomes None (no grad), a Tensor[] grad a list.
template <class R>
std::vector<c10::IValue> backward_op_grads(R&& returns) {
  std::vector<c10::IValue> out;
  auto add = [&](auto& r) {
    using T = std::decay_t<decltype(r)>;
    if constexpr (std::is_same_v<T, at::Tensor>) {
      out.push_back(r.defined() ? c10::IValue(std::move(r)) : c10::IValue());
    } else {
      out.emplace_back(std::move(r));
    }
  };
  if constexpr (IsTuple<std::decay_t<R>>::value) {
    std::apply([&](auto&... r) { (add(r), ...); }, returns);
  } else {
    add(returns);
  }
  return out;
}

}  // namespace customop::detail
