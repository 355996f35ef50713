#pragma once
// Moving args structs and returns between C++ values and the dispatcher's IValue stack.

#include <customop/arg_types.h>

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <boost/pfr.hpp>

#include <tuple>
#include <type_traits>
#include <utility>

namespace customop::detail {

template <class Args>
inline constexpr std::size_t kNumFields = boost::pfr::tuple_size_v<Args>;

/// Reads the last kNumFields<Args> values of `stack` into an Args; `consume` also drops them.
template <class Args>
Args args_from_stack(torch::jit::Stack& stack, bool consume) {
  Args args{};
  auto base = stack.end() - static_cast<std::ptrdiff_t>(kNumFields<Args>);
  boost::pfr::for_each_field(args, [&](auto& field, std::size_t i) {
    using F = std::decay_t<decltype(field)>;
    // A MutableTensor is a Tensor to the dispatcher.
    using Boxed = std::conditional_t<std::is_same_v<F, MutableTensor>, at::Tensor, F>;
    if (consume) {
      field = std::move(base[i]).template to<Boxed>();
    } else {
      field = base[i].template to<Boxed>();
    }
  });
  if (consume) torch::jit::drop(stack, kNumFields<Args>);
  return args;
}

/// Pushes every field of `args`, in order, as an IValue.
template <class Args>
void push_args(torch::jit::Stack& stack, const Args& args) {
  boost::pfr::for_each_field(args, [&](const auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, MutableTensor>) {
      stack.emplace_back(static_cast<const at::Tensor&>(field));
    } else {
      stack.emplace_back(field);
    }
  });
}

template <class Ret>
void push_returns(torch::jit::Stack& stack, Ret ret) {
  if constexpr (IsTuple<Ret>::value) {
    std::apply([&](auto&&... e) { (stack.emplace_back(std::forward<decltype(e)>(e)), ...); },
               std::move(ret));
  } else {
    stack.emplace_back(std::move(ret));
  }
}

/// Runs `fn(args)` and pushes what it returns as `Ret` (nothing for `void`: a `-> ()` op).
template <class Ret, class F, class Args>
void call_and_push(torch::jit::Stack& stack, F& fn, const Args& args) {
  if constexpr (std::is_void_v<Ret>) {
    fn(args);
  } else {
    push_returns(stack, Ret(fn(args)));
  }
}

template <class Ret>
Ret pop_returns(torch::jit::Stack& stack) {
  if constexpr (std::is_void_v<Ret>) {
    return;  // `-> ()`: nothing on the stack
  } else {
    constexpr std::size_t n = std::tuple_size_v<ReturnTupleT<Ret>>;
    auto base = stack.end() - static_cast<std::ptrdiff_t>(n);
    Ret ret = [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (IsTuple<Ret>::value) {
        return Ret{std::move(base[I]).template to<std::tuple_element_t<I, Ret>>()...};
      } else {
        return std::move(base[0]).template to<Ret>();
      }
    }
    (std::make_index_sequence<n>{});
    torch::jit::drop(stack, n);
    return ret;
  }
}

}  // namespace customop::detail
