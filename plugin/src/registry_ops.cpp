// The registry for Python, as dispatcher ops (no Python binding needed: any process that loaded
// libcustomop.so has them):
//   customop_registry::sharding_rules() -> str             every op's sharding rule (JSON)
//   customop_registry::samples(str op, str device, ScalarType dtype) -> (str, Tensor[])
//       an op's registered samples: JSON [{"label", "args": [value]}] beside their tensors,
//       a value being {"tensor": k}, {"tensors": [k, ...]}, null, a bool, int, float, string,
//       or a list of those.

#include <customop/op_core.h>
#include <customop/sharding.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

namespace customop {
namespace {

nlohmann::json encode(const c10::IValue& v, std::vector<at::Tensor>& tensors,
                      const std::string& where) {
  if (v.isNone()) return nullptr;
  if (v.isTensor()) {
    tensors.push_back(v.toTensor());
    return {{"tensor", tensors.size() - 1}};
  }
  if (v.isTensorList()) {
    std::vector<size_t> ks;
    for (const at::Tensor& t : v.toTensorVector()) {
      tensors.push_back(t);
      ks.push_back(tensors.size() - 1);
    }
    return {{"tensors", ks}};
  }
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isString()) return v.toStringRef();
  if (v.isList()) {
    nlohmann::json out = nlohmann::json::array();
    for (const c10::IValue& x : v.toListRef()) out.push_back(encode(x, tensors, where));
    return out;
  }
  TORCH_CHECK_TYPE(false, where, ": a sample value of type ", v.tagKind(),
                   " cannot be passed to Python");
}

std::tuple<std::string, std::vector<at::Tensor>> samples(const std::string& op,
                                                         const std::string& device,
                                                         at::ScalarType dtype) {
  const OpCore* core = find_op(op);
  TORCH_CHECK_VALUE(core != nullptr, "customop_registry::samples: no customop op is called '", op,
                    "' (ops are named \"ns::name\")");
  nlohmann::json out = nlohmann::json::array();
  std::vector<at::Tensor> tensors;
  for (const Sample& s : core->samples(c10::Device(device), dtype)) {
    nlohmann::json args = nlohmann::json::array();
    for (const c10::IValue& v : s.args)
      args.push_back(encode(v, tensors, op + " (" + s.label + ")"));
    out.push_back({{"label", s.label}, {"args", args}});
  }
  return {out.dump(), tensors};
}

TORCH_LIBRARY(customop_registry, m) {
  m.def("sharding_rules() -> str", [] { return sharding_rules_json(); });
  m.def("samples(str op, str device, ScalarType dtype) -> (str, Tensor[])", &samples);
}

}  // namespace
}  // namespace customop
