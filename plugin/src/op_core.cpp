#include <customop/op_core.h>

#include <ATen/FuncTorchTLS.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
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

std::string ivalue_type_name(const c10::IValue& v) {
  if (v.isNone()) return "NoneType";
  if (v.isTensor()) return "Tensor";
  if (v.isInt()) return "int";
  if (v.isDouble()) return "float";
  if (v.isBool()) return "bool";
  if (v.isString()) return "str";
  if (v.isTensorList()) return "List[Tensor]";
  if (v.isList()) return "list";
  if (v.isGenericDict()) return "dict";
  if (v.isTuple()) return "tuple";
  return v.tagKind();
}

std::string join_keys(const std::set<std::string>& keys) {
  std::string out = "{";
  bool first = true;
  for (const auto& k : keys) {
    out += (first ? "'" : ", '") + k + "'";
    first = false;
  }
  return out + "}";
}

const char* device_name(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return "CUDA";
    case c10::DeviceType::Meta: return "fake (Meta)";
    default: return "CPU";
  }
}

// The kernel slot of a device: CPU 0, CUDA 1, Meta (the fake kernel) 2.
size_t kernel_slot(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return 1;
    case c10::DeviceType::Meta: return 2;
    default: return 0;
  }
}

constexpr c10::DeviceType kKernelDevices[] = {c10::DeviceType::CPU, c10::DeviceType::CUDA,
                                              c10::DeviceType::Meta};

}  // namespace

OpCore::~OpCore() = default;

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
  for (const auto& a : schema_.arguments()) {
    TORCH_CHECK_VALUE(a.name() != "self", name_,
                      ": an argument is named 'self'; that name is reserved, please rename it");
    const auto* alias = a.alias_info();
    TORCH_CHECK_VALUE(alias == nullptr || !alias->isWrite(), name_,
                      ": the schema mutates argument '", a.name(),
                      "'; only functional ops are supported (no in-place or out= arguments)");
  }
  TORCH_CHECK_VALUE(!schema_.returns().empty(), name_,
                    ": the schema returns nothing; only functional ops that return a value are "
                    "supported");
  for (const auto& r : schema_.returns()) {
    TORCH_CHECK_VALUE(r.alias_info() == nullptr, name_,
                      ": the schema returns an alias or view of an input; only functional ops "
                      "are supported");
  }
  TORCH_CHECK_VALUE(!schema_.is_mutable(), name_,
                    ": the schema is mutable; only functional ops are supported");
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
    args_.push_back({sargs[i].name(), *kind, std::string(schema_type_name(*kind))});
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
    case ArgKind::kOptionalScalarType: return true;
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
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    out += (i ? ", " : "") + std::string(schema_type_name(f.kind)) + " " + std::string(f.name);
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

// ---- dispatcher registration -------------------------------------------------------------

struct DeviceKernel final : c10::OperatorKernel {
  DeviceKernel(OpCore* op, c10::DeviceType device) : op_(op), device_(device) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    op_->device_kernel(device_, stack);
  }
  OpCore* op_;
  c10::DeviceType device_;
};

// A call with no tensor to dispatch on (every Tensor argument None, every Tensor[] empty)
// gets an empty dispatch key set; the dispatcher then runs the CompositeExplicitAutograd
// kernel, or says only "There were no tensor arguments to this function". So does a call on
// a backend other than CPU, CUDA and Meta. This kernel names the op and the argument instead.
struct NoBackendKernel final : c10::OperatorKernel {
  explicit NoBackendKernel(const OpCore* op) : op_(op) {}
  [[noreturn]] void operator()(const c10::OperatorHandle&, c10::DispatchKeySet,
                               torch::jit::Stack* stack);  // below check_tensor_args_defined
  const OpCore* op_;
};

// NB: torch's generic Tracer fallback refuses ops with a non-tensor return ("unsupported
// output type: int"); ops with one get this kernel, which records the node itself and leaves
// the non-tensor output untraced (a constant for whatever uses it later).
struct TracerKernel final : c10::OperatorKernel {
  explicit TracerKernel(const OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->tracer_kernel(h, ks, stack);
  }
  const OpCore* op_;
};

struct AutogradKernel final : c10::OperatorKernel {
  explicit AutogradKernel(OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->autograd_kernel(h, ks, stack);
  }
  OpCore* op_;
};

namespace {
std::string unqualified(const std::string& name) { return name.substr(name.find("::") + 2); }

std::unique_ptr<torch::Library> make_fragment(const std::string& ns,
                                              const std::source_location& loc) {
  return std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns, std::nullopt,
                                          loc.file_name(), loc.line());
}

c10::DispatchKey dispatch_key_for(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return c10::DispatchKey::CUDA;
    case c10::DeviceType::Meta: return c10::DispatchKey::Meta;
    default: return c10::DispatchKey::CPU;
  }
}
}  // namespace

void OpCore::register_with_dispatcher() {
  auto lib = make_fragment(ns_, loc_);
  std::ostringstream schema_text;
  schema_text << schema_;
  lib->def(schema_text.str().c_str());
  handle_ = c10::Dispatcher::singleton().findSchemaOrThrow(name_.c_str(), "");
  // NB: the Meta indirection is installed even without a fake kernel, so that FakeTensor
  // (torch.compile, torch.export) reaches device_kernel's error naming the op and impl_fake
  // instead of torch's generic "does not support running with fake tensors".
  for (auto device : kKernelDevices) {
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(dispatch_key_for(device),
                              torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<DeviceKernel>(this, device))));
    device_indirection_installed_[kernel_slot(device)] = true;
  }
  lib->impl(unqualified(name_).c_str(),
            torch::dispatch(
                c10::DispatchKey::CompositeExplicitAutograd,
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<NoBackendKernel>(this))));
  const bool non_tensor_return = std::any_of(returns_.begin(), returns_.end(), [](ArgKind k) {
    return k != ArgKind::kTensor && k != ArgKind::kTensorList;
  });
  if (non_tensor_return) {
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(c10::DispatchKey::Tracer, torch::CppFunction::makeFromBoxedFunctor(
                                                            std::make_unique<TracerKernel>(this))));
  }
  libraries_.push_back(std::move(lib));
  install_autograd_indirection();
}

void OpCore::tracer_kernel(const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                           torch::jit::Stack* stack) const {
  namespace tracer = torch::jit::tracer;
  const auto below =
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Tracer);
  if (!tracer::isTracing()) {
    h.redispatchBoxed(below, stack);
    return;
  }
  // NB: a copy, not a reference: getTracingState() returns a reference to the thread-local
  // state, which is reset below while the kernel runs untraced.
  auto state = tracer::getTracingState();  // NOLINT(performance-unnecessary-copy-initialization)
  auto& graph = state->graph;
  torch::jit::Node* node = graph->create(c10::Symbol::fromQualString(name_), /*num_outputs=*/0);
  tracer::recordSourceLocation(node);
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = (*stack)[stack->size() - n + i];
    const char* arg = args_[i].name.c_str();
    switch (args_[i].kind) {
      case ArgKind::kTensor: tracer::addInputs(node, arg, v.toTensor()); break;
      case ArgKind::kOptionalTensor:
        tracer::addInputs(node, arg, v.toOptional<at::Tensor>());
        break;
      case ArgKind::kTensorList: tracer::addInputs(node, arg, v.toTensorVector()); break;
      default: node->addInput(graph->insertConstant(v)); break;
    }
  }
  graph->insertNode(node);
  tracer::setTracingState(nullptr);
  try {
    h.redispatchBoxed(below, stack);
  } catch (...) {
    tracer::setTracingState(state);
    throw;
  }
  tracer::setTracingState(state);
  const size_t m = returns_.size();
  for (size_t i = 0; i < m; ++i) {
    const auto& v = (*stack)[stack->size() - m + i];
    switch (returns_[i]) {
      case ArgKind::kTensor: tracer::addOutput(node, v.toTensor()); break;
      case ArgKind::kTensorList: tracer::addOutput(node, v.toTensorVector()); break;
      case ArgKind::kInt: node->addOutput()->setType(c10::IntType::get()); break;
      case ArgKind::kFloat: node->addOutput()->setType(c10::FloatType::get()); break;
      default: node->addOutput()->setType(c10::BoolType::get()); break;
    }
  }
}

void OpCore::install_autograd_indirection() {
  if (autograd_indirection_installed_) return;
  auto lib = make_fragment(ns_, loc_);
  lib->impl(unqualified(name_).c_str(),
            torch::dispatch(
                c10::DispatchKey::Autograd,
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(this))));
  libraries_.push_back(std::move(lib));
  autograd_indirection_installed_ = true;
}

// ---- kernels -----------------------------------------------------------------------------

bool OpCore::has_kernel(c10::DeviceType device) const {
  const bool known = device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA ||
                     device == c10::DeviceType::Meta;
  return known && kernels_[kernel_slot(device)].load(std::memory_order_acquire) != nullptr;
}

void OpCore::set_kernel(c10::DeviceType device, detail::BoxedKernel fn, std::source_location loc) {
  TORCH_CHECK_VALUE(device != c10::DeviceType::Meta, name_,
                    ": impl() does not take c10::DeviceType::Meta; register the fake kernel with "
                    "op.impl_fake(kernel) (at ",
                    format_location(loc), ")");
  TORCH_CHECK_VALUE(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA, name_,
                    ": impl() takes c10::DeviceType::CPU or c10::DeviceType::CUDA, got ",
                    c10::DeviceTypeName(device), " (at ", format_location(loc), ")");
  install_kernel(device, std::move(fn), loc);
}

void OpCore::set_fake_kernel(detail::BoxedKernel fn, std::source_location loc) {
  install_kernel(c10::DeviceType::Meta, std::move(fn), loc);
}

void OpCore::install_kernel(c10::DeviceType device, detail::BoxedKernel fn,
                            std::source_location loc) {
  const size_t slot_index = kernel_slot(device);
  auto& slot = kernels_[slot_index];
  const char* what = device == c10::DeviceType::Meta ? "impl_fake" : "impl";
  if (const auto* first = slot.load()) {
    TORCH_CHECK(false, name_, ": a ", device_name(device), " ", what, " is already registered at ",
                format_location(first->loc), "; the second one at ", format_location(loc),
                " is refused (one per device)");
  }
  if (!device_indirection_installed_[slot_index]) {
    TORCH_CHECK(!handle_->hasKernelForDispatchKey(dispatch_key_for(device)), name_,
                ": already has a ", device_name(device), " kernel registered outside customop (",
                handle_->debug(), "); the ", what, " at ", format_location(loc), " is refused");
    auto lib = make_fragment(ns_, loc);
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(dispatch_key_for(device),
                              torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<DeviceKernel>(this, device))));
    libraries_.push_back(std::move(lib));
    device_indirection_installed_[slot_index] = true;
  }
  kernel_storage_.push_back(
      std::make_unique<detail::KernelEntry>(detail::KernelEntry{std::move(fn), loc}));
  slot.store(kernel_storage_.back().get());
}

// A None passed for a (non-optional) Tensor reaches the kernels as an undefined tensor, whose
// first use would throw "tensor does not have a device" without naming the op or argument.
// Checked by the first customop kernel a call reaches: Autograd, or the device kernel.
namespace {
void check_tensor_args_defined(const std::string& name_, const std::vector<ArgSpec>& args_,
                               const torch::jit::Stack& stack) {
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    if (args_[i].kind == ArgKind::kTensor) {
      TORCH_CHECK_TYPE(v.isTensor() && v.toTensor().defined(), name_, ": argument '", args_[i].name,
                       "' (Tensor) expected a tensor, got None");
    } else if (args_[i].kind == ArgKind::kTensorList && v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        TORCH_CHECK_TYPE(list.get(k).defined(), name_, ": argument '", args_[i].name,
                         "' (Tensor[]) element ", k, " expected a tensor, got None");
      }
    }
  }
}
// Forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) would need a JVP formula; the
// generated autograd Function has only the VJP, and torch's own error does not name the op.
void check_no_forward_grad(const std::string& name_, const std::vector<ArgSpec>& args_,
                           const torch::jit::Stack& stack) {
  // No dual level entered: nothing can carry a tangent. (try_get_by_idx, not has_any_level:
  // torch 2.11 has only the former.)
  if (torch::autograd::ForwardADLevel::try_get_by_idx(0) == nullptr) return;
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    auto dual = [](const at::Tensor& t) { return t.defined() && t._fw_grad(0).defined(); };
    bool has_tangent = false;
    if (v.isTensor()) {
      has_tangent = dual(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) has_tangent = has_tangent || dual(t);
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        !has_tangent, name_, ": forward-mode AD is not supported: argument '", args_[i].name,
        "' carries a tangent (torch.autograd.forward_ad dual tensor, torch.func.jvp or "
        "jacfwd), but customop ops have a reverse-mode formula (impl_backward) only. Use "
        "reverse mode (Tensor.backward, torch.autograd.grad) instead");
  }
}

// torch.func's differentiating transforms cannot run a C++ autograd::Function (the generated
// Function); torch's own error says so without naming the op.
void check_no_functorch_grad(const std::string& name_) {
  const auto& tls = at::functorch::functorchTLSAccessor();
  if (!tls) return;
  try {
    tls->checkSupportsCppAutogradFunction();
  } catch (const c10::Error&) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name_,
        ": torch.func transforms that differentiate (grad, vjp, jacrev, jacfwd, hessian) are "
        "not supported: the op's backward is a C++ torch::autograd::Function, which torch.func "
        "cannot transform. Use Tensor.backward or torch.autograd.grad (torch.func.vmap works, "
        "through torch's batching fallback)");
  }
}
}  // namespace

void NoBackendKernel::operator()(const c10::OperatorHandle&, c10::DispatchKeySet,
                                 torch::jit::Stack* stack) {
  const std::string& name = op_->name();
  const std::vector<ArgSpec>& args = op_->args();
  check_tensor_args_defined(name, args, *stack);
  std::string empty_lists;
  const size_t n = args.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = (*stack)[stack->size() - n + i];
    std::optional<at::Tensor> t;
    if (v.isTensor()) t = v.toTensor();
    if (v.isTensorList() && !v.toTensorList().empty()) t = v.toTensorList().get(0);
    // NB: also reached for a dense tensor with a key customop has no kernel for (sparse,
    // quantized, nested): the message names layout and dtype as well as the device.
    TORCH_CHECK_NOT_IMPLEMENTED(!t.has_value(), name, ": argument '", args[i].name, "' is a ",
                                t ? t->toString() : std::string(), " (layout ",
                                t ? t->layout() : c10::kStrided,
                                "), but customop ops run on dense (strided) CPU, CUDA and Meta "
                                "tensors only");
    if (v.isTensorList()) empty_lists += (empty_lists.empty() ? "'" : ", '") + args[i].name + "'";
  }
  TORCH_CHECK(false, name, ": no tensor to run on: ",
              empty_lists.empty() ? std::string("every Tensor argument is None")
                                  : "argument " + empty_lists + " (Tensor[]) is an empty list",
              ", so the call has no device to run on; pass at least one tensor");
}

void OpCore::device_kernel(c10::DeviceType device, torch::jit::Stack* stack) const {
  const auto* entry = kernels_[kernel_slot(device)].load(std::memory_order_acquire);
  if (entry == nullptr) {
    // NB: a RuntimeError, not NotImplementedError, for Meta: FakeTensor turns the latter into
    // its generic UnsupportedOperatorException, which would drop the op's name and the fix.
    TORCH_CHECK(device != c10::DeviceType::Meta, name_,
                ": no fake (Meta) kernel registered, so the op cannot run on meta tensors, "
                "under FakeTensor, torch.compile or torch.export. Register one with "
                "op.impl_fake(kernel) (customop/op.h): kernel(const Args&) returns outputs of "
                "the right shapes, dtypes and strides without reading data, e.g. "
                "at::empty_symint(args.x.sym_sizes(), args.x.options())");
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name_, ": no ", device_name(device),
        " impl registered. Register one with op.impl(c10::DeviceType::", device_name(device),
        ", kernel) (customop/op.h) before calling the op on ", device_name(device), " tensors");
  }
  check_tensor_args_defined(name_, args_, *stack);
  entry->fn(stack);
}

// ---- autograd ----------------------------------------------------------------------------

namespace {
void check_no_library_autograd_kernel(const std::string& name, const c10::OperatorHandle& h,
                                      const std::source_location& loc) {
  TORCH_CHECK(!h.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd), name,
              ": already has a CompositeImplicitAutograd kernel registered outside customop (",
              h.debug(),
              "); its autograd comes from that decomposition, so the backward "
              "formula at ",
              format_location(loc),
              " is refused. Register it for "
              "CompositeExplicitAutograd or per device instead");
  for (auto key : {c10::DispatchKey::Autograd, c10::DispatchKey::AutogradCPU,
                   c10::DispatchKey::AutogradCUDA}) {
    TORCH_CHECK(!h.hasKernelForDispatchKey(key), name, ": already has an ", key,
                " kernel registered outside customop (", h.debug(), "); the backward formula at ",
                format_location(loc),
                " is refused. Remove that registration to use customop's autograd glue");
  }
}
}  // namespace

void OpCore::note_save_for_backward(std::source_location loc) {
  TORCH_CHECK(!save_loc_.has_value(), name_, ": save_for_backward is already registered at ",
              format_location(*save_loc_), "; the second one at ", format_location(loc),
              " is refused");
  if (!autograd_indirection_installed_) {
    check_no_library_autograd_kernel(name_, *handle_, loc);
    install_autograd_indirection();
  }
  save_loc_ = loc;
}

void OpCore::note_backward(std::source_location loc, std::optional<std::vector<bool>> output_diff,
                           bool returns_backward_ok) {
  TORCH_CHECK(!backward_loc_.has_value(), name_, ": backward is already registered at ",
              format_location(*backward_loc_), "; the second one at ", format_location(loc),
              " is refused");
  TORCH_CHECK_TYPE(returns_backward_ok, name_,
                   ": cannot register a backward formula: every return must be Tensor, "
                   "Tensor[], int, float or bool");
  if (output_diff.has_value()) {
    TORCH_CHECK_VALUE(output_diff->size() == returns_.size(), name_,
                      ": output_differentiability has ", output_diff->size(),
                      " entries but the op has ", returns_.size(),
                      " returns; give one bool per return (at ", format_location(loc), ")");
  }
  if (!autograd_indirection_installed_) {
    check_no_library_autograd_kernel(name_, *handle_, loc);
    install_autograd_indirection();
  }
  output_differentiability_ = std::move(output_diff);
  backward_loc_ = loc;
}

std::string OpCore::backward_location() const {
  return backward_loc_ ? format_location(*backward_loc_) : std::string("<unknown>");
}

void OpCore::autograd_kernel(const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                             torch::jit::Stack* stack) {
  check_tensor_args_defined(name_, args_, *stack);
  check_no_forward_grad(name_, args_, *stack);
  // NB: the locations are read only once their part is published (another thread may be
  // registering the formula while this call runs).
  const uint8_t parts = formula_parts_.load(std::memory_order_acquire);
  if (parts == (kSavePart | kBackwardPart)) {
    check_no_functorch_grad(name_);
    run_autograd(ks, stack);
    return;
  }
  if (parts != 0) {
    const bool have_backward = (parts & kBackwardPart) != 0;
    const char* found = have_backward ? "backward" : "save_for_backward";
    const char* missing = have_backward ? "save_for_backward" : "backward";
    TORCH_CHECK(false, "We found a '", found, "' registration for ", name_, " at ",
                format_location(have_backward ? *backward_loc_ : *save_loc_),
                " but were unable to find a '", missing,
                "' registration. To use the CustomOp API to register a backward formula, "
                "please provide us both a backward function and a 'save for backward' "
                "function via `impl_backward` and `impl_save_for_backward` respectively.");
  }
  // Autograd not implemented: an error only when a gradient could be asked for.
  if (at::GradMode::is_enabled()) {
    const size_t n = schema_.arguments().size();
    for (size_t i = 0; i < n; ++i) {
      const auto& v = (*stack)[stack->size() - n + i];
      bool requires_grad = false;
      if (v.isTensor()) {
        requires_grad = v.toTensor().defined() && v.toTensor().requires_grad();
      } else if (v.isTensorList()) {
        for (const auto& t : v.toTensorVector()) {
          requires_grad = requires_grad || (t.defined() && t.requires_grad());
        }
      }
      TORCH_CHECK_NOT_IMPLEMENTED(
          !requires_grad, "Autograd has not been implemented for operator ", name_, " (argument '",
          schema_.arguments()[i].name(),
          "' requires grad). Register a formula with impl_save_for_backward and "
          "impl_backward, or call the op under torch::NoGradGuard");
    }
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  h.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
}

void OpCore::collect_args_info(const torch::jit::Stack& stack, detail::ArgsInfo& info) const {
  const size_t n = args_.size();
  info.counts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    switch (args_[i].kind) {
      case ArgKind::kTensor: info.counts[i] = 1; break;
      case ArgKind::kOptionalTensor:
        info.counts[i] = (v.isNone() || !v.toTensor().defined()) ? detail::ArgsInfo::kNone : 1;
        break;
      case ArgKind::kTensorList:
        info.counts[i] = static_cast<int32_t>(v.toTensorList().size());
        break;
      default: info.counts[i] = detail::ArgsInfo::kNotTensorLike; break;
    }
  }
}

void OpCore::non_differentiable_outputs(const torch::jit::Stack& outputs,
                                        std::vector<at::Tensor>& out) const {
  if (!output_differentiability_) return;
  const auto& od = *output_differentiability_;
  for (size_t i = 0; i < od.size(); ++i) {
    const auto& v = outputs[outputs.size() - od.size() + i];
    if (v.isTensor()) {
      if (!od[i]) out.push_back(v.toTensor());
      continue;
    }
    if (v.isTensorList()) {
      if (!od[i]) {
        for (const auto& t : v.toTensorList()) out.push_back(t);
      }
      continue;
    }
    if (od[i]) {
      std::string list = "[";
      for (size_t j = 0; j < od.size(); ++j)
        list += (j ? ", " : "") + std::string(od[j] ? "True" : "False");
      TORCH_CHECK(false, name_, ": With output_differentiability=", list, "]. At idx ", i,
                  ", we received an object of type ", ivalue_type_name(v),
                  " that is not a Tensor, so it cannot be marked as differentiable in "
                  "output_differentiability.");
    }
  }
}

void OpCore::backward_error(const std::string& what) const {
  TORCH_CHECK(false, "In the backward function defined for ", name_, " at ", backward_location(),
              " using the CustomOp API, ", what);
}

void OpCore::grads_to_flat(const Grads& grads, const detail::ArgsInfo& info,
                           std::vector<at::Tensor>& flat) const {
  std::set<std::string> expected;
  for (const auto& a : args_) {
    if (is_tensor_like(a.kind)) expected.insert(a.name);
  }
  std::set<std::string> actual;
  for (const auto& e : grads.entries()) {
    if (!actual.insert(e.name).second) {
      backward_error("the returned grads hold input '" + e.name +
                     "' twice; return one gradient per input");
    }
  }
  if (expected != actual) {
    backward_error("expected the returned grad_input dict to have keys " + join_keys(expected) +
                   " but got " + join_keys(actual) +
                   ". The backward function must return a gradient (can be None) for each arg "
                   "to the CustomOp that may be a Tensor or Sequence[Tensor]. Args declared to "
                   "be non-Tensor-like types should not appear in the grad_input dict");
  }
  // Each entry is checked in the order backward returned it, as the reference does.
  std::vector<const c10::IValue*> by_arg(args_.size(), nullptr);
  for (const auto& e : grads.entries()) {
    size_t idx = 0;
    while (idx < args_.size() && args_[idx].name != e.name) ++idx;
    TORCH_INTERNAL_ASSERT(idx < args_.size(), name_, ": grads for unknown input '", e.name,
                          "' passed the key check");
    by_arg[idx] = &e.value;
    const auto& g = e.value;
    const int32_t count = info.counts[idx];
    if (args_[idx].kind == ArgKind::kTensorList) {
      if (!g.isList()) {
        backward_error("for input '" + e.name +
                       "' expected the grad_input dict to hold a list of gradients but got "
                       "object of type " +
                       ivalue_type_name(g) + ".");
      }
      const size_t got = g.isTensorList() ? g.toTensorList().size() : g.toListRef().size();
      if (got != static_cast<size_t>(count)) {
        backward_error("for input '" + e.name +
                       "' expected the grad_input dict to hold a list of " + std::to_string(count) +
                       " gradients but got " + std::to_string(got));
      }
      if (!g.isTensorList()) {
        const auto& elems = g.toListRef();
        for (size_t k = 0; k < elems.size(); ++k) {
          if (!elems[k].isNone() && !elems[k].isTensor()) {
            backward_error("for input '" + e.name +
                           "' expected the grad_input dict to hold a list of None or Tensor "
                           "gradients but got object of " +
                           ivalue_type_name(elems[k]) + " at index " + std::to_string(k));
          }
        }
      }
      continue;
    }
    if (g.isNone() || (g.isTensor() && !g.toTensor().defined())) continue;
    if (!g.isTensor()) {
      backward_error("got object of type " + ivalue_type_name(g) + " as the gradient for input '" +
                     e.name + "', but expected the gradient to be either None or a Tensor");
    }
    if (count == detail::ArgsInfo::kNone) {
      backward_error("got a Tensor as the gradient for input '" + e.name +
                     "' but expected None as the gradient because input '" + e.name +
                     "' was not a Tensor (it was type NoneType).");
    }
  }
  for (size_t i = 0; i < args_.size(); ++i) {
    const int32_t count = info.counts[i];
    // A Tensor? that was None is no input of the autograd Function: it takes no grad slot.
    if (count == detail::ArgsInfo::kNotTensorLike || count == detail::ArgsInfo::kNone) continue;
    TORCH_INTERNAL_ASSERT(by_arg[i] != nullptr, name_, ": no grad for input '", args_[i].name,
                          "' passed the key check");
    const c10::IValue& g = *by_arg[i];
    if (args_[i].kind == ArgKind::kTensorList) {
      if (g.isTensorList()) {
        for (const auto& t : g.toTensorList()) flat.push_back(t);
      } else {
        for (const auto& elem : g.toListRef()) {
          flat.push_back(elem.isNone() ? at::Tensor() : elem.toTensor());
        }
      }
    } else {
      flat.push_back(g.isTensor() ? g.toTensor() : at::Tensor());
    }
  }
}

void OpCore::ivalue_grads_to_flat(const c10::IValue& grads, const detail::ArgsInfo& info,
                                  std::vector<at::Tensor>& flat) const {
  if (!grads.isGenericDict()) {
    backward_error("expected the output of the backward function to be a dict but got " +
                   ivalue_type_name(grads));
  }
  Grads named;
  for (const auto& item : grads.toGenericDict()) {
    if (!item.key().isString()) {
      backward_error("expected the grad_input dict to have str keys but got a key of type " +
                     ivalue_type_name(item.key()));
    }
    named.entries().push_back({item.key().toStringRef(), item.value()});
  }
  grads_to_flat(named, info, flat);
}

// ---- registry ----------------------------------------------------------------------------

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<OpCore>> ops;
};
Registry& registry() {
  // Leaked on purpose: ops must outlive every static destructor that might still call them.
  static auto* r = new Registry();
  return *r;
}
}  // namespace

OpCore& register_op(std::unique_ptr<OpCore> op) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& existing : r.ops) {
    TORCH_CHECK(existing->name() != op->name(), op->name(),
                ": defined multiple times; the first definition is at ",
                format_location(existing->location()), ", this one at ",
                format_location(op->location()));
  }
  if (!op->wrapped_) {
    auto h = c10::Dispatcher::singleton().findSchema({op->name(), ""});
    TORCH_CHECK(!h.has_value(), op->name(),
                ": defined multiple times; it already exists in the dispatcher (",
                h.has_value() ? h->debug() : std::string(), "), this definition at ",
                format_location(op->location()), " is refused");
    op->register_with_dispatcher();
  }
  r.ops.push_back(std::move(op));
  return *r.ops.back();
}

std::vector<const OpCore*> registered_ops() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const OpCore*> out;
  for (const auto& op : r.ops) out.push_back(op.get());
  return out;
}

const OpCore* find_op(std::string_view qualified_name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& op : r.ops) {
    if (op->name() == qualified_name) return op.get();
  }
  return nullptr;
}

}  // namespace customop
