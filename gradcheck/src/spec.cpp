// Input spec files: JSON descriptions of arguments for any dispatcher op.

#include <customop/gradcheck/runner.h>

#include "detail/function.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace customop::gradcheck {

namespace {

using nlohmann::json;

/// A tensor argument as the spec describes it.
struct TensorSpec {
  std::vector<int64_t> shape;
  int64_t numel = 1;  // <= kMaxSpecElements
  std::optional<c10::ScalarType> dtype;
  std::optional<bool> requires_grad;
  std::string init = "randn";
  double low = -1.0, high = 1.0;
  std::optional<std::vector<double>> values;
  bool noncontiguous = false;
};

/// One argument: a tensor, a tensor list, or a fixed IValue.
struct ArgRecipe {
  enum Kind { kTensor, kTensorList, kValue } kind = kValue;
  TensorSpec tensor;
  std::vector<TensorSpec> tensors;
  c10::IValue value;
};

struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad(const std::string& what) { throw SpecError(what); }

// Messages quote the spec's own strings (keys, op names, init names); their control characters
// are escaped here so that an error stays on one line, as load_spec_text promises.
std::string one_line(std::string_view what) {
  std::string out;
  for (const char c : what) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<c10::ScalarType> parse_dtype(const std::string& s) {
  static const std::pair<const char*, c10::ScalarType> kNames[] = {
      {"float64", at::kDouble},    {"double", at::kDouble}, {"float32", at::kFloat},
      {"float", at::kFloat},       {"float16", at::kHalf},  {"half", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},    {"long", at::kLong},
      {"int32", at::kInt},         {"int", at::kInt},       {"bool", at::kBool},
      {"uint8", at::kByte},        {"int8", at::kChar},     {"int16", at::kShort}};
  for (const auto& [n, t] : kNames) {
    if (s == n) return t;
  }
  return std::nullopt;
}

void flatten_values(const json& v, std::vector<double>& out) {
  if (v.is_array()) {
    for (const auto& e : v) flatten_values(e, out);
  } else if (v.is_number() || v.is_boolean()) {
    out.push_back(v.get<double>());
  } else {
    bad("\"values\" must hold numbers (nested lists of numbers)");
  }
}

TensorSpec parse_tensor(const json& j) {
  if (!j.is_object()) bad("a \"tensor\" must be an object with a \"shape\"");
  TensorSpec t;
  for (const auto& [key, v] : j.items()) {
    if (key == "shape") {
      if (!v.is_array()) bad("\"shape\" must be a list of sizes, e.g. [3, 4]");
      for (const auto& d : v) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0) {
          bad("\"shape\" must hold integer sizes >= 0, but got " + v.dump());
        }
        t.shape.push_back(d.get<int64_t>());
      }
      // NB: checked before anything is allocated (parse_case builds every case once), in an
      // order that cannot overflow: every size is <= the limit, and the running product of
      // non-zero sizes only grows, so it stops at the first step past the limit.
      const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
      t.numel = empty ? 0 : 1;
      const std::string limit =
          std::to_string(kMaxSpecElements) + " elements a spec case may hold (kMaxSpecElements)";
      for (const int64_t d : t.shape) {
        if (d > kMaxSpecElements) {
          bad("\"shape\" " + v.dump() + " has the size " + std::to_string(d) + ", more than the " +
              limit);
        }
        if (!empty && (t.numel *= d) > kMaxSpecElements) {
          bad("\"shape\" " + v.dump() + " has more than the " + limit);
        }
      }
    } else if (key == "dtype") {
      if (!v.is_string() || !parse_dtype(v.get<std::string>())) {
        bad("unknown dtype " + v.dump() +
            " (float64, float32, float16, bfloat16, int64, int32, bool)");
      }
      t.dtype = parse_dtype(v.get<std::string>());
    } else if (key == "requires_grad") {
      if (!v.is_boolean()) bad("\"requires_grad\" must be true or false");
      t.requires_grad = v.get<bool>();
    } else if (key == "init") {
      if (!v.is_string()) bad("\"init\" must be \"randn\", \"uniform\", \"zeros\" or \"ones\"");
      t.init = v.get<std::string>();
      if (t.init != "randn" && t.init != "uniform" && t.init != "zeros" && t.init != "ones") {
        bad("unknown init \"" + t.init + "\" (randn, uniform, zeros, ones)");
      }
    } else if (key == "low" || key == "high") {
      if (!v.is_number()) bad("\"" + key + "\" must be a number");
      (key == "low" ? t.low : t.high) = v.get<double>();
    } else if (key == "values") {
      std::vector<double> vals;
      flatten_values(v, vals);
      t.values = std::move(vals);
    } else if (key == "noncontiguous") {
      if (!v.is_boolean()) bad("\"noncontiguous\" must be true or false");
      t.noncontiguous = v.get<bool>();
    } else {
      bad("unknown tensor key \"" + key +
          "\" (shape, dtype, requires_grad, init, low, high, values, noncontiguous)");
    }
  }
  if (!j.contains("shape")) bad("a \"tensor\" needs a \"shape\"");
  if (!(t.low < t.high) || !std::isfinite(t.low) || !std::isfinite(t.high)) {
    std::ostringstream got;
    got << "low " << t.low << " and high " << t.high;
    bad("\"low\" and \"high\" (the bounds of \"uniform\") must be finite with low < high, "
        "but got " +
        got.str());
  }
  if (t.values && static_cast<int64_t>(t.values->size()) != t.numel) {
    bad("\"values\" holds " + std::to_string(t.values->size()) + " numbers but the shape " +
        detail::format_sizes(t.shape) + " needs " + std::to_string(t.numel));
  }
  return t;
}

at::Tensor make_tensor(const TensorSpec& t, c10::Device device, c10::ScalarType run_dtype,
                       at::Generator& gen) {
  const c10::ScalarType dtype = t.dtype.value_or(run_dtype);
  std::vector<int64_t> shape = t.shape;
  const bool strided = t.noncontiguous && !shape.empty();
  if (strided) shape.back() *= 2;
  const auto cpu64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor base;
  if (t.init == "zeros") {
    base = at::zeros(shape, cpu64);
  } else if (t.init == "ones") {
    base = at::ones(shape, cpu64);
  } else if (t.init == "uniform") {
    base = at::rand(shape, gen, cpu64) * (t.high - t.low) + t.low;
  } else {
    base = at::randn(shape, gen, cpu64);
  }
  if (t.values) {
    at::Tensor vals = at::tensor(*t.values, cpu64).reshape(t.shape);
    if (strided) {
      base.slice(-1, 0, shape.back(), 2).copy_(vals);
    } else {
      base = vals;
    }
  }
  at::Tensor out = base.to(at::TensorOptions().dtype(dtype).device(device));
  if (strided) out = out.slice(-1, 0, shape.back(), 2);
  const bool floating = at::isFloatingType(dtype);
  if (t.requires_grad.value_or(floating)) {
    if (!floating) bad("a " + std::string(c10::toString(dtype)) + " tensor cannot require grad");
    out = out.detach().requires_grad_(true);
  }
  return out;
}

c10::IValue convert_literal(const json& v, const c10::TypePtr& type, const std::string& arg) {
  using K = c10::TypeKind;
  const auto expect = [&](const char* what) -> c10::IValue {
    bad("argument '" + arg + "' of type " + type->str() + ": expected " + what + ", got " +
        v.dump());
  };
  switch (type->kind()) {
    case K::OptionalType:
      if (v.is_null()) return c10::IValue();
      return convert_literal(v, type->castRaw<c10::OptionalType>()->getElementType(), arg);
    case K::IntType:
    case K::SymIntType:
      if (v.is_number_integer()) return v.get<int64_t>();
      return expect("an integer");
    case K::FloatType:
      if (v.is_number()) return v.get<double>();
      return expect("a number");
    case K::BoolType:
      if (v.is_boolean()) return v.get<bool>();
      return expect("true or false");
    case K::StringType:
      if (v.is_string()) return v.get<std::string>();
      return expect("a string");
    case K::NumberType:
      if (v.is_number_integer()) return c10::Scalar(v.get<int64_t>());
      if (v.is_number()) return c10::Scalar(v.get<double>());
      if (v.is_boolean()) return c10::Scalar(v.get<bool>());
      return expect("a number");
    case K::ScalarTypeType:
      if (v.is_string() && parse_dtype(v.get<std::string>())) {
        return static_cast<int64_t>(*parse_dtype(v.get<std::string>()));
      }
      return expect("a dtype name such as \"float32\"");
    case K::ListType: {
      if (!v.is_array()) return expect("a list");
      const auto elem = type->castRaw<c10::ListType>()->getElementType();
      switch (elem->kind()) {
        case K::IntType:
        case K::SymIntType: {
          std::vector<int64_t> xs;
          for (const auto& e : v) {
            if (!e.is_number_integer()) return expect("a list of integers");
            xs.push_back(e.get<int64_t>());
          }
          return xs;
        }
        case K::FloatType: {
          std::vector<double> xs;
          for (const auto& e : v) {
            if (!e.is_number()) return expect("a list of numbers");
            xs.push_back(e.get<double>());
          }
          return xs;
        }
        case K::BoolType: {
          c10::List<bool> xs;
          for (const auto& e : v) {
            if (!e.is_boolean()) return expect("a list of booleans");
            xs.push_back(e.get<bool>());
          }
          return xs;
        }
        default: return expect("a tensor list ({\"tensors\": [...]}) or a supported list");
      }
    }
    default:
      if (v.is_null()) return c10::IValue();
      return expect("a value of a supported type (tensor, int, float, bool, str, Scalar, lists)");
  }
}

ArgRecipe parse_arg(const json& v, const c10::Argument& a) {
  ArgRecipe r;
  // What the schema allows: {"tensor"} only for Tensor / Tensor?, {"tensors"} only for
  // Tensor[] / Tensor?[], null only for an optional argument.
  const bool optional = a.real_type()->kind() == c10::TypeKind::OptionalType;
  const c10::TypePtr base =
      optional ? a.real_type()->castRaw<c10::OptionalType>()->getElementType() : a.real_type();
  const bool is_tensor = base->kind() == c10::TypeKind::TensorType;
  bool is_tensor_list = false;
  if (base->kind() == c10::TypeKind::ListType) {
    auto elem = base->castRaw<c10::ListType>()->getElementType();
    if (elem->kind() == c10::TypeKind::OptionalType) {
      elem = elem->castRaw<c10::OptionalType>()->getElementType();
    }
    is_tensor_list = elem->kind() == c10::TypeKind::TensorType;
  }
  const std::string what = "argument '" + a.name() + "' of type " + a.real_type()->str();
  if (v.is_null() && !optional) bad(what + ": null is only allowed for an optional argument");
  if (is_tensor && !v.is_null() && !(v.is_object() && v.contains("tensor"))) {
    bad(what + ": expected {\"tensor\": {...}}, got " + v.dump());
  }
  if (is_tensor_list && !v.is_null() && !(v.is_object() && v.contains("tensors"))) {
    bad(what + ": expected {\"tensors\": [...]}, got " + v.dump());
  }
  if (!is_tensor && v.is_object() && v.contains("tensor")) {
    bad(what + ": a tensor ({\"tensor\": ...}) was given for a non-Tensor argument");
  }
  if (!is_tensor_list && v.is_object() && v.contains("tensors")) {
    bad(what + ": a tensor list ({\"tensors\": ...}) was given for a non-Tensor[] argument");
  }
  // A tensor's own errors name the argument too.
  const auto tensor = [&](const json& j) {
    try {
      return parse_tensor(j);
    } catch (const SpecError& e) {
      bad("argument '" + a.name() + "': " + e.what());
    }
  };
  if (v.is_object() && v.contains("tensor")) {
    if (v.size() != 1) bad("argument '" + a.name() + "': {\"tensor\": {...}} takes no other keys");
    r.kind = ArgRecipe::kTensor;
    r.tensor = tensor(v["tensor"]);
    return r;
  }
  if (v.is_object() && v.contains("tensors")) {
    if (!v["tensors"].is_array()) bad("argument '" + a.name() + "': \"tensors\" must be a list");
    r.kind = ArgRecipe::kTensorList;
    for (const auto& t : v["tensors"]) {
      if (!t.is_object() || !t.contains("tensor")) {
        bad("argument '" + a.name() + "': each element of \"tensors\" is {\"tensor\": {...}}");
      }
      r.tensors.push_back(tensor(t["tensor"]));
    }
    return r;
  }
  if (v.is_object()) {
    bad("argument '" + a.name() +
        "': an object must be {\"tensor\": {...}} or {\"tensors\": [...]}");
  }
  r.value = convert_literal(v, a.real_type(), a.name());
  return r;
}

SpecCase parse_case(const json& j, std::size_t index) {
  if (!j.is_object())
    bad("case " + std::to_string(index) + " must be an object with \"op\" and \"args\"");
  for (const auto& [key, v] : j.items()) {
    if (key != "op" && key != "args" && key != "label" && key != "reference") {
      bad("case " + std::to_string(index) + ": unknown key \"" + key +
          "\" (op, label, args, reference)");
    }
  }
  if (!j.contains("op") || !j["op"].is_string()) {
    bad("case " + std::to_string(index) +
        ": \"op\" must name the operator, e.g. \"aten::mul.Tensor\"");
  }
  SpecCase sc;
  sc.op = j["op"].get<std::string>();
  sc.label = j.contains("label") && j["label"].is_string() ? j["label"].get<std::string>()
                                                           : "case " + std::to_string(index);
  const std::string where = "case " + std::to_string(index) + " (" + sc.op + ")";
  const auto sep = sc.op.find("::");
  if (sep == std::string::npos)
    bad(where + ": the op name must be qualified, \"namespace::name[.overload]\"");
  const auto dot = sc.op.find('.', sep);
  const std::string name = sc.op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : sc.op.substr(dot + 1);
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) {
    // Name the overloads that exist ("aten::mul" -> aten::mul.Tensor, aten::mul.Scalar, ...).
    std::string overloads;
    for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) {
      if (op.name != name) continue;
      overloads += (overloads.empty() ? "" : ", ") + name +
                   (op.overload_name.empty() ? "" : "." + op.overload_name);
    }
    if (!overloads.empty()) bad(where + ": no such overload; registered: " + overloads);
    bad(where + ": no such operator is registered (load its library with --load first)");
  }
  const auto& schema = handle->schema();
  if (j.contains("reference")) {
    // The float16/bfloat16 rule's reference: another registered op with the same arguments
    // and returns (types in order; names may differ).
    if (!j["reference"].is_string()) bad(where + ": \"reference\" must name an operator");
    sc.reference = j["reference"].get<std::string>();
    const auto rsep = sc.reference.find("::");
    const auto rdot = sc.reference.find('.', rsep == std::string::npos ? 0 : rsep);
    const auto ref = c10::Dispatcher::singleton().findSchema(
        {sc.reference.substr(0, rdot),
         rdot == std::string::npos ? "" : sc.reference.substr(rdot + 1)});
    if (rsep == std::string::npos || !ref) {
      bad(where + ": reference " + sc.reference + " is not a registered operator");
    }
    auto types = [](const std::vector<c10::Argument>& as) {
      std::string t;
      for (const auto& a : as) t += a.type()->str() + ", ";
      return t.empty() ? t : t.substr(0, t.size() - 2);
    };
    const auto& rs = ref->schema();
    if (types(rs.arguments()) != types(schema.arguments()) ||
        types(rs.returns()) != types(schema.returns())) {
      bad(where + ": reference " + sc.reference + " takes (" + types(rs.arguments()) + ") -> (" +
          types(rs.returns()) + "), but " + sc.op + " takes (" + types(schema.arguments()) +
          ") -> (" + types(schema.returns()) + ")");
    }
  }
  const auto& sargs = schema.arguments();

  std::vector<std::optional<ArgRecipe>> recipes(sargs.size());
  try {
    if (j.contains("args")) {
      const auto& args = j["args"];
      if (args.is_array()) {
        if (args.size() > sargs.size()) {
          bad(std::to_string(args.size()) + " arguments given, but the schema takes " +
              std::to_string(sargs.size()));
        }
        for (std::size_t i = 0; i < args.size(); ++i) recipes[i] = parse_arg(args[i], sargs[i]);
      } else if (args.is_object()) {
        for (const auto& [key, v] : args.items()) {
          std::size_t i = 0;
          while (i < sargs.size() && sargs[i].name() != key) ++i;
          if (i == sargs.size()) bad("no argument named '" + key + "' in the schema");
          recipes[i] = parse_arg(v, sargs[i]);
        }
      } else {
        bad("\"args\" must be a list (schema order) or an object (by name)");
      }
    }
    for (std::size_t i = 0; i < sargs.size(); ++i) {
      if (recipes[i]) continue;
      if (!sargs[i].default_value())
        bad("argument '" + sargs[i].name() + "' is missing and has no default");
      ArgRecipe r;
      r.value = *sargs[i].default_value();
      recipes[i] = std::move(r);
    }
  } catch (const SpecError& e) {
    bad(where + ": " + e.what());
  }
  int64_t numel = 0;  // each tensor holds <= kMaxSpecElements: no overflow
  std::string counts;
  for (std::size_t i = 0; i < sargs.size(); ++i) {
    const auto& r = *recipes[i];
    int64_t n = r.kind == ArgRecipe::kTensor ? r.tensor.numel : 0;
    for (const auto& t : r.tensors) n += t.numel;
    if (n == 0) continue;
    numel += n;
    counts += (counts.empty() ? "argument '" : ", '") + sargs[i].name() + "': " + std::to_string(n);
  }
  if (numel > kMaxSpecElements) {
    bad(where + ": its tensors hold " + std::to_string(numel) + " elements in all (" + counts +
        "), more than the " + std::to_string(kMaxSpecElements) +
        " a spec case may hold (kMaxSpecElements)");
  }
  bool fixed = true, any_tensor = false;
  for (const auto& r : recipes) {
    if (r->kind == ArgRecipe::kTensor) {
      any_tensor = true;
      fixed = fixed && r->tensor.dtype.has_value();
    } else if (r->kind == ArgRecipe::kTensorList) {
      for (const auto& t : r->tensors) {
        any_tensor = true;
        fixed = fixed && t.dtype.has_value();
      }
    }
  }
  sc.dtype_fixed = any_tensor && fixed;
  auto shared = std::make_shared<std::vector<std::optional<ArgRecipe>>>(std::move(recipes));
  sc.make = [shared](c10::Device device, c10::ScalarType dtype, std::uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    torch::jit::Stack stack;
    for (const auto& r : *shared) {
      switch (r->kind) {
        case ArgRecipe::kTensor:
          stack.emplace_back(make_tensor(r->tensor, device, dtype, gen));
          break;
        case ArgRecipe::kTensorList: {
          c10::List<at::Tensor> list;
          for (const auto& t : r->tensors) list.push_back(make_tensor(t, device, dtype, gen));
          stack.emplace_back(std::move(list));
          break;
        }
        case ArgRecipe::kValue: stack.push_back(r->value); break;
      }
    }
    return stack;
  };
  try {
    (void)sc.make(c10::Device(at::kCPU), at::kDouble, 0);  // fail at load time, not mid-run
  } catch (const SpecError& e) {
    bad(where + ": " + e.what());
  }
  return sc;
}

}  // namespace

std::vector<SpecCase> load_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK_VALUE(in.good(), path, ": cannot open the spec file");
  std::ostringstream text;
  text << in.rdbuf();
  return load_spec_text(text.str(), path);
}

std::vector<SpecCase> load_spec_text(std::string_view text, std::string_view source) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    TORCH_CHECK_VALUE(false, source, ": not valid JSON: ", one_line(e.what()));
  }
  std::vector<SpecCase> cases;
  try {
    const json* list = &doc;
    if (doc.is_object() && doc.contains("cases")) list = &doc["cases"];
    if (list->is_array()) {
      if (list->empty()) bad("the spec holds no cases");
      for (std::size_t k = 0; k < list->size(); ++k) cases.push_back(parse_case((*list)[k], k));
    } else {
      cases.push_back(parse_case(*list, 0));
    }
  } catch (const SpecError& e) {
    TORCH_CHECK_VALUE(false, source, ": ", one_line(e.what()));
  } catch (const json::exception& e) {
    TORCH_CHECK_VALUE(false, source, ": ", one_line(e.what()));
  }
  return cases;
}

}  // namespace customop::gradcheck
