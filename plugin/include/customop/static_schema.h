#pragma once
/// \file
/// `customop::define<Args, "schema">()`: the schema as a template argument, so the args
/// struct and the return type are checked against it at compile time (static_assert), and
/// `Ret` is deduced from the schema's returns.
///
/// Example:
///   struct ScaleArgs { at::Tensor x; double alpha; };
///   auto& op = customop::define<ScaleArgs, "myns::scale(Tensor x, float alpha) -> Tensor">();
///   // A `float alpha` field, a missing field or an `at::Tensor` for `Tensor?` fails to build.
///
/// Argument types and names are read here (a field named differently from its argument fails
/// to build), and so are writes: `Tensor(a!)` wants a `customop::MutableTensor` field, a plain
/// `Tensor` an `at::Tensor` one, and an op that writes an argument may return `()` (`Ret` is
/// then void). Everything else (defaults, alias sets, reads-only alias annotations) is checked
/// by the runtime parser when define() runs.

#include <customop/arg_types.h>
#include <customop/op.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace customop {

/// A string literal usable as a template argument.
/// \param N  the literal's size, its terminating '\0' included (deduced)
/// Example:
///   static_assert(customop::FixedString("ns::op").view() == "ns::op");
template <std::size_t N>
struct FixedString {
  char data[N]{};
  constexpr FixedString(const char (&s)[N]) { std::copy_n(s, N, data); }
  constexpr std::string_view view() const { return {data, N - 1}; }
};

namespace detail::ct {

inline constexpr std::size_t kMaxArgs = 64;

struct ParsedSchema {
  bool ok = false;  // false: the literal did not parse here; the runtime parser reports why
  std::size_t num_args = 0;
  std::array<std::optional<ArgKind>, kMaxArgs> args{};  // nullopt: a type not read here
  std::array<std::string_view, kMaxArgs> names{};
  // Per argument: the schema writes it (an alias annotation with '!': "Tensor(a!)"); nullopt
  // where the type is not read here (a written "Tensor(a!)?" or "Tensor(a!)[]": the runtime
  // parser refuses those).
  std::array<std::optional<bool>, kMaxArgs> written{};
  bool writes_any = false;  // some argument's annotation has a '!'
  std::size_t num_returns = 0;
  std::array<std::optional<ArgKind>, kMaxArgs> returns{};
  bool returns_alias = false;  // a return carries an alias annotation: "Tensor(a!)"
};

constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

constexpr std::optional<ArgKind> kind_of(std::string_view type) {
  constexpr std::pair<std::string_view, ArgKind> kTable[] = {
      {"Tensor", ArgKind::kTensor},         {"Tensor?", ArgKind::kOptionalTensor},
      {"Tensor[]", ArgKind::kTensorList},   {"int", ArgKind::kInt},
      {"int?", ArgKind::kOptionalInt},      {"float", ArgKind::kFloat},
      {"float?", ArgKind::kOptionalFloat},  {"bool", ArgKind::kBool},
      {"bool?", ArgKind::kOptionalBool},    {"str", ArgKind::kStr},
      {"str?", ArgKind::kOptionalStr},      {"int[]", ArgKind::kIntList},
      {"float[]", ArgKind::kFloatList},     {"bool[]", ArgKind::kBoolList},
      {"Scalar", ArgKind::kScalar},         {"Scalar?", ArgKind::kOptionalScalar},
      {"ScalarType", ArgKind::kScalarType}, {"ScalarType?", ArgKind::kOptionalScalarType},
      {"SymInt", ArgKind::kSymInt},         {"SymInt?", ArgKind::kOptionalSymInt},
      {"SymInt[]", ArgKind::kSymIntList},
  };
  for (const auto& [name, kind] : kTable) {
    if (name == type) return kind;
  }
  // Fixed-size lists: int[2], float[3], bool[4], SymInt[2].
  for (auto [prefix, kind] : {std::pair{std::string_view("int["), ArgKind::kIntList},
                              std::pair{std::string_view("SymInt["), ArgKind::kSymIntList},
                              std::pair{std::string_view("float["), ArgKind::kFloatList},
                              std::pair{std::string_view("bool["), ArgKind::kBoolList}}) {
    if (type.starts_with(prefix) && type.ends_with("]")) return kind;
  }
  return std::nullopt;
}

// A type with its alias annotation taken apart: "Tensor(a!)" -> {"Tensor", annotated, writes}.
// Only a bare "Tensor" base is read with an annotation: anything else annotated ("Tensor(a)[]",
// "Tensor(a!)?") keeps annotated = true and an empty base, so kind_of gives nullopt for it.
struct AliasedType {
  std::string_view base;
  bool annotated = false;
  bool writes = false;
};

constexpr AliasedType split_alias(std::string_view type) {
  const auto open = type.find('(');
  if (open == std::string_view::npos) return {type, false, false};
  const bool writes = type.find('!') != std::string_view::npos;
  const bool plain_tensor = type.substr(0, open) == "Tensor" && type.ends_with(")");
  return {plain_tensor ? type.substr(0, open) : std::string_view(), true, writes};
}

// Splits `s` at top-level commas and calls f(piece) for each non-empty piece. Commas and
// brackets inside string defaults (str sep=",") do not count.
template <class F>
constexpr bool split_top_level(std::string_view s, F f) {
  int depth = 0;
  char quote = 0;  // the quote character of the string literal we are in, or 0
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    const char c = i < s.size() ? s[i] : ',';
    if (quote != 0) {
      if (i == s.size()) return false;  // unterminated string literal
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      continue;
    }
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth < 0) return false;
    if (c == ',' && depth == 0) {
      auto piece = trim(s.substr(start, i - start));
      if (!piece.empty() && !f(piece)) return false;
      start = i + 1;
    }
  }
  return depth == 0 && quote == 0;
}

// "Tensor? mask=None" -> type "Tensor?"; "float" (an unnamed return) -> "float".
constexpr std::string_view type_of(std::string_view decl, bool named) {
  auto eq = decl.find('=');
  if (eq != std::string_view::npos) decl = trim(decl.substr(0, eq));
  if (!named) {
    auto sp = decl.rfind(' ');
    // A return may be named too: "Tensor values".
    return sp == std::string_view::npos ? decl : trim(decl.substr(0, sp));
  }
  auto sp = decl.rfind(' ');
  return sp == std::string_view::npos ? std::string_view() : trim(decl.substr(0, sp));
}

// "Tensor? mask=None" -> "mask".
constexpr std::string_view name_of(std::string_view decl) {
  auto eq = decl.find('=');
  if (eq != std::string_view::npos) decl = trim(decl.substr(0, eq));
  auto sp = decl.rfind(' ');
  return sp == std::string_view::npos ? std::string_view() : trim(decl.substr(sp + 1));
}

constexpr ParsedSchema parse(std::string_view s) {
  ParsedSchema out;
  const auto open = s.find('(');
  const auto arrow = s.rfind("->");
  if (open == std::string_view::npos || arrow == std::string_view::npos || arrow < open) return out;
  const auto close = s.substr(0, arrow).rfind(')');
  if (close == std::string_view::npos || close < open) return out;
  bool ok = split_top_level(s.substr(open + 1, close - open - 1), [&](std::string_view a) {
    if (a == "*") return true;  // kw-only marker
    if (out.num_args == kMaxArgs) return false;
    const AliasedType t = split_alias(type_of(a, /*named=*/true));
    out.names[out.num_args] = name_of(a);
    out.writes_any = out.writes_any || t.writes;
    const auto kind = kind_of(t.base);
    if (kind.has_value() && (!t.annotated || t.writes)) {
      out.written[out.num_args] = t.writes;
      out.args[out.num_args] = kind;
    }  // else: a type not read here, or a reads-only annotation ("Tensor(a)"): the runtime's
    ++out.num_args;
    return true;
  });
  auto rets = trim(s.substr(arrow + 2));
  if (rets.starts_with("(") && rets.ends_with(")")) rets = rets.substr(1, rets.size() - 2);
  ok = ok && split_top_level(rets, [&](std::string_view r) {
         if (out.num_returns == kMaxArgs) return false;
         const AliasedType t = split_alias(type_of(r, /*named=*/false));
         out.returns_alias = out.returns_alias || t.annotated;
         out.returns[out.num_returns++] = t.annotated ? std::nullopt : kind_of(t.base);
         return true;
       });
  out.ok = ok;
  return out;
}

template <ArgKind K>
struct ReturnTypeOf {
  static_assert(K == ArgKind::kTensor || K == ArgKind::kTensorList || K == ArgKind::kInt ||
                    K == ArgKind::kFloat || K == ArgKind::kBool,
                "[customop] a return of the schema is not Tensor, Tensor[], int, float or bool");
  using type = at::Tensor;
};
template <>
struct ReturnTypeOf<ArgKind::kTensorList> {
  using type = std::vector<at::Tensor>;
};
template <>
struct ReturnTypeOf<ArgKind::kInt> {
  using type = int64_t;
};
template <>
struct ReturnTypeOf<ArgKind::kFloat> {
  using type = double;
};
template <>
struct ReturnTypeOf<ArgKind::kBool> {
  using type = bool;
};

template <FixedString S>
inline constexpr ParsedSchema kParsed = parse(S.view());

template <FixedString S>
struct RetFromSchema {
  static constexpr auto& p = kParsed<S>;
  static_assert(p.ok,
                "[customop] the schema literal does not parse: check its parentheses and "
                "the '->' before the returns");
  static_assert(!p.ok || p.num_returns > 0 || p.writes_any,
                "[customop] the schema returns nothing and writes no argument, so a call would "
                "have no effect; return a value, or declare the argument the op writes as "
                "Tensor(a!) with a customop::MutableTensor field");
  static_assert(!p.ok || !p.returns_alias,
                "[customop] the schema returns an alias of an input (an annotated return such "
                "as Tensor(a!)); customop ops return new tensors. An op that writes an argument "
                "declares it Tensor(a!) and returns () (the caller holds the tensor)");
  // A return type not read here (nullopt: Scalar, Device, ...) is looked up as kScalar, which
  // ReturnTypeOf refuses with the message that lists the supported returns.
  static constexpr ArgKind kind(std::size_t i) { return p.returns[i].value_or(ArgKind::kScalar); }
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>) {
    if constexpr (sizeof...(I) == 0) {
      return;  // "-> ()" of an op that writes an argument
    } else if constexpr (sizeof...(I) == 1) {
      return typename ReturnTypeOf<kind(0)>::type{};
    } else {
      return std::tuple<typename ReturnTypeOf<kind(I)>::type...>{};
    }
  }
  using type =
      decltype(make(std::make_index_sequence < p.ok && !p.returns_alias ? p.num_returns : 0 > {}));
};

/// Instantiated per field; on a mismatch the compiler's note shows <field index, field name,
/// C++ field type, schema argument name, schema kind, whether the schema writes it>.
template <std::size_t FieldIndex, auto FieldNameV, class Field, auto ArgNameV, ArgKind SchemaKind,
          bool SchemaWrites>
struct CheckField {
  static_assert(ArgTraits<Field>::kind == SchemaKind,
                "[customop] an args struct field does not match its schema argument type (the "
                "template arguments of CheckField name the field index, the field, its C++ type, "
                "the schema argument and its type; see customop/arg_types.h for the mapping)");
  static_assert(ArgTraits<Field>::kind != SchemaKind || !SchemaWrites || ArgTraits<Field>::written,
                "[customop] the schema writes an argument (Tensor(a!)) whose args struct field "
                "is not a customop::MutableTensor; declare the field customop::MutableTensor, "
                "which marks the write (the template arguments of CheckField name the field)");
  static_assert(ArgTraits<Field>::kind != SchemaKind || SchemaWrites || !ArgTraits<Field>::written,
                "[customop] an args struct field is a customop::MutableTensor, but the schema "
                "does not write its argument; annotate the argument Tensor(a!), or make the "
                "field an at::Tensor (the template arguments of CheckField name the field)");
  static_assert(ArgTraits<Field>::kind != SchemaKind || ArgTraits<Field>::written != SchemaWrites ||
                    std::string_view(FieldNameV.name) == std::string_view(ArgNameV.name),
                "[customop] an args struct field is named differently from its schema argument "
                "(the template arguments of CheckField name the field and the argument); each "
                "field must have its argument's name, in schema order");
  static constexpr bool ok = true;
};

template <FixedString S, std::size_t I>
inline constexpr auto kArgName = FieldName<kParsed<S>.names[I].size()>(kParsed<S>.names[I]);

template <class Args, FixedString S>
constexpr bool check_args() {
  constexpr auto& p = kParsed<S>;
  static_assert(p.num_args == kNumFields<Args>,
                "[customop] the args struct must have one field per schema argument, in schema "
                "order (the field count differs from the argument count)");
  if constexpr (p.num_args == kNumFields<Args>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      // Types this parser does not read (nullopt) are left to the runtime check.
      return (
          CheckField<I, kFieldName<Args, I>, boost::pfr::tuple_element_t<I, Args>, kArgName<S, I>,
                     p.args[I].value_or(ArgTraits<boost::pfr::tuple_element_t<I, Args>>::kind),
                     p.written[I].value_or(
                         ArgTraits<boost::pfr::tuple_element_t<I, Args>>::written)>::ok &&
          ...);
    }
    (std::make_index_sequence<kNumFields<Args>>{});
  }
  return false;
}

}  // namespace detail::ct

/// define() with the schema as a template argument: field count and field types are checked
/// against the schema at compile time; `Ret` defaults to the type the schema's returns imply
/// (Tensor -> at::Tensor, (Tensor, int) -> std::tuple<at::Tensor, int64_t>, () -> void for an
/// op that writes an argument).
/// Throws c10::Error for what only the runtime parser knows (see define(std::string_view)).
/// Field names are checked too (each field named after its argument, in schema order). A type
/// this parser does not read is left to the runtime check.
/// \tparam Args    the args struct (an aggregate)
/// \tparam Schema  the schema literal, "ns::name(<args>) -> <returns>" (no bare-name form)
/// \tparam Ret     the C++ return type; default: the one the schema's returns imply
/// \param loc      where the op is defined; named in later errors
/// \returns        the op, as define(std::string_view) returns it
/// \throws as define(std::string_view): c10::ValueError (defaults, alias sets shared by two
///         written arguments, a reads-only annotation such as Tensor(a), a written Tensor? or
///         Tensor[]), c10::TypeError (a type not read here that does not match), c10::Error
///         (already defined).
///         A field count, field type, field name or written-field (Tensor(a!) against
///         customop::MutableTensor) mismatch, a literal that does not parse here, a schema
///         that returns nothing and writes nothing, or an annotated return is a compile error.
/// Example:
///   auto& op = customop::define<ScaleArgs, "myns::scale(Tensor x, float alpha) -> Tensor">();
///   struct AddIntoArgs { customop::MutableTensor acc; at::Tensor x; };
///   auto& add_into =
///       customop::define<AddIntoArgs, "myns::add_into(Tensor(a!) acc, Tensor x) -> ()">();
///   // add_into is an Op<AddIntoArgs, void>.
template <class Args, FixedString Schema,
          class Ret = typename detail::ct::RetFromSchema<Schema>::type>
Op<Args, Ret>& define(std::source_location loc = std::source_location::current()) {
  static_assert(std::is_aggregate_v<Args>,
                "[customop] the args struct must be an aggregate (public fields, no "
                "constructors, no base classes) so Boost.PFR can read it field by field");
  static_assert(detail::ct::check_args<Args, Schema>());
  return define<Args, Ret>(Schema.view(), loc);
}

}  // namespace customop
