#pragma once
// Compile-time checks of the structs an op is defined with: the args struct's fields (one
// supported type per schema argument), the grads a backward formula receives per return, and
// a typed grads struct (one field per Tensor-like argument, of a type that argument takes).
// Each check names the offending field in the compiler's note. Internal to customop (op.h).

#include <customop/arg_types.h>
#include <customop/detail/function_traits.h>
#include <customop/detail/stack.h>
#include <customop/grads.h>
#include <customop/op_core.h>

#include <ATen/core/Tensor.h>
#include <boost/pfr.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace customop::detail {

/// A field name as a template argument, so that compiler notes print it:
/// `FieldName<5>{"alpha"}`.
template <std::size_t N>
struct FieldName {
  char name[N + 1]{};
  constexpr FieldName(std::string_view s) { std::copy_n(s.data(), N, name); }
};

/// The name of field I of T (Boost.PFR >= 2.2), as a template argument.
template <class T, std::size_t I>
inline constexpr auto kFieldName =
    FieldName<boost::pfr::get_name<I, T>().size()>(boost::pfr::get_name<I, T>());

/// Instantiated per args-struct field: an unsupported type fails here, and the compiler's
/// note `CheckArgField<FieldName<N>{"<field>"}, <type>>` names the field and its type.
template <auto Name, class Field>
struct CheckArgField {
  static_assert(ArgTraits<Field>::supported,
                "[customop] unsupported args-struct field type (CheckArgField<FieldName{name}, "
                "type> below names the field). Use at::Tensor, std::optional<at::Tensor>, "
                "std::vector<at::Tensor>, int64_t (not int), double (not float), bool, "
                "std::string, std::vector<int64_t|double|bool>, c10::Scalar, c10::ScalarType, "
                "c10::SymInt, std::vector<c10::SymInt>, or std::optional of a scalar type or of "
                "c10::SymInt (see "
                "customop/arg_types.h)");
  static constexpr ArgKind kind = ArgTraits<Field>::kind;
};

template <class Args>
constexpr auto field_infos() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<FieldInfo, sizeof...(I)>{FieldInfo{
        CheckArgField<kFieldName<Args, I>, boost::pfr::tuple_element_t<I, Args>>::kind,
        ArgTraits<boost::pfr::tuple_element_t<I, Args>>::cpp_name, boost::pfr::get_name<I, Args>(),
        ArgTraits<boost::pfr::tuple_element_t<I, Args>>::written}...};
  }
  (std::make_index_sequence<kNumFields<Args>>{});
}

/// The grad a backward formula receives for one return type.
template <class T>
struct GradFor {
  using type = NoGrad;
};
template <>
struct GradFor<at::Tensor> {
  using type = at::Tensor;
};
template <>
struct GradFor<std::vector<at::Tensor>> {
  using type = std::vector<at::Tensor>;
};

template <class Returns, class F, class Saved>
struct BackwardInvocable;
template <class... R, class F, class Saved>
struct BackwardInvocable<std::tuple<R...>, F, Saved> {
  static constexpr bool value = std::is_invocable_v<F&, const Saved&, typename GradFor<R>::type...>;
  using result = std::invoke_result_t<F&, const Saved&, typename GradFor<R>::type...>;
};

template <class T>
inline constexpr bool kReturnHasBackward =
    std::is_same_v<T, at::Tensor> || std::is_same_v<T, std::vector<at::Tensor>> ||
    std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, bool>;

/// True when every return is a Tensor or Tensor[] (what a fake kernel can produce).
template <class Returns>
inline constexpr bool kAllReturnsTensors = false;
template <class... R>
inline constexpr bool kAllReturnsTensors<std::tuple<R...>> =
    ((std::is_same_v<R, at::Tensor> || std::is_same_v<R, std::vector<at::Tensor>>)&&...);

// ---- typed grads (an aggregate with one field per tensor-like argument) --------------------

template <class T>
struct TypedGradKind {
  static constexpr bool valid = false;
};
template <>
struct TypedGradKind<at::Tensor> {
  static constexpr bool valid = true;
  static constexpr bool list = false;
};
template <>
struct TypedGradKind<std::optional<at::Tensor>> : TypedGradKind<at::Tensor> {};
template <>
struct TypedGradKind<std::vector<at::Tensor>> {
  static constexpr bool valid = true;
  static constexpr bool list = true;
};
template <>
struct TypedGradKind<std::vector<std::optional<at::Tensor>>>
    : TypedGradKind<std::vector<at::Tensor>> {};

template <class Args>
constexpr std::size_t count_tensor_like() {
  std::size_t n = 0;
  for (const auto& f : field_infos<Args>()) n += is_tensor_like(f.kind) ? 1 : 0;
  return n;
}

template <class Args>
constexpr auto tensor_like_kinds() {
  std::array<ArgKind, count_tensor_like<Args>()> out{};
  std::size_t k = 0;
  for (const auto& f : field_infos<Args>()) {
    if (is_tensor_like(f.kind)) out[k++] = f.kind;
  }
  return out;
}

/// Instantiated per field of a typed grads struct; its template arguments (the field's name,
/// its type, the argument's kind) name the field in the compiler's note when one fires.
template <auto GradFieldName, class GradField, ArgKind ArgumentKind>
struct CheckTypedGradField {
  static_assert(TypedGradKind<GradField>::valid,
                "[customop] a typed grads field must be at::Tensor, std::optional<at::Tensor>, "
                "std::vector<at::Tensor> or std::vector<std::optional<at::Tensor>> "
                "(CheckTypedGradField<FieldName{name}, ...> below names the field)");
  static_assert(!TypedGradKind<GradField>::valid ||
                    TypedGradKind<GradField>::list == (ArgumentKind == ArgKind::kTensorList),
                "[customop] a typed grads field does not match its tensor-like argument "
                "(CheckTypedGradField<FieldName{name}, ...> below names the field): a Tensor[] "
                "argument takes a std::vector grad, a Tensor or Tensor? argument a single "
                "at::Tensor grad");
  static constexpr bool ok = true;
};

/// True for a valid typed grads struct G of Args; otherwise one static_assert fires and it
/// returns false, so the caller instantiates nothing more with G (no cascade of errors).
template <class Args, class G>
constexpr bool check_typed_grads() {
  if constexpr (!std::is_aggregate_v<G>) {
    static_assert(always_false<G>,
                  "[customop] backward must return customop::Grads (by name), c10::IValue (a "
                  "dict of grads), or a typed grads aggregate with one field per Tensor-like "
                  "argument (not a std::vector of grads or a tuple: name them)");
    return false;
  } else if constexpr (kNumFields<G> != count_tensor_like<Args>()) {
    static_assert(always_false<G>,
                  "[customop] the typed grads struct needs exactly one field per Tensor-like "
                  "argument (Tensor, Tensor?, Tensor[]) of the args struct, in schema order");
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (CheckTypedGradField<kFieldName<G, I>, boost::pfr::tuple_element_t<I, G>,
                                  tensor_like_kinds<Args>()[I]>::ok &&
              ...);
    }
    (std::make_index_sequence<kNumFields<G>>{});
  }
}

/// customop::Grads, c10::IValue, or a valid typed grads struct (check_typed_grads).
template <class Args, class R>
constexpr bool grads_type_ok() {
  if constexpr (std::is_same_v<R, Grads> || std::is_same_v<R, c10::IValue>) {
    return true;
  } else {
    return check_typed_grads<Args, R>();
  }
}

}  // namespace customop::detail
