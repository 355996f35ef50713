// The schema side of an op: parsing and validating the schema text (the reference's rules),
// checking the args struct's fields and defaults and the C++ return kinds against it, and
// inferring a schema from an args struct.

#include <customop/op_core.h>

#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>  // ~OpCore destroys its torch::Library fragments

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

namespace customop {

std::string format_location(const std::source_location& loc) {
  std::string file = loc.file_name();
  return file + ":" + std::to_string(loc.line());
}

std::string_view schema_type_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::kTensor: return "Tensor";
    case ArgKind::kOptionalTensor: return "Tensor?";
    case ArgKind::kTensorList: return "Tensor[]";
    case ArgKind::kInt: return "int";
    case ArgKind::kOptionalInt: return "int?";
    case ArgKind::kFloat: return "float";
    case ArgKind::kOptionalFloat: return "float?";
    case ArgKind::kBool: return "bool";
    case ArgKind::kOptionalBool: return "bool?";
    case ArgKind::kStr: return "str";
    case ArgKind::kOptionalStr: return "str?";
    case ArgKind::kIntList: return "int[]";
    case ArgKind::kFloatList: return "float[]";
    case ArgKind::kBoolList: return "bool[]";
    case ArgKind::kScalar: return "Scalar";
    case ArgKind::kOptionalScalar: return "Scalar?";
    case ArgKind::kScalarType: return "ScalarType";
    case ArgKind::kOptionalScalarType: return "ScalarType?";
    case ArgKind::kSymInt: return "SymInt";
    case ArgKind::kOptionalSymInt: return "SymInt?";
    case ArgKind::kSymIntList: return "SymInt[]";
  }
  return "?";
}

namespace {

std::string_view cpp_type_for(ArgKind kind) {
  switch (kind) {
    case ArgKind::kTensor: return "at::Tensor";
    case ArgKind::kOptionalTensor: return "std::optional<at::Tensor>";
    case ArgKind::kTensorList: return "std::vector<at::Tensor>";
    case ArgKind::kInt: return "int64_t";
    case ArgKind::kOptionalInt: return "std::optional<int64_t>";
    case ArgKind::kFloat: return "double";
    case ArgKind::kOptionalFloat: return "std::optional<double>";
    case ArgKind::kBool: return "bool";
    case ArgKind::kOptionalBool: return "std::optional<bool>";
    case ArgKind::kStr: return "std::string";
    case ArgKind::kOptionalStr: return "std::optional<std::string>";
    case ArgKind::kIntList: return "std::vector<int64_t>";
    case ArgKind::kFloatList: return "std::vector<double>";
    case ArgKind::kBoolList: return "std::vector<bool>";
    case ArgKind::kScalar: return "c10::Scalar";
    case ArgKind::kOptionalScalar: return "std::optional<c10::Scalar>";
    case ArgKind::kScalarType: return "c10::ScalarType";
    case ArgKind::kOptionalScalarType: return "std::optional<c10::ScalarType>";
    case ArgKind::kSymInt: return "c10::SymInt";
    case ArgKind::kOptionalSymInt: return "std::optional<c10::SymInt>";
    case ArgKind::kSymIntList: return "std::vector<c10::SymInt>";
  }
  return "?";
}

// The op name as the user wrote it, for errors raised before the schema parses.
std::string name_prefix(std::string_view text) {
  auto paren = text.find('(');
  std::string_view head = text.substr(0, paren);
  while (!head.empty() && std::isspace(static_cast<unsigned char>(head.back()))) {
    head.remove_suffix(1);
  }
  while (!head.empty() && std::isspace(static_cast<unsigned char>(head.front()))) {
    head.remove_prefix(1);
  }
  return head.empty() ? std::string("<unnamed op>") : std::string(head);
}

c10::FunctionSchema parse_or_throw(std::string_view text) {
  // NB: the schema parser reads "a.b::op" as op "a" with overload "b" and then fails on the
  // "::", so a '.' in the namespace must be caught before parsing to get a useful message.
  const std::string qualified = name_prefix(text);
  const auto sep = qualified.find("::");
  if (sep != std::string::npos) {
    const std::string ns = qualified.substr(0, sep);
    TORCH_CHECK_VALUE(ns.find('.') == std::string::npos, qualified, ": the namespace '", ns,
                      "' contains a '.'; namespaces must be plain identifiers");
  }
  // NB: torch's schema parser recurses once per nested parenthesis (a tuple type) and runs out
  // of stack (a segfault, not an error) a few thousand levels deep; no schema needs more than
  // a handful. Quoted defaults ("((") do not count.
  constexpr int kMaxNesting = 32;
  int depth = 0, deepest = 0;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ')' || c == ']') && depth > 0) {
      --depth;
    }
  }
  TORCH_CHECK_VALUE(deepest <= kMaxNesting, qualified,
                    ": the schema nests parentheses and brackets ", deepest, " deep; at most ",
                    kMaxNesting, " are supported (torch's schema parser recurses once per level)");
  std::string why;
  try {
    return torch::jit::parseSchema(std::string(text), /*allow_typevars=*/false);
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  } catch (const std::exception& e) {
    why = e.what();
  }
  // A throw expression (not TORCH_CHECK_VALUE(false, ...)) so that every build type sees that
  // control never falls off the end.
  C10_THROW_ERROR(ValueError, c10::str(name_prefix(text), ": the schema does not parse: \"", text,
                                       "\": ", why));
}

std::optional<ArgKind> kind_of_type(const c10::TypePtr& type) {
  using K = c10::TypeKind;
  switch (type->kind()) {
    case K::TensorType: return ArgKind::kTensor;
    case K::IntType: return ArgKind::kInt;
    case K::SymIntType: return ArgKind::kSymInt;
    case K::FloatType: return ArgKind::kFloat;
    case K::BoolType: return ArgKind::kBool;
    case K::StringType: return ArgKind::kStr;
    case K::NumberType: return ArgKind::kScalar;
    case K::ScalarTypeType: return ArgKind::kScalarType;
    case K::OptionalType: {
      auto elem = type->castRaw<c10::OptionalType>()->getElementType();
      switch (elem->kind()) {
        case K::TensorType: return ArgKind::kOptionalTensor;
        case K::IntType: return ArgKind::kOptionalInt;
        case K::SymIntType: return ArgKind::kOptionalSymInt;
        case K::FloatType: return ArgKind::kOptionalFloat;
        case K::BoolType: return ArgKind::kOptionalBool;
        case K::StringType: return ArgKind::kOptionalStr;
        case K::NumberType: return ArgKind::kOptionalScalar;
        case K::ScalarTypeType: return ArgKind::kOptionalScalarType;
        default: return std::nullopt;
      }
    }
    case K::ListType: {
      auto elem = type->castRaw<c10::ListType>()->getElementType();
      switch (elem->kind()) {
        case K::TensorType: return ArgKind::kTensorList;
        case K::IntType: return ArgKind::kIntList;
        case K::SymIntType: return ArgKind::kSymIntList;
        case K::FloatType: return ArgKind::kFloatList;
        case K::BoolType: return ArgKind::kBoolList;
        default: return std::nullopt;
      }
    }
    default: return std::nullopt;
  }
}

bool is_reserved_namespace(std::string_view ns) {
  static constexpr std::string_view kReserved[] = {"prim", "prims", "aten",
                                                   "at",   "torch", "pytorch"};
  return std::find(std::begin(kReserved), std::end(kReserved), ns) != std::end(kReserved);
}

}  // namespace

OpCore::~OpCore() = default;

void OpCore::check_written_argument(const c10::Argument& a, const c10::AliasInfo& alias,
                                    std::vector<std::string>& write_sets) const {
  TORCH_CHECK_VALUE(alias.isWrite(), name_, ": argument '", a.name(),
                    "' is annotated as an alias (", a.type()->str(), alias,
                    ") that the op reads but does not write; customop ops take arguments by "
                    "value or write them in place: drop the annotation, or write Tensor(a!) "
                    "with a customop::MutableTensor field");
  const auto kind = kind_of_type(a.real_type());
  TORCH_CHECK_VALUE(kind == ArgKind::kTensor, name_, ": the schema mutates argument '", a.name(),
                    "' (", a.type()->str(), ", alias ", alias,
                    "), but only a Tensor argument can be written in place "
                    "(Tensor(a!), a customop::MutableTensor field); Tensor? and Tensor[] "
                    "arguments cannot be");
  for (const auto& set : alias.beforeSets()) {
    const std::string letter = set.toUnqualString();
    TORCH_CHECK_VALUE(std::find(write_sets.begin(), write_sets.end(), letter) == write_sets.end(),
                      name_, ": argument '", a.name(), "' is written in the alias set '", letter,
                      "' that an earlier argument also writes; give each written argument its "
                      "own set (Tensor(a!) x, Tensor(b!) y)");
    write_sets.push_back(letter);
  }
}

OpCore::OpCore(std::string_view schema_text, std::span<const detail::FieldInfo> fields,
               std::span<const ArgKind> return_kinds, std::source_location loc)
    : schema_(parse_or_throw(schema_text)), schema_text_(schema_text), loc_(loc) {
  const auto& op_name = schema_.operator_name();
  name_ = op_name.name;
  auto sep = name_.find("::");
  TORCH_CHECK_VALUE(sep != std::string::npos && sep > 0 && sep + 2 < name_.size(), name_,
                    ": expected a qualified name \"namespace::name\" in the schema \"", schema_text,
                    "\"");
  ns_ = name_.substr(0, sep);
  TORCH_CHECK_VALUE(op_name.overload_name.empty(), name_, ".", op_name.overload_name,
                    ": overloads are not supported; give the op its own name instead of the "
                    "overload name '",
                    op_name.overload_name, "'");
  TORCH_CHECK_VALUE(!is_reserved_namespace(ns_), name_, ": the namespace '", ns_,
                    "' is reserved for PyTorch; choose your own namespace");
  for (const auto& r : schema_.returns()) {
    TORCH_CHECK_VALUE(r.alias_info() == nullptr, name_,
                      ": the schema returns an alias or view of an input (", r.type()->str(),
                      r.alias_info()->isWrite() ? "!" : "",
                      "); customop ops return new tensors. An op that writes an argument "
                      "declares it Tensor(a!) and returns () (the caller holds the tensor)");
  }
  std::vector<std::string> write_sets;  // one alias set per written argument
  for (const auto& a : schema_.arguments()) {
    TORCH_CHECK_VALUE(a.name() != "self", name_,
                      ": an argument is named 'self'; that name is reserved, please rename it");
    if (const auto* alias = a.alias_info()) check_written_argument(a, *alias, write_sets);
  }
  TORCH_CHECK_VALUE(!schema_.returns().empty() || !write_sets.empty(), name_,
                    ": the schema returns nothing and writes no argument, so a call would have "
                    "no effect; return a value, or declare the argument the op writes as "
                    "Tensor(a!) (customop::MutableTensor)");
  init_from_schema(fields, return_kinds);
}

OpCore::OpCore(std::string_view qualified_name, std::span<const detail::FieldInfo> fields,
               std::span<const ArgKind> return_kinds, std::source_location loc, bool /*wrap*/)
    : schema_([&] {
        auto h = c10::Dispatcher::singleton().findSchema({std::string(qualified_name), ""});
        TORCH_CHECK_VALUE(h.has_value(), qualified_name,
                          ": customop::wrap found no operator of that name; define it with "
                          "TORCH_LIBRARY first (and load its library)");
        return h->schema();
      }()),
      loc_(loc),
      wrapped_(true) {
  name_ = std::string(qualified_name);
  std::ostringstream text;
  text << schema_;
  schema_text_ = text.str();
  ns_ = name_.substr(0, name_.find("::"));
  handle_ = c10::Dispatcher::singleton().findSchemaOrThrow(name_.c_str(), "");
  init_from_schema(fields, return_kinds);
}

void OpCore::init_from_schema(std::span<const detail::FieldInfo> fields,
                              std::span<const ArgKind> return_kinds) {
  const auto& sargs = schema_.arguments();
  // Field types first (over the fields both sides have), so a missing or extra field is
  // reported by index, argument and type rather than as a bare count.
  for (size_t i = 0; i < sargs.size(); ++i) {
    auto kind = kind_of_type(sargs[i].real_type());
    TORCH_CHECK_VALUE(kind.has_value(), name_, ": argument '", sargs[i].name(),
                      "' has the schema type ", sargs[i].real_type()->str(),
                      ", which customop does not support (see customop/arg_types.h)");
    if (i >= fields.size()) {
      TORCH_CHECK_TYPE(false, name_, ": the args struct has ", fields.size(),
                       " fields but the schema has ", sargs.size(), " arguments; field ", i,
                       " (schema argument '", sargs[i].name(), "' of type ",
                       schema_type_name(*kind), ", C++ type ", cpp_type_for(*kind),
                       ") is missing. The args struct needs one field per argument, in schema "
                       "order");
    }
    TORCH_CHECK_TYPE(*kind == fields[i].kind, name_, ": args struct field ", i, " '",
                     fields[i].name, "' (schema argument '", sargs[i].name(), "' of type ",
                     schema_type_name(*kind), ") must have C++ type ", cpp_type_for(*kind),
                     ", but the args struct has ", fields[i].cpp_name);
    // NB: names after types: two same-typed fields in the wrong order pass the type check and
    // would silently swap values (a keyword call from Python fills the schema's argument).
    TORCH_CHECK_VALUE(fields[i].name == sargs[i].name(), name_, ": args struct field ", i,
                      " is named '", fields[i].name, "' but schema argument ", i, " is '",
                      sargs[i].name(),
                      "'; each field must have its argument's name, in schema order");
    const bool written = sargs[i].alias_info() != nullptr && sargs[i].alias_info()->isWrite();
    TORCH_CHECK_TYPE(!written || fields[i].written, name_, ": the schema mutates argument '",
                     sargs[i].name(), "' (Tensor", *sargs[i].alias_info(),
                     "), so args struct field ", i, " '", fields[i].name,
                     "' must have C++ type customop::MutableTensor, which declares the write; "
                     "the args struct has ",
                     fields[i].cpp_name);
    TORCH_CHECK_TYPE(written || !fields[i].written, name_, ": args struct field ", i, " '",
                     fields[i].name,
                     "' is a customop::MutableTensor (the op writes it), but "
                     "schema argument '",
                     sargs[i].name(),
                     "' does not declare a write; write Tensor(a!) in the schema, or make the "
                     "field at::Tensor");
    args_.push_back({sargs[i].name(), *kind, std::string(schema_type_name(*kind)), written});
    mutates_ = mutates_ || written;
    if (is_tensor_like(*kind)) ++num_tensor_like_args_;
  }
  TORCH_CHECK_TYPE(fields.size() == sargs.size(), name_, ": the args struct has ", fields.size(),
                   " fields but the schema has ", sargs.size(), " arguments; field ", sargs.size(),
                   " (C++ type ", fields.size() > sargs.size() ? fields[sargs.size()].cpp_name : "",
                   ") has no schema argument. The args struct needs one field per argument, "
                   "in schema order");
  const auto& srets = schema_.returns();
  TORCH_CHECK_TYPE(srets.size() == return_kinds.size(), name_, ": the schema has ", srets.size(),
                   " returns but the C++ return type (Ret) has ", return_kinds.size(),
                   "; use std::tuple<...> with one element per return");
  for (size_t i = 0; i < srets.size(); ++i) {
    auto kind = kind_of_type(srets[i].real_type());
    bool ok = kind.has_value() &&
              (*kind == ArgKind::kTensor || *kind == ArgKind::kTensorList ||
               *kind == ArgKind::kInt || *kind == ArgKind::kFloat || *kind == ArgKind::kBool);
    TORCH_CHECK_TYPE(ok, name_, ": return ", i, " has the schema type ",
                     srets[i].real_type()->str(),
                     "; customop ops return Tensor, Tensor[], int, float or bool");
    TORCH_CHECK_TYPE(*kind == return_kinds[i], name_, ": return ", i, " is ",
                     schema_type_name(*kind), " in the schema, so Ret element ", i, " must be ",
                     cpp_type_for(*kind), ", but it is ", cpp_type_for(return_kinds[i]));
    returns_.push_back(*kind);
  }
}

namespace {

// 0, 0.0, false, "", an empty list, None, an undefined tensor: what a value-initialized field
// holds when it has no default member initializer.
bool zero_like(const c10::IValue& v) {
  if (v.isNone()) return true;
  if (v.isTensor()) return !v.toTensor().defined();
  if (v.isInt()) return v.toInt() == 0;
  if (v.isDouble()) return v.toDouble() == 0.0;
  if (v.isBool()) return !v.toBool();
  if (v.isString()) return v.toStringRef().empty();
  if (v.isList()) return v.toListRef().empty();
  return false;
}

// A default as the user wrote it: 0.2, not 0.20000000000000001.
std::string format_value(const c10::IValue& v) {
  if (v.isDouble()) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof(buf), v.toDouble());
    return std::string(buf, r.ptr);
  }
  if (v.isString()) return "\"" + v.toStringRef() + "\"";
  if (v.isBool()) return v.toBool() ? "True" : "False";
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

namespace {
// A default in schema syntax, or nullopt when `v` cannot be spelled there.
std::optional<std::string> schema_default(const c10::IValue& v) {
  if (v.isDouble()) {
    const double d = v.toDouble();
    if (!std::isfinite(d)) return std::nullopt;
    std::string s = format_value(v);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";  // "2" would read as an int
    return s;
  }
  if (v.isString()) {
    std::string out = "\"";
    for (char c : v.toStringRef()) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  if (v.isInt() || v.isBool()) return format_value(v);
  if (v.isList()) {
    std::string out = "[";
    const auto& elems = v.toListRef();
    for (size_t i = 0; i < elems.size(); ++i) {
      auto e = schema_default(elems[i]);
      if (!e) return std::nullopt;
      out += (i ? ", " : "") + *e;
    }
    return out + "]";
  }
  return std::nullopt;
}

bool is_optional_kind(ArgKind k) {
  switch (k) {
    case ArgKind::kOptionalTensor:
    case ArgKind::kOptionalInt:
    case ArgKind::kOptionalFloat:
    case ArgKind::kOptionalBool:
    case ArgKind::kOptionalStr:
    case ArgKind::kOptionalScalar:
    case ArgKind::kOptionalScalarType:
    case ArgKind::kOptionalSymInt: return true;
    default: return false;
  }
}
}  // namespace

namespace detail {
std::string infer_schema(std::string_view name, std::span<const FieldInfo> fields,
                         const torch::jit::Stack& value_initialized,
                         std::span<const ArgKind> return_kinds) {
  std::string out = std::string(name) + "(";
  std::string_view defaulted;  // the first field with a default
  size_t written = 0;          // alias sets a!, b!, ... in field order
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    std::string type(schema_type_name(f.kind));
    if (f.written) {
      const std::string set = written < 26 ? std::string(1, static_cast<char>('a' + written))
                                           : "w" + std::to_string(written);
      type += "(" + set + "!)";
      ++written;
    }
    out += (i ? ", " : "") + type + " " + std::string(f.name);
    const c10::IValue& v = value_initialized.at(i);
    const bool has_default = (is_optional_kind(f.kind) && v.isNone()) || !zero_like(v);
    if (defaulted.empty() && has_default) defaulted = f.name;
    TORCH_CHECK_VALUE(has_default || defaulted.empty(), name, ": cannot infer the schema: field '",
                      f.name, "' has no default but comes after '", defaulted,
                      "', which has one (an argument without a default cannot follow one with "
                      "a default); move it before '",
                      defaulted, "' or give it a default member initializer");
    if (is_optional_kind(f.kind) && v.isNone()) {
      out += "=None";
    } else if (!zero_like(v)) {
      auto d = schema_default(v);
      TORCH_CHECK_VALUE(d.has_value(), name, ": cannot infer the schema: the default of field '",
                        f.name, "' (", format_value(v),
                        ") has no schema spelling; write the schema out");
      out += "=" + *d;
    }
  }
  out += ") -> ";
  if (return_kinds.size() != 1) out += "(";
  for (size_t i = 0; i < return_kinds.size(); ++i) {
    out += (i ? ", " : "") + std::string(schema_type_name(return_kinds[i]));
  }
  if (return_kinds.size() != 1) out += ")";
  return out;
}
}  // namespace detail

void OpCore::check_struct_defaults(const torch::jit::Stack& value_initialized) const {
  const auto& sargs = schema_.arguments();
  for (size_t i = 0; i < sargs.size() && i < value_initialized.size(); ++i) {
    const c10::IValue& field = value_initialized[i];
    if (zero_like(field)) continue;
    const auto& dflt = sargs[i].default_value();
    TORCH_CHECK_VALUE(dflt.has_value(), name_, ": argument '", sargs[i].name(),
                      "' has no default in the schema, but the args struct's member initializer "
                      "gives it ",
                      format_value(field),
                      "; C++ and Python callers would disagree. Give the default in the schema "
                      "(and the same one, or none, in the struct)");
    TORCH_CHECK_VALUE(*dflt == field, name_, ": argument '", sargs[i].name(), "' has the default ",
                      format_value(*dflt),
                      " in the schema but the args struct's member initializer gives ",
                      format_value(field),
                      "; C++ and Python callers would get different values. Make them agree "
                      "(or drop the initializer)");
  }
}

void OpCore::check_grads_field_names(std::span<const std::string_view> names,
                                     std::string_view type_name,
                                     const std::source_location& loc) const {
  size_t k = 0;
  for (const auto& a : args_) {
    if (!is_tensor_like(a.kind) || k >= names.size()) continue;
    TORCH_CHECK_VALUE(names[k] == a.name, name_, ": the typed grads struct ", type_name,
                      " of the backward at ", format_location(loc), " has field ", k, " named '",
                      names[k], "' but tensor-like argument ", k, " is '", a.name,
                      "'; name each field after its argument, in schema order");
    ++k;
  }
}

}  // namespace customop
