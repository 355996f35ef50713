// customop_gradcheck::check: the gradcheck library as a dispatcher op, so that Python
// (customop.gradcheck.check) runs it on any dispatcher op, including ops defined in Python with
// torch.library.custom_op. Loaded by the Python package (libcustomop_gradcheck_ops.so).
//
//   customop_gradcheck::check(str op, Tensor[] tensors, str args, str options) -> str
//
// op: "ns::name" or "ns::name.overload". args: a JSON list with one entry per schema argument:
// {"tensor": k} (tensors[k]), {"tensors": [k, ...]} (a Tensor[]), null (None), or a literal
// (number, bool, string, list of numbers or bools). options: a JSON object of GradcheckOptions
// fields (mode "slow"/"fast", eps, atol, rtol, nondet_tol, seed, check_* flags,
// max_jacobian_entries, input_subsets, label) and the names the report uses ("name",
// "arg_names", "return_names"). Returns the report as JSON (report.h, to_json); errors the op
// raises are failed checks in it.
// Throws c10::ValueError naming the op and the argument when args or options do not fit.

#include "detail/op_checks.h"

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>
#include <customop/op_core.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <nlohmann/json.hpp>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace customop::gradcheck {
namespace {

using json = nlohmann::json;

c10::IValue literal(const json& j, const c10::TypePtr& type, const std::string& where) {
  if (j.is_null()) return {};
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  try {
    switch (t->kind()) {
      case c10::TypeKind::IntType:
        // NB: a float (2.5) is refused below, not truncated as json's get<int64_t> would.
        if (!j.is_number_integer()) break;
        return j.get<int64_t>();
      case c10::TypeKind::FloatType: return j.get<double>();
      case c10::TypeKind::BoolType: return j.get<bool>();
      case c10::TypeKind::StringType: return j.get<std::string>();
      case c10::TypeKind::NumberType:
        return j.is_number_integer() ? c10::IValue(j.get<int64_t>()) : c10::IValue(j.get<double>());
      case c10::TypeKind::ListType: {
        const auto elem = t->castRaw<c10::ListType>()->getElementType()->kind();
        if (elem == c10::TypeKind::IntType) {
          if (!j.is_array() ||
              !std::all_of(j.begin(), j.end(), [](const json& e) { return e.is_number_integer(); }))
            break;
          return j.get<std::vector<int64_t>>();
        }
        if (elem == c10::TypeKind::FloatType) return j.get<std::vector<double>>();
        if (elem == c10::TypeKind::BoolType) {
          c10::List<bool> list;
          for (const auto& b : j) list.push_back(b.get<bool>());
          return list;
        }
        break;
      }
      default: break;
    }
  } catch (const json::exception&) {
    // fall through to the error below
  }
  TORCH_CHECK_VALUE(false, where, ": expected a value of type ", type->str(), ", got ", j.dump());
}

c10::IValue argument(const json& j, const c10::Argument& a, const std::vector<at::Tensor>& tensors,
                     const std::string& op) {
  const std::string where = "customop.gradcheck.check(" + op + "): argument '" + a.name() + "'";
  auto tensor_at = [&](const json& k) {
    TORCH_CHECK_VALUE(
        k.is_number_integer() && k.get<int64_t>() >= 0 && k.get<std::size_t>() < tensors.size(),
        where, ": tensor index ", k.dump(), " out of range (", tensors.size(), " tensors)");
    return tensors[k.get<std::size_t>()];
  };
  if (j.is_object() && j.contains("tensor")) return tensor_at(j["tensor"]);
  if (j.is_object() && j.contains("tensors")) {
    std::vector<at::Tensor> list;
    for (const auto& k : j["tensors"]) list.push_back(tensor_at(k));
    return list;
  }
  return literal(j, a.type(), where);
}

// The boolean GradcheckOptions fields, by their option name.
const std::map<std::string, bool GradcheckOptions::*> kFlags = {
    {"check_undefined_grad", &GradcheckOptions::check_undefined_grad},
    {"check_grad_output_scaling", &GradcheckOptions::check_grad_output_scaling},
    {"check_grad_metadata", &GradcheckOptions::check_grad_metadata},
    {"check_forward_grad_mode", &GradcheckOptions::check_forward_grad_mode},
    {"detect_nondifferentiable", &GradcheckOptions::detect_nondifferentiable},
    {"check_cuda_against_cpu", &GradcheckOptions::check_cuda_against_cpu},
    {"check_second_order", &GradcheckOptions::check_second_order},
    {"check_fake_kernel", &GradcheckOptions::check_fake_kernel},
    {"check_mutation", &GradcheckOptions::check_mutation},
    {"check_out_variant", &GradcheckOptions::check_out_variant},
    {"check_inplace_variant", &GradcheckOptions::check_inplace_variant},
    {"check_layout_variants", &GradcheckOptions::check_layout_variants},
    {"check_backward_precision", &GradcheckOptions::check_backward_precision},
};

/// What the report calls the function and its arguments and returns (options "name",
/// "arg_names", "return_names"; the schema's where absent): a Python callable checked through
/// a generated op keeps its own names.
struct Names {
  std::string name;
  std::vector<std::string> args, returns;
  std::string reference;  // "reference": an op for the float16/bfloat16 rule
};

GradcheckOptions options_from_json(const std::string& text, const std::string& op, Names& names) {
  GradcheckOptions o;
  // Python runs its own torch.func check (customop/_transforms_check.py: jacrev, jacfwd and
  // hessian besides what the C++ one runs); "check_transforms" is that check's option.
  o.check_transforms = false;
  const json j = json::parse(text);
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "name") {
      names.name = v.get<std::string>();
    } else if (key == "arg_names") {
      names.args = v.get<std::vector<std::string>>();
    } else if (key == "return_names") {
      names.returns = v.get<std::vector<std::string>>();
    } else if (auto f = kFlags.find(key); f != kFlags.end()) {
      o.*(f->second) = v.get<bool>();
    } else if (key == "mode") {
      const auto m = v.get<std::string>();
      TORCH_CHECK_VALUE(m == "slow" || m == "fast", "customop.gradcheck.check(", op,
                        "): mode must be \"slow\" or \"fast\", got \"", m, "\"");
      o.mode = m == "fast" ? Mode::kFast : Mode::kSlow;
    } else if (key == "eps") {
      o.eps = v.get<double>();
    } else if (key == "atol") {
      o.atol = v.get<double>();
    } else if (key == "rtol") {
      o.rtol = v.get<double>();
    } else if (key == "nondet_tol") {
      o.nondet_tol = v.get<double>();
    } else if (key == "backward_roundoff") {
      o.backward_roundoff = v.get<double>();
    } else if (key == "seed") {
      o.seed = v.get<std::uint64_t>();
    } else if (key == "max_jacobian_entries") {
      o.max_jacobian_entries = v.get<std::int64_t>();
    } else if (key == "input_subsets") {
      const auto m = v.get<std::string>();
      TORCH_CHECK_VALUE(m == "none" || m == "singles" || m == "singles-and-complements",
                        "customop.gradcheck.check(", op,
                        "): input_subsets must be \"none\", \"singles\" or "
                        "\"singles-and-complements\", got \"",
                        m, "\"");
      o.input_subsets = m == "none"      ? InputSubsets::kNone
                        : m == "singles" ? InputSubsets::kEachAlone
                                         : InputSubsets::kEachAloneAndAllButOne;
    } else if (key == "label") {
      o.label = v.get<std::string>();
    } else if (key == "reference") {
      names.reference = v.get<std::string>();
    } else {
      TORCH_CHECK_VALUE(false, "customop.gradcheck.check(", op, "): unknown option '", key, "'");
    }
  }
  o.raise_exception = false;
  return o;
}

std::string check(c10::string_view op_view, const std::vector<at::Tensor>& tensors,
                  c10::string_view args_view, c10::string_view options_view) {
  const std::string op(op_view);
  const auto dot = op.find('.');
  const std::string name = op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK_VALUE(handle.has_value(), "customop.gradcheck.check: no op '", op,
                    "' is registered with the dispatcher");
  const auto& schema = handle->schema();
  json args;
  try {
    args = json::parse(std::string(args_view));
    Names names;
    GradcheckOptions options = options_from_json(std::string(options_view), op, names);
    TORCH_CHECK_VALUE(args.is_array() && args.size() == schema.arguments().size(),
                      "customop.gradcheck.check(", op, "): expected ", schema.arguments().size(),
                      " arguments (", schema, "), got ", args.size());
    torch::jit::Stack stack;
    for (std::size_t i = 0; i < args.size(); ++i) {
      stack.push_back(argument(args[i], schema.arguments()[i], tensors, op));
    }
    BoxedFunction fn;
    fn.name = names.name.empty() ? op : names.name;
    for (const auto& a : schema.arguments()) fn.arg_names.push_back(a.name());
    for (const auto& r : schema.returns()) fn.return_names.push_back(r.name());
    if (!names.args.empty()) fn.arg_names = names.args;
    if (!names.returns.empty()) fn.return_names = names.returns;
    fn.call = [h = *handle](torch::jit::Stack& s) { h.callBoxed(s); };
    fn.call_cpu = fn.call;
    // The float16/bfloat16 rule's reference: the one named, else a customop op's declared one.
    if (!names.reference.empty()) {
      const auto rdot = names.reference.find('.');
      const auto ref = c10::Dispatcher::singleton().findSchema(
          {names.reference.substr(0, rdot),
           rdot == std::string::npos ? "" : names.reference.substr(rdot + 1)});
      TORCH_CHECK_VALUE(ref.has_value(), "customop.gradcheck.check(", op, "): reference '",
                        names.reference, "' is not a registered op");
      TORCH_CHECK_VALUE(ref->schema().arguments().size() == schema.arguments().size() &&
                            ref->schema().returns().size() == schema.returns().size(),
                        "customop.gradcheck.check(", op, "): reference ", ref->schema(),
                        " does not take the arguments and returns of ", schema);
      fn.reference = [h = *ref](torch::jit::Stack& s) { h.callBoxed(s); };
      fn.reference_name = names.reference;
    } else if (const OpCore* core = overload.empty() ? find_op(name) : nullptr;
               core != nullptr && core->has_reference()) {
      fn.reference = [core](torch::jit::Stack& s) { core->reference()(&s); };
      fn.reference_name = name + "'s reference";
    }
    return to_json(detail::with_op_checks(*handle, stack, options, [&](const GradcheckOptions& o) {
      return gradcheck(fn, stack, o);
    }));
  } catch (const json::exception& e) {
    TORCH_CHECK_VALUE(false, "customop.gradcheck.check(", op, "): ", e.what());
  }
}

// Python's C API, resolved from the interpreter that loads this library (it is only loaded
// from Python); weak, so that the library links without libpython.
extern "C" {
struct _object;  // PyObject
using PyObj = _object;
int PyGILState_Ensure() __attribute__((weak));
void PyGILState_Release(int) __attribute__((weak));
PyObj* PyErr_Occurred() __attribute__((weak));
void PyErr_Fetch(PyObj**, PyObj**, PyObj**) __attribute__((weak));
void PyErr_NormalizeException(PyObj**, PyObj**, PyObj**) __attribute__((weak));
void PyErr_Clear() __attribute__((weak));
int PyException_SetTraceback(PyObj*, PyObj*) __attribute__((weak));
PyObj* PyImport_ImportModule(const char*) __attribute__((weak));
PyObj* PyObject_GetAttrString(PyObj*, const char*) __attribute__((weak));
PyObj* PyObject_CallFunctionObjArgs(PyObj*, ...) __attribute__((weak));
const char* PyUnicode_AsUTF8(PyObj*) __attribute__((weak));
void Py_DecRef(PyObj*) __attribute__((weak));
}

/// The caught-error hook. torch's Python autograd engine rethrows a Python backward's error to
/// C++ with the Python error still set (python_error::restore), and Python would answer the
/// check's next call into it, or its return, with "SystemError: ... returned a result with an
/// exception set". The error is taken off the interpreter here, and described by
/// customop._errors.describe: its type and the line that raised it, which the C++ message
/// lacks.
std::string take_python_error() {
  const int gil = PyGILState_Ensure();
  std::string out;
  if (PyErr_Occurred() != nullptr) {
    PyObj *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    if (value != nullptr && trace != nullptr) PyException_SetTraceback(value, trace);
    PyObj* module = value != nullptr ? PyImport_ImportModule("customop._errors") : nullptr;
    PyObj* describe = module != nullptr ? PyObject_GetAttrString(module, "describe") : nullptr;
    PyObj* text =
        describe != nullptr ? PyObject_CallFunctionObjArgs(describe, value, nullptr) : nullptr;
    const char* utf8 = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
    if (utf8 != nullptr) out = utf8;
    for (PyObj* o : {text, describe, module, trace, value, type}) {
      if (o != nullptr) Py_DecRef(o);
    }
    PyErr_Clear();  // what describing it may have raised
  }
  PyGILState_Release(gil);
  return out;
}

[[maybe_unused]] const bool kHookSet = [] {
  const bool python = PyGILState_Ensure != nullptr && PyErr_Fetch != nullptr &&
                      PyObject_CallFunctionObjArgs != nullptr && Py_DecRef != nullptr;
  if (python) set_caught_error_hook(&take_python_error);
  return true;
}();

}  // namespace

TORCH_LIBRARY(customop_gradcheck, m) {
  m.def("check(str op, Tensor[] tensors, str args, str options) -> str", &check);
}

}  // namespace customop::gradcheck
