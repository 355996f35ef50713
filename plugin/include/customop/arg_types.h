#pragma once
/// \file
/// The C++ types an args struct field may have, and the schema type each one stands for.
///
/// | schema type        | args-struct field type                 |
/// |--------------------|----------------------------------------|
/// | Tensor             | at::Tensor                             |
/// | Tensor(a!)         | customop::MutableTensor (the kernel writes it) |
/// | Tensor?            | std::optional<at::Tensor>              |
/// | Tensor[]           | std::vector<at::Tensor>                |
/// | int / int?         | int64_t / std::optional<int64_t>       |
/// | float / float?     | double / std::optional<double>         |
/// | bool / bool?       | bool / std::optional<bool>             |
/// | str / str?         | std::string / std::optional<std::string> |
/// | int[] / float[] / bool[] | std::vector<int64_t> / std::vector<double> / std::vector<bool> |
/// | Scalar / Scalar?   | c10::Scalar / std::optional<c10::Scalar> |
/// | ScalarType / ScalarType? | c10::ScalarType / std::optional<c10::ScalarType> |
/// | SymInt / SymInt? / SymInt[] | c10::SymInt / std::optional<c10::SymInt> /
/// std::vector<c10::SymInt> |
///
/// SymInt is for a size: under torch.compile, torch.export or a fake-tensor trace it carries
/// the symbol of a tensor's size (concrete in eager calls), so the shape function computes
/// symbolic output sizes from it and the trace stays dynamic; an `int` argument given a symbolic
/// size specialises the graph on its value. A kernel, which always sees concrete values, reads
/// it with `expect_int()`; a shape function keeps it symbolic (c10::SymInt arithmetic).
///
/// Return types (the `Ret` of an op): at::Tensor, std::vector<at::Tensor>, int64_t, double,
/// bool, or a std::tuple of those for several returns; `void` (schema `-> ()`) for an op that
/// only writes its MutableTensor arguments.
///
/// An unsupported field type is a compile error naming the field (customop/op.h); an
/// unsupported return type a compile error from detail::ReturnTraits.
///
/// Example:
///   struct LeakyArgs { at::Tensor x; double negative_slope; std::optional<at::Tensor> bias; };
///   // matches "myns::leaky(Tensor x, float negative_slope, Tensor? bias) -> Tensor"

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymInt.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace customop {

/// What an argument or return is, as far as the autograd glue cares.
/// One enumerator per schema type of the table above, in its order (kInt: int, kOptionalInt:
/// int?, ..., kOptionalScalarType: ScalarType?); schema_type_name() spells it.
enum class ArgKind : std::uint8_t {
  kTensor,          // Tensor
  kOptionalTensor,  // Tensor?
  kTensorList,      // Tensor[]
  kInt,
  kOptionalInt,
  kFloat,
  kOptionalFloat,
  kBool,
  kOptionalBool,
  kStr,
  kOptionalStr,
  kIntList,
  kFloatList,
  kBoolList,
  kScalar,
  kOptionalScalar,
  kScalarType,
  kOptionalScalarType,
  kSymInt,          // SymInt
  kOptionalSymInt,  // SymInt?
  kSymIntList,      // SymInt[]
};

/// The schema spelling of an ArgKind ("Tensor?", "int[]", ...).
/// \param kind  any ArgKind
/// \returns     its schema type, as the table above spells it; a view of a static string
///              ("?" for a value outside the enumerators)
/// \throws nothing
/// Example:
///   schema_type_name(ArgKind::kOptionalTensor);  // "Tensor?"
std::string_view schema_type_name(ArgKind kind);

/// True for Tensor, Tensor? and Tensor[]: the kinds that take a gradient.
/// \param kind  any ArgKind
/// \returns     whether a backward formula returns a grad for an argument of this kind
///              (customop::Grads holds one entry per such argument)
/// \throws nothing (constexpr)
/// Example:
///   static_assert(customop::is_tensor_like(customop::ArgKind::kTensorList));
constexpr bool is_tensor_like(ArgKind kind) {
  return kind == ArgKind::kTensor || kind == ArgKind::kOptionalTensor ||
         kind == ArgKind::kTensorList;
}

/// A Tensor argument the op writes in place: schema `Tensor(a!)` (each written argument its
/// own alias set: a!, b!, ...). It is an at::Tensor (every Tensor method works on it, the
/// in-place ones included), and its type is the declaration: the schema says the op writes it,
/// so customop bumps its version after each call (an overwritten saved tensor then raises in
/// backward), refuses it when it requires grad under grad mode, refuses an expanded or
/// overlapping one before the kernel runs, and the gradcheck harness audits that only such
/// arguments change.
/// Example:
///   struct AddInto { customop::MutableTensor acc; at::Tensor x; };
///   auto& op = customop::define<AddInto, void>("myns::add_into(Tensor(a!) acc, Tensor x) -> ()");
///   op.impl(c10::DeviceType::CPU, [](const AddInto& a) { a.acc.add_(a.x); });
class MutableTensor : public at::Tensor {
 public:
  MutableTensor() = default;
  // NOLINTNEXTLINE(google-explicit-constructor): a tensor converts implicitly, as for at::Tensor
  MutableTensor(at::Tensor t) : at::Tensor(std::move(t)) {}
};

namespace detail {

template <class T>
inline constexpr bool always_false = false;

/// The schema kind of an args-struct field type. An unsupported type has supported == false
/// (the field-level check in customop/op.h reports it, naming the field).
template <class T>
struct ArgTraits {
  static constexpr bool supported = false;
  static constexpr ArgKind kind = ArgKind::kTensor;  // unused: keeps later checks quiet
  static constexpr std::string_view cpp_name = "<unsupported>";
  static constexpr bool written = false;
};

#define CUSTOMOP_ARG_TRAITS(T, KIND, NAME)             \
  template <>                                          \
  struct ArgTraits<T> {                                \
    static constexpr bool supported = true;            \
    static constexpr ArgKind kind = ArgKind::KIND;     \
    static constexpr std::string_view cpp_name = NAME; \
    static constexpr bool written = false;             \
  };
CUSTOMOP_ARG_TRAITS(at::Tensor, kTensor, "at::Tensor")
CUSTOMOP_ARG_TRAITS(std::optional<at::Tensor>, kOptionalTensor, "std::optional<at::Tensor>")
CUSTOMOP_ARG_TRAITS(std::vector<at::Tensor>, kTensorList, "std::vector<at::Tensor>")
CUSTOMOP_ARG_TRAITS(int64_t, kInt, "int64_t")
CUSTOMOP_ARG_TRAITS(std::optional<int64_t>, kOptionalInt, "std::optional<int64_t>")
CUSTOMOP_ARG_TRAITS(double, kFloat, "double")
CUSTOMOP_ARG_TRAITS(std::optional<double>, kOptionalFloat, "std::optional<double>")
CUSTOMOP_ARG_TRAITS(bool, kBool, "bool")
CUSTOMOP_ARG_TRAITS(std::optional<bool>, kOptionalBool, "std::optional<bool>")
CUSTOMOP_ARG_TRAITS(std::string, kStr, "std::string")
CUSTOMOP_ARG_TRAITS(std::optional<std::string>, kOptionalStr, "std::optional<std::string>")
CUSTOMOP_ARG_TRAITS(std::vector<int64_t>, kIntList, "std::vector<int64_t>")
CUSTOMOP_ARG_TRAITS(std::vector<double>, kFloatList, "std::vector<double>")
CUSTOMOP_ARG_TRAITS(std::vector<bool>, kBoolList, "std::vector<bool>")
CUSTOMOP_ARG_TRAITS(c10::Scalar, kScalar, "c10::Scalar")
CUSTOMOP_ARG_TRAITS(std::optional<c10::Scalar>, kOptionalScalar, "std::optional<c10::Scalar>")
CUSTOMOP_ARG_TRAITS(c10::ScalarType, kScalarType, "c10::ScalarType")
CUSTOMOP_ARG_TRAITS(std::optional<c10::ScalarType>, kOptionalScalarType,
                    "std::optional<c10::ScalarType>")
CUSTOMOP_ARG_TRAITS(c10::SymInt, kSymInt, "c10::SymInt")
CUSTOMOP_ARG_TRAITS(std::optional<c10::SymInt>, kOptionalSymInt, "std::optional<c10::SymInt>")
CUSTOMOP_ARG_TRAITS(std::vector<c10::SymInt>, kSymIntList, "std::vector<c10::SymInt>")
#undef CUSTOMOP_ARG_TRAITS
template <>
struct ArgTraits<MutableTensor> {
  static constexpr bool supported = true;
  static constexpr ArgKind kind = ArgKind::kTensor;
  static constexpr std::string_view cpp_name = "customop::MutableTensor";
  static constexpr bool written = true;
};

/// One return of an op: Tensor, Tensor[], int, float or bool (the return types the
/// reference allows a backward formula for).
template <class T>
struct ReturnTraits {
  static_assert(always_false<T>,
                "[customop] unsupported return type. An op returns at::Tensor, "
                "std::vector<at::Tensor>, int64_t, double, bool, or a std::tuple of those");
};
template <>
struct ReturnTraits<at::Tensor> {
  static constexpr ArgKind kind = ArgKind::kTensor;
};
template <>
struct ReturnTraits<std::vector<at::Tensor>> {
  static constexpr ArgKind kind = ArgKind::kTensorList;
};
template <>
struct ReturnTraits<int64_t> {
  static constexpr ArgKind kind = ArgKind::kInt;
};
template <>
struct ReturnTraits<double> {
  static constexpr ArgKind kind = ArgKind::kFloat;
};
template <>
struct ReturnTraits<bool> {
  static constexpr ArgKind kind = ArgKind::kBool;
};

template <class T>
struct IsTuple : std::false_type {};
template <class... T>
struct IsTuple<std::tuple<T...>> : std::true_type {};

/// The returns of an op as a tuple type: `at::Tensor` -> `std::tuple<at::Tensor>`.
template <class Ret>
struct ReturnTuple {
  using type = std::tuple<Ret>;
};
template <class... T>
struct ReturnTuple<std::tuple<T...>> {
  using type = std::tuple<T...>;
};
template <>
struct ReturnTuple<void> {
  using type = std::tuple<>;
};
template <class Ret>
using ReturnTupleT = typename ReturnTuple<Ret>::type;

template <class Tuple>
struct ReturnKinds;
template <class... T>
struct ReturnKinds<std::tuple<T...>> {
  static constexpr std::array<ArgKind, sizeof...(T)> value{ReturnTraits<T>::kind...};
};

}  // namespace detail
}  // namespace customop
