// Validating the grads a backward formula returns, by argument name, with the reference's
// checks, messages and order (customop::Grads and a c10::IValue dict; a typed grads struct
// arrives here as Grads).

#include "op_core_internal.h"

#include <c10/util/Exception.h>

#include <set>
#include <string>

namespace customop {

namespace detail {

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

}  // namespace detail

using detail::ivalue_type_name;

namespace {

std::string join_keys(const std::set<std::string>& keys) {
  std::string out = "{";
  bool first = true;
  for (const auto& k : keys) {
    out += (first ? "'" : ", '") + k + "'";
    first = false;
  }
  return out + "}";
}

}  // namespace

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
    // A Tensor? that was None is no input of the autograd Node: it takes no grad slot.
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

}  // namespace customop
