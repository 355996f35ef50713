// Fuzz target: the schema <-> args-struct check of customop::define<Args, Ret>(schema): the
// schema rules of the reference and the field count, types, names and default member
// initializers of a few fixed args structs against the schema (OpCore's constructor, then
// check_struct_defaults, as Op<Args, Ret>'s constructor runs them), without registering the op
// with the dispatcher, so every input starts from the same state.
// Input: byte 0 picks the args struct and Ret (kShapes); byte 1 the mode:
//   'r'  the rest of the input is the schema text, as it is;
//   'i'  the rest is the name given to define<Args>("ns::name"): the schema is inferred from
//        the struct (detail::infer_schema), then checked like an explicit one;
//   else a schema built from the struct's canonical one with the mutations the following
//        bytes pick (types, names, defaults, alias annotations, order, count, returns, raw
//        fragments); all-zero bytes give the canonical schema.
// Expected: accepted, or refused with a c10::Error whose message starts with the op's name
// when the schema parses (every refusal names the op) and says that it does not parse
// otherwise. An accepted schema matches the struct argument for argument (name and kind),
// returns Ret's kinds, keeps the reference's rules, and has the struct's non-zero member
// initializers as its defaults; an inferred schema with a plain "ns::name" is always accepted.
// Anything else (another exception, a crash, a sanitizer report) is a finding.

#include "fuzz_input.h"

#include <customop/op.h>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace {

using customop::ArgKind;
using customop::fuzz::finding;
using customop::fuzz::FuzzInput;

// ---- the fixed args structs --------------------------------------------------------------

// Every argument kind; the ones with a default come last, so the inferred schema is valid.
struct AllKinds {
  at::Tensor input;
  std::vector<at::Tensor> others;
  std::vector<double> weights;
  c10::ScalarType dtype;
  std::optional<at::Tensor> mask;
  int64_t dim = -1;
  std::optional<int64_t> k;
  double eps = 1e-6;
  std::optional<double> scale;
  bool keepdim = true;
  std::optional<bool> flag;
  std::string mode = "none";
  std::optional<std::string> name;
  std::vector<int64_t> sizes = {2, 3};
  std::vector<bool> which = {true, false};
  c10::Scalar alpha = 2;
  std::optional<c10::Scalar> beta;
  std::optional<c10::ScalarType> out_dtype;
};
struct XArgs {
  at::Tensor x;
};
struct ScaleArgs {  // the README's example
  at::Tensor x;
  double alpha = 1.0;
};
struct NoArgs {};

/// One argument of a canonical schema: "<type> <name>[=<default>]".
struct ArgText {
  std::string type, name, dflt;  // dflt: "" or "=<value>"
};

/// An args struct and a Ret, the schema that matches them, and the check of a schema text.
struct Shape {
  std::vector<ArgText> args;
  std::string returns;
  bool (*check)(std::string_view schema);       // true when accepted
  std::string (*infer)(std::string_view name);  // "" when refused
};

// ---- the check under test, without the dispatcher ------------------------------------------

/// An OpCore that is never registered: its constructor is define()'s schema check.
class SchemaProbe final : public customop::OpCore {
 public:
  SchemaProbe(std::string_view schema, std::span<const customop::detail::FieldInfo> fields,
              std::span<const ArgKind> return_kinds)
      : OpCore(schema, fields, return_kinds, std::source_location::current()) {}
  using OpCore::check_struct_defaults;

 private:
  c10::intrusive_ptr<customop::detail::SavedStateBase> save_boxed(
      torch::jit::Stack&, const torch::jit::Stack&, std::vector<at::Tensor>&) override {
    finding("save_boxed called on an op that was never registered");
  }
  void backward_boxed(customop::detail::SavedStateBase&, const std::vector<at::Tensor>&,
                      std::vector<at::Tensor>&, std::vector<at::Tensor>&) override {
    finding("backward_boxed called on an op that was never registered");
  }
  void jvp_boxed(torch::jit::Stack&, torch::jit::Stack&, const torch::jit::Stack&,
                 torch::jit::Stack&) override {
    finding("jvp_boxed called on an op that was never registered");
  }
};

// 0, 0.0, false, "", an empty list, None: a field without a member initializer (op_schema.cpp).
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

/// What an accepted schema must be: the struct's arguments, Ret's returns, the reference's rules
/// and the struct's defaults.
template <class Args, class Ret>
void check_accepted(const SchemaProbe& probe, std::string_view text) {
  const auto fields = customop::detail::field_infos<Args>();
  const auto& rets = customop::detail::ReturnKinds<customop::detail::ReturnTupleT<Ret>>::value;
  const std::string what = "accepted \"" + std::string(text) + "\" ";
  if (probe.args().size() != fields.size()) finding(what + "with a different argument count");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (probe.args()[i].name != fields[i].name || probe.args()[i].kind != fields[i].kind) {
      finding(what + "although argument " + std::to_string(i) + " is " + probe.args()[i].type +
              " " + probe.args()[i].name + " and the field " + std::string(fields[i].cpp_name) +
              " " + std::string(fields[i].name));
    }
  }
  if (probe.returns().size() != rets.size() ||
      !std::equal(rets.begin(), rets.end(), probe.returns().begin())) {
    finding(what + "with returns that are not Ret's");
  }
  const auto& schema = probe.schema();
  const auto sep = probe.name().find("::");
  static constexpr std::string_view kReserved[] = {"prim", "prims", "aten",
                                                   "at",   "torch", "pytorch"};
  if (sep == std::string::npos || sep == 0 || sep + 2 >= probe.name().size() ||
      std::find(std::begin(kReserved), std::end(kReserved), probe.name().substr(0, sep)) !=
          std::end(kReserved) ||
      !schema.overload_name().empty() || schema.returns().empty() || schema.is_mutable()) {
    finding(what + "against the reference's rules (name, overload, returns, mutation)");
  }
  for (const auto& a : schema.arguments()) {
    if (a.name() == "self" || (a.alias_info() != nullptr && a.alias_info()->isWrite())) {
      finding(what + "with an argument named self or written to");
    }
  }
  for (const auto& r : schema.returns()) {
    if (r.alias_info() != nullptr) finding(what + "with a return that aliases an input");
  }
  const torch::jit::Stack initialized = customop::Op<Args, Ret>::to_stack(Args{});
  for (std::size_t i = 0; i < initialized.size(); ++i) {
    if (zero_like(initialized[i])) continue;
    const auto& dflt = schema.arguments()[i].default_value();
    if (!dflt || !(*dflt == initialized[i])) {
      finding(what + "although argument " + std::string(fields[i].name) +
              " has another default than the struct's member initializer");
    }
  }
}

/// torch's own parse of `text` (as parse_or_throw in op_schema.cpp does it), or nullopt. NB: not
/// for text with many parentheses, which can overflow the stack in torch's parser (op_schema.cpp
/// refuses more than 32 levels before parsing).
std::optional<c10::FunctionSchema> parse(std::string_view text) {
  if (std::count(text.begin(), text.end(), '(') > 32) return std::nullopt;
  try {
    return torch::jit::parseSchema(std::string(text), /*allow_typevars=*/false);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// The message of a refusal must say which op (or that the text does not parse).
void check_refusal(std::string_view text, const c10::Error& e) {
  const std::string& msg = e.msg();
  const std::optional<c10::FunctionSchema> parsed = parse(text);
  if (parsed) {
    if (msg.rfind(parsed->name(), 0) != 0) {
      finding("the refusal of \"" + std::string(text) + "\" does not start with the op's name '" +
              parsed->name() + "': " + msg);
    }
  } else if (msg.find("the schema does not parse") == std::string::npos &&
             msg.find("contains a '.'") == std::string::npos &&
             msg.find("the schema nests parentheses") == std::string::npos) {
    finding("the refusal of the unparsable \"" + std::string(text) +
            "\" does not say it does not parse: " + msg);
  }
}

template <class Args, class Ret>
bool check_schema(std::string_view text) {
  static constexpr auto kFields = customop::detail::field_infos<Args>();
  const auto& rets = customop::detail::ReturnKinds<customop::detail::ReturnTupleT<Ret>>::value;
  try {
    // As Op<Args, Ret>'s constructor: OpCore's checks, then the struct's defaults.
    SchemaProbe probe(text, kFields, rets);
    probe.check_struct_defaults(customop::Op<Args, Ret>::to_stack(Args{}));
    check_accepted<Args, Ret>(probe, text);
    return true;
  } catch (const c10::Error& e) {
    check_refusal(text, e);
  } catch (const std::exception& e) {
    finding("\"" + std::string(text) +
            "\" threw an exception that is not a c10::Error: " + e.what());
  }
  return false;
}

bool identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

/// A plain, unreserved "ns::name": customop must accept the schema inferred with it (unless
/// torch's parser refuses it: a TorchScript keyword such as "as" or "in" is no identifier
/// there).
bool plain_name(std::string_view name) {
  static constexpr std::string_view kReserved[] = {"prim", "prims", "aten",
                                                   "at",   "torch", "pytorch"};
  const auto sep = name.find("::");
  return sep != std::string_view::npos && identifier(name.substr(0, sep)) &&
         identifier(name.substr(sep + 2)) &&
         std::find(std::begin(kReserved), std::end(kReserved), name.substr(0, sep)) ==
             std::end(kReserved);
}

/// define<Args>("ns::name"): the inferred schema, or "" after checking the name's refusal.
template <class Args, class Ret>
std::string infer(std::string_view name) {
  const auto rets = customop::detail::ReturnKinds<customop::detail::ReturnTupleT<Ret>>::value;
  std::string schema;
  try {
    schema = customop::detail::infer_schema(name, customop::detail::field_infos<Args>(),
                                            customop::Op<Args, Ret>::to_stack(Args{}), rets);
  } catch (const c10::Error& e) {
    const std::string msg = e.msg();
    if (msg.rfind(std::string(name), 0) != 0) {
      finding("the refusal to infer a schema for '" + std::string(name) +
              "' does not start with that name: " + msg);
    }
    return {};
  } catch (const std::exception& e) {
    finding("infer_schema threw an exception that is not a c10::Error: " + std::string(e.what()));
  }
  return schema;
}

const Shape kShapes[] = {
    {{{"Tensor", "input", ""},
      {"Tensor[]", "others", ""},
      {"float[]", "weights", ""},
      {"ScalarType", "dtype", ""},
      {"Tensor?", "mask", "=None"},
      {"int", "dim", "=-1"},
      {"int?", "k", "=None"},
      {"float", "eps", "=1e-06"},
      {"float?", "scale", "=None"},
      {"bool", "keepdim", "=True"},
      {"bool?", "flag", "=None"},
      {"str", "mode", "=\"none\""},
      {"str?", "name", "=None"},
      {"int[]", "sizes", "=[2, 3]"},
      {"bool[]", "which", "=[True, False]"},
      {"Scalar", "alpha", "=2"},
      {"Scalar?", "beta", "=None"},
      {"ScalarType?", "out_dtype", "=None"}},
     "Tensor",
     check_schema<AllKinds, at::Tensor>,
     infer<AllKinds, at::Tensor>},
    {{{"Tensor", "x", ""}}, "Tensor", check_schema<XArgs, at::Tensor>, infer<XArgs, at::Tensor>},
    {{{"Tensor", "x", ""}},
     "(Tensor, Tensor)",
     check_schema<XArgs, std::tuple<at::Tensor, at::Tensor>>,
     infer<XArgs, std::tuple<at::Tensor, at::Tensor>>},
    {{{"Tensor", "x", ""}},
     "Tensor[]",
     check_schema<XArgs, std::vector<at::Tensor>>,
     infer<XArgs, std::vector<at::Tensor>>},
    {{{"Tensor", "x", ""}, {"float", "alpha", "=1.0"}},
     "Tensor",
     check_schema<ScaleArgs, at::Tensor>,
     infer<ScaleArgs, at::Tensor>},
    {{},
     "(Tensor, int, float, bool)",
     check_schema<NoArgs, std::tuple<at::Tensor, int64_t, double, bool>>,
     infer<NoArgs, std::tuple<at::Tensor, int64_t, double, bool>>},
};

// ---- the structured schema -------------------------------------------------------------------

constexpr std::string_view kNamespaces[] = {"fuzz",  "customop_fuzz", "aten",  "a.b", "",
                                            "torch", "prim",          "my ns", "1ns", "_"};
constexpr std::string_view kOpNames[] = {"op", "op.overload", "", "self", "op_2", "op::op"};
constexpr std::string_view kTypes[] = {"Tensor",
                                       "Tensor?",
                                       "Tensor[]",
                                       "int",
                                       "int?",
                                       "float",
                                       "float?",
                                       "bool",
                                       "bool?",
                                       "str",
                                       "str?",
                                       "int[]",
                                       "float[]",
                                       "bool[]",
                                       "Scalar",
                                       "Scalar?",
                                       "ScalarType",
                                       "ScalarType?",
                                       "Tensor(a)",
                                       "Tensor(a!)",
                                       "Tensor(a -> *)",
                                       "Tensor?[]",
                                       "int[2]",
                                       "SymInt",
                                       "SymInt[]",
                                       "Device",
                                       "Layout",
                                       "MemoryFormat",
                                       "Dict(str, Tensor)",
                                       "Any",
                                       "t",
                                       "Generator?",
                                       "Tensor[]?",
                                       "float[]?",
                                       "str[]",
                                       "complex",
                                       "bool[3]",
                                       "Dimname",
                                       "int?[]",
                                       "Tensor(a!)[]",
                                       "Tensor!"};
constexpr std::string_view kArgNames[] = {
    "x",     "input", "others", "weights", "dtype",     "mask", "dim",
    "k",     "eps",   "scale",  "keepdim", "flag",      "mode", "name",
    "sizes", "which", "alpha",  "beta",    "out_dtype", "self", "out",
    "",      "x y",   "1x",     "__x",     "Tensor",    "None", "*"};
constexpr std::string_view kDefaults[] = {"",
                                          "=None",
                                          "=0",
                                          "=1",
                                          "=-1",
                                          "=1.0",
                                          "=1e-06",
                                          "=1e-6",
                                          "=0.2",
                                          "=inf",
                                          "=-inf",
                                          "=nan",
                                          "=True",
                                          "=False",
                                          "=\"none\"",
                                          "=\"\"",
                                          "=[]",
                                          "=[2, 3]",
                                          "=[True, False]",
                                          "=2",
                                          "=[1.5]",
                                          "=long",
                                          "=contiguous_format",
                                          "=cpu",
                                          "=9223372036854775807",
                                          "=9223372036854775808",
                                          "=1e309",
                                          "=[None]",
                                          "=\"\\\"\"",
                                          "=0x10",
                                          "=[2,3]",
                                          "=2.",
                                          "=.5",
                                          "=-0.0",
                                          "='none'",
                                          "=[2, 3, 4]",
                                          "=[True]",
                                          "=3",
                                          "=-2",
                                          "=float32"};
constexpr std::string_view kReturnTexts[] = {"Tensor",
                                             "(Tensor, Tensor)",
                                             "Tensor[]",
                                             "int",
                                             "float",
                                             "bool",
                                             "()",
                                             "Tensor(a)",
                                             "Tensor(a!)",
                                             "str",
                                             "(Tensor a, Tensor b)",
                                             "Tensor?",
                                             "Scalar",
                                             "(Tensor, int, float, bool)",
                                             "(Tensor, Tensor[])",
                                             "Tensor(a)[]",
                                             "(Tensor(a), Tensor)",
                                             "None",
                                             "(Tensor)",
                                             "int[]"};

template <std::size_t N>
std::string pick(FuzzInput& in, const std::string_view (&options)[N]) {
  return std::string(options[in.pick(N)]);
}

std::string structured_schema(FuzzInput& in, const Shape& shape) {
  std::string text;
  // Name: choice 0 everywhere is "fuzz::op".
  switch (in.pick(8)) {
    // NB: one read of `in` per statement here and below: the operands of + and the arguments
    // of a call are unsequenced, and GCC and clang would read an input differently.
    case 1:
      text = pick(in, kNamespaces);
      text += "::";
      text += pick(in, kOpNames);
      break;
    case 2: text = in.string(16); break;
    case 3: text = "fuzz" + pick(in, kOpNames); break;  // no "::"
    default: text = "fuzz::op"; break;
  }
  std::vector<ArgText> args = shape.args;
  switch (in.pick(8)) {
    case 1:
      if (!args.empty()) args.pop_back();
      break;
    case 2: {
      ArgText extra;
      extra.type = pick(in, kTypes);
      extra.name = pick(in, kArgNames);
      extra.dflt = pick(in, kDefaults);
      args.push_back(extra);
      break;
    }
    case 3: {
      const std::size_t n = in.pick(args.size() + 3);
      args.resize(n, {pick(in, kTypes), "extra", ""});
      break;
    }
    default: break;
  }
  std::string list;
  for (std::size_t i = 0; i < args.size(); ++i) {
    ArgText a = args[i];
    switch (in.pick(16)) {
      case 1: a.type = pick(in, kTypes); break;
      case 2: a.name = pick(in, kArgNames); break;
      case 3: a.dflt = pick(in, kDefaults); break;
      case 4: a.dflt.clear(); break;
      case 5:
        if (i + 1 < args.size()) std::swap(a, args[i + 1]);
        break;
      case 6: a = {in.string(24), "", ""}; break;
      case 7: a.type += in.one_in(2) ? "(a!)" : "(a)"; break;
      case 8: list += (list.empty() ? "" : ", ") + std::string("*"); break;
      case 9:
        a.type = pick(in, kTypes);
        a.name = pick(in, kArgNames);
        a.dflt = pick(in, kDefaults);
        break;
      default: break;
    }
    list += (list.empty() ? "" : ", ") + a.type + (a.name.empty() ? "" : " " + a.name) + a.dflt;
  }
  text += "(" + list + ")";
  switch (in.pick(8)) {
    case 1: text += " -> " + pick(in, kReturnTexts); break;
    case 2: text += in.string(16); break;
    case 3: break;  // no returns at all
    default: text += " -> " + shape.returns; break;
  }
  if (in.one_in(16)) text += in.rest();
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  customop::fuzz::single_threaded_torch();
  FuzzInput in(data, size);
  const Shape& shape = kShapes[in.pick(std::size(kShapes))];
  switch (in.byte()) {
    case 'r': shape.check(in.rest()); break;
    case 'i': {
      // define() infers only from a name without an argument list.
      const std::string_view name = in.rest();
      if (name.find('(') != std::string_view::npos) {
        shape.check(name);
      } else if (const std::string schema = shape.infer(name); !schema.empty()) {
        if (!shape.check(schema) && plain_name(name) && parse(schema)) {
          finding("the schema inferred for '" + std::string(name) + "', \"" + schema +
                  "\", is refused");
        }
      }
      break;
    }
    default: shape.check(structured_schema(in, shape)); break;
  }
  return 0;
}
