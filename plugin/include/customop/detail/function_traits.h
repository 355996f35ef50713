#pragma once
// Parameter and return types of a callable with one non-template call operator.

#include <tuple>
#include <type_traits>

namespace customop::detail {

template <class F, class = void>
struct FunctionTraits {
  static constexpr bool known = false;
};
template <class R, class... A>
struct FunctionTraits<R (*)(A...), void> {
  static constexpr bool known = true;
  using result = R;
  using args = std::tuple<A...>;
};
template <class R, class... A>
struct FunctionTraits<R(A...), void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...), void> : FunctionTraits<R (*)(A...)> {};
template <class F>
struct FunctionTraits<F, std::void_t<decltype(&F::operator())>>
    : FunctionTraits<decltype(&F::operator())> {};

}  // namespace customop::detail
