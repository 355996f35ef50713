// Fuzz target: the validation of the grads a backward formula returns by argument name
// (OpCore::grads_to_flat, ivalue_grads_to_flat, the typed path of Op<Args, Ret>), through a real
// forward + backward (torch::autograd::grad), for an op with Tensor, Tensor?, Tensor[], int
// and float arguments, defined three times, once per way to return grads:
//   customop_fuzz::grads_by_name  customop::Grads (duplicate keys possible)
//   customop_fuzz::grads_dict     a c10::IValue (a dict with str or int keys, or no dict at all)
//   customop_fuzz::grads_typed    a typed aggregate {x, bias, xs}
// The input picks the call (shape, dtype, bias given or None, the length of xs, which inputs
// require grad) and the grads (key sets with unknown, missing, duplicate and non-tensor-arg
// keys; values: Tensor of another shape, dtype or device, None, int, float, str, bool, lists
// of tensors and None of any length, dicts, tuples); all-zero bytes give correct grads.
// Expected: the reference's rules (torch._custom_op.autograd) and the autograd engine's
// (validate_outputs: shapes that sum to the input's, dtypes that convert, the input's device)
// decide whether the grads are valid; valid grads reach the inputs as the engine passes them
// on (summed to the input's shape, converted to its dtype), and invalid ones are refused with
// a c10::Error that starts "In the backward function defined for <op> at ". Anything else
// (another outcome, another exception, a crash, a sanitizer report) is a finding.

#include "fuzz_input.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using customop::fuzz::finding;
using customop::fuzz::FuzzInput;

struct FuzzArgs {
  at::Tensor x;
  std::optional<at::Tensor> bias;
  std::vector<at::Tensor> xs;
  int64_t n;
  double alpha;
};
constexpr const char* kSchemaTail =
    "(Tensor x, Tensor? bias, Tensor[] xs, int n, float alpha) -> Tensor";

struct NoSaved {};
struct TypedGrads {
  at::Tensor x;
  std::optional<at::Tensor> bias;
  std::vector<std::optional<at::Tensor>> xs;
};

at::Tensor forward_cpu(const FuzzArgs& a) {
  at::Tensor out = a.x * a.alpha;
  if (a.bias) out = out + *a.bias;
  for (const auto& t : a.xs) out = out + t;
  return out;
}

enum class Path { kByName, kDict, kTyped };
constexpr const char* kOpNames[] = {"customop_fuzz::grads_by_name", "customop_fuzz::grads_dict",
                                    "customop_fuzz::grads_typed"};

/// What backward returns this time.
struct Plan {
  Path path = Path::kByName;
  std::vector<std::pair<c10::IValue, c10::IValue>> entries;  // by name, dict: key, value
  bool dict_int_keys = false;                                // dict: IntType keys
  std::optional<c10::IValue> not_a_dict;                     // dict: return this instead
  TypedGrads typed;
  int backward_calls = 0;
};
Plan* g_plan = nullptr;  // set around each call; backward runs on the calling thread (CPU)

customop::Grads by_name_grads() {
  ++g_plan->backward_calls;
  customop::Grads grads;
  for (const auto& [k, v] : g_plan->entries) grads.entries().push_back({k.toStringRef(), v});
  return grads;
}

c10::IValue dict_grads() {
  ++g_plan->backward_calls;
  if (g_plan->not_a_dict) return *g_plan->not_a_dict;
  const c10::TypePtr key_type =
      g_plan->dict_int_keys ? c10::TypePtr(c10::IntType::get()) : c10::StringType::get();
  c10::impl::GenericDict d(key_type, c10::AnyType::get());
  for (const auto& [k, v] : g_plan->entries) d.insert_or_assign(k, v);
  return d;
}

TypedGrads typed_grads() {
  ++g_plan->backward_calls;
  return g_plan->typed;
}

template <class B>
customop::Op<FuzzArgs>& define_op(const char* name, B backward) {
  auto& op = customop::define<FuzzArgs>(std::string(name) + kSchemaTail);
  op.impl(c10::DeviceType::CPU, forward_cpu);
  op.impl_save_for_backward([](const FuzzArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward(backward);
  return op;
}

customop::Op<FuzzArgs>& op_for(Path path) {
  static customop::Op<FuzzArgs>* ops[3] = {
      &define_op(kOpNames[0], [](const NoSaved&, const at::Tensor&) { return by_name_grads(); }),
      &define_op(kOpNames[1], [](const NoSaved&, const at::Tensor&) { return dict_grads(); }),
      &define_op(kOpNames[2], [](const NoSaved&, const at::Tensor&) { return typed_grads(); })};
  return *ops[static_cast<int>(path)];
}

// ---- the call and the grads, from the input ------------------------------------------------

struct Call {
  std::vector<int64_t> shape;  // every tensor argument's
  at::ScalarType dtype = at::kDouble;
  FuzzArgs args;
  bool x_grad = true, bias_grad = true;
  std::vector<bool> xs_grad;
};

at::Tensor leaf(const Call& c, bool requires_grad, double value) {
  return at::full(c.shape, value, at::TensorOptions().dtype(c.dtype)).requires_grad_(requires_grad);
}

Call make_call(FuzzInput& in) {
  Call c;
  switch (in.pick(4)) {
    case 1: c.shape = {1}; break;
    case 2: c.shape = {2, 3}; break;
    case 3: c.shape = {}; break;
    default: c.shape = {3}; break;
  }
  c.dtype = in.pick(2) == 0 ? at::kDouble : at::kFloat;
  c.x_grad = !in.one_in(8);
  c.args.x = leaf(c, c.x_grad, 1.0);
  switch (in.pick(3)) {
    case 1: break;  // bias None
    case 2: c.bias_grad = false; [[fallthrough]];
    default: c.args.bias = leaf(c, c.bias_grad, 2.0); break;
  }
  const std::size_t n = (in.pick(4) + 2) % 4;  // choice 0: two tensors
  for (std::size_t k = 0; k < n; ++k) {
    c.xs_grad.push_back(!in.one_in(4));
    c.args.xs.push_back(leaf(c, c.xs_grad.back(), 3.0 + static_cast<double>(k)));
  }
  c.args.n = static_cast<int64_t>(in.byte());
  c.args.alpha = 0.5 * static_cast<double>(in.pick(5));
  return c;
}

/// A grad tensor for an input like `ref`: choice 0 is the correct one.
at::Tensor grad_tensor(FuzzInput& in, const Call& c, const at::Tensor& ref, bool is_x) {
  std::vector<int64_t> shape = ref.sizes().vec();
  const std::size_t shape_kind = in.pick(9);
  switch (shape_kind) {
    case 1: shape = {1}; break;
    case 2: shape.insert(shape.begin(), 2); break;          // sums to the input's shape
    case 3: shape.push_back(shape.empty() ? 2 : 1); break;  // [..., 1]
    case 4: shape = {}; break;
    case 5: shape = {0}; break;
    case 6: shape = {static_cast<int64_t>(ref.numel()) + 1}; break;
    default: break;
  }
  static constexpr at::ScalarType kDtypes[] = {
      at::kDouble, at::kFloat, at::kLong, at::kBool, at::kHalf, at::kBFloat16, at::kComplexDouble};
  const std::size_t dtype_kind = in.pick(std::size(kDtypes) + 1);
  const at::ScalarType dtype = dtype_kind == 0 ? ref.scalar_type() : kDtypes[dtype_kind - 1];
  const bool meta = in.one_in(8);
  const double value = is_x ? c.args.alpha : 1.0;
  at::Tensor g;
  if (shape_kind == 7) {  // non-contiguous: every other element of a longer tensor
    std::vector<int64_t> longer = shape;
    if (longer.empty()) longer = {1};
    longer.back() *= 2;
    g = at::full(longer, value, at::TensorOptions().dtype(at::kDouble))
            .slice(-1, 0, longer.back(), 2)
            .reshape(shape.empty() ? at::IntArrayRef{} : at::IntArrayRef(shape));
  } else if (shape_kind == 8) {  // expanded: stride 0
    g = at::full({}, value, at::TensorOptions().dtype(at::kDouble)).expand(ref.sizes());
  } else {
    g = at::full(shape, value, at::TensorOptions().dtype(at::kDouble));
  }
  g = g.to(dtype);
  if (meta) g = g.to(at::kMeta);
  if (in.one_in(16) && (at::isFloatingType(dtype) || at::isComplexType(dtype))) {
    g = g.detach().requires_grad_(true);
  }
  return g;
}

constexpr const char* kKeys[] = {"x", "bias", "xs", "n", "alpha", "y", "", "X", "x ", "xs[0]"};

c10::IValue any_value(FuzzInput& in, const Call& c, int depth = 0) {
  const at::Tensor& ref = c.args.x;
  switch (in.pick(14)) {
    case 0: return grad_tensor(in, c, ref, true);
    case 1: return c10::IValue();
    case 2: return at::Tensor();
    case 3: return static_cast<int64_t>(in.byte());
    case 4: return 0.5;
    case 5: return std::string(kKeys[in.pick(std::size(kKeys))]);
    case 6: return in.pick(2) == 0;
    case 7: {
      std::vector<at::Tensor> list;
      for (std::size_t k = in.pick(4); k > 0; --k) list.push_back(grad_tensor(in, c, ref, false));
      return list;
    }
    case 8: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (std::size_t k = in.pick(4); k > 0; --k) {
        list.push_back(depth < 2 ? any_value(in, c, depth + 1) : c10::IValue());
      }
      return list;
    }
    case 9: {
      c10::List<std::optional<at::Tensor>> list;
      for (std::size_t k = in.pick(4); k > 0; --k) {
        list.push_back(in.pick(2) == 0 ? std::optional<at::Tensor>(grad_tensor(in, c, ref, false))
                                       : std::nullopt);
      }
      return list;
    }
    case 10: return std::vector<int64_t>(in.pick(3), 1);
    case 11: return c10::impl::GenericList(c10::AnyType::get());
    case 12: {
      c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
      if (depth < 2) d.insert("x", any_value(in, c, depth + 1));
      return d;
    }
    default: return c10::ivalue::Tuple::create({grad_tensor(in, c, ref, true)});
  }
}

/// The correct grads by name, in schema order.
std::vector<std::pair<c10::IValue, c10::IValue>> correct_entries(FuzzInput& in, const Call& c) {
  std::vector<std::pair<c10::IValue, c10::IValue>> entries;
  entries.emplace_back("x", grad_tensor(in, c, c.args.x, true));
  entries.emplace_back(
      "bias", c.args.bias ? c10::IValue(grad_tensor(in, c, *c.args.bias, false)) : c10::IValue());
  switch (in.pick(3)) {
    case 1: {  // a list of Tensor-or-None
      c10::List<std::optional<at::Tensor>> xs;
      for (const auto& t : c.args.xs) {
        xs.push_back(in.one_in(3) ? std::nullopt
                                  : std::optional<at::Tensor>(grad_tensor(in, c, t, false)));
      }
      entries.emplace_back("xs", xs);
      break;
    }
    case 2: {  // a generic list
      c10::impl::GenericList xs(c10::AnyType::get());
      for (const auto& t : c.args.xs) xs.push_back(grad_tensor(in, c, t, false));
      entries.emplace_back("xs", xs);
      break;
    }
    default: {
      std::vector<at::Tensor> xs;
      for (const auto& t : c.args.xs) xs.push_back(grad_tensor(in, c, t, false));
      entries.emplace_back("xs", xs);
      break;
    }
  }
  return entries;
}

Plan make_plan(FuzzInput& in, const Call& c) {
  Plan p;
  p.path = static_cast<Path>(in.pick(3));
  if (p.path == Path::kTyped) {
    p.typed.x = in.one_in(4) ? at::Tensor() : grad_tensor(in, c, c.args.x, true);
    switch (in.pick(3)) {
      case 1: break;
      case 2: p.typed.bias = grad_tensor(in, c, c.args.x, false); break;
      default:
        if (c.args.bias) p.typed.bias = grad_tensor(in, c, *c.args.bias, false);
        break;
    }
    std::size_t n = c.args.xs.size();
    switch (in.pick(4)) {
      case 1: ++n; break;
      case 2: n = n > 0 ? n - 1 : 1; break;
      case 3: n = in.pick(5); break;
      default: break;
    }
    for (std::size_t k = 0; k < n; ++k) {
      const at::Tensor& ref = k < c.args.xs.size() ? c.args.xs[k] : c.args.x;
      p.typed.xs.push_back(
          in.one_in(4) ? std::nullopt : std::optional<at::Tensor>(grad_tensor(in, c, ref, false)));
    }
    return p;
  }
  if (p.path == Path::kDict && in.one_in(16)) {
    p.not_a_dict = any_value(in, c);
    return p;
  }
  p.entries = correct_entries(in, c);
  for (std::size_t m = in.pick(4); m > 0; --m) {
    auto& e = p.entries;
    const std::size_t k = e.empty() ? 0 : in.pick(e.size());
    switch (in.pick(7)) {
      case 0:
        if (!e.empty()) e[k].second = any_value(in, c);
        break;
      case 1:
        if (!e.empty()) e.erase(e.begin() + static_cast<std::ptrdiff_t>(k));
        break;
      case 2:
        if (!e.empty()) e.push_back(e[k]);
        break;
      case 3: {
        std::string key = kKeys[in.pick(std::size(kKeys))];  // NB: before the value
        e.emplace_back(std::move(key), any_value(in, c));
        break;
      }
      case 4:
        if (!e.empty()) e[k].first = std::string(kKeys[in.pick(std::size(kKeys))]);
        break;
      case 5:
        if (!e.empty()) std::rotate(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(k), e.end());
        break;
      default:
        if (p.path == Path::kDict) p.dict_int_keys = true;
        break;
    }
  }
  if (p.dict_int_keys) {
    for (auto& [key, v] : p.entries) key = static_cast<int64_t>(key.toStringRef().size());
  }
  return p;
}

// ---- the expected outcome ------------------------------------------------------------------

/// The grads by argument name, as the reference sees them, or nullopt when they break one of
/// its rules (the key set, the value types, the list lengths, a grad for a None).
std::optional<std::vector<c10::IValue>> reference_view(const Plan& p, const Call& c) {
  std::vector<std::pair<std::string, c10::IValue>> named;
  if (p.path == Path::kTyped) {
    named.emplace_back("x", p.typed.x);
    named.emplace_back("bias", p.typed.bias ? c10::IValue(*p.typed.bias) : c10::IValue());
    c10::List<std::optional<at::Tensor>> xs;
    for (const auto& t : p.typed.xs) xs.push_back(t);
    named.emplace_back("xs", xs);
  } else if (p.path == Path::kDict) {
    if (p.not_a_dict || p.dict_int_keys) return std::nullopt;
    for (const auto& entry : p.entries) {
      const std::string& key = entry.first.toStringRef();
      auto it =
          std::find_if(named.begin(), named.end(), [&](const auto& e) { return e.first == key; });
      if (it == named.end()) {
        named.emplace_back(key, entry.second);
      } else {
        it->second = entry.second;  // insert_or_assign
      }
    }
  } else {
    for (const auto& [k, v] : p.entries) named.emplace_back(k.toStringRef(), v);
  }
  std::set<std::string> keys;
  for (const auto& e : named) {
    if (!keys.insert(e.first).second) return std::nullopt;  // twice
  }
  if (keys != std::set<std::string>{"x", "bias", "xs"}) return std::nullopt;
  std::vector<c10::IValue> out(3);
  for (const auto& [name, v] : named) {
    const bool none = v.isNone() || (v.isTensor() && !v.toTensor().defined());
    if (name == "xs") {
      if (!v.isList() || v.toListRef().size() != c.args.xs.size()) return std::nullopt;
      for (const auto& e : v.toListRef()) {
        if (!e.isNone() && !e.isTensor()) return std::nullopt;
      }
      out[2] = v;
    } else if (!none && !v.isTensor()) {
      return std::nullopt;
    } else if (name == "bias" && !none && !c.args.bias) {
      return std::nullopt;
    } else {
      out[name == "x" ? 0 : 1] = v;
    }
  }
  return out;
}

/// What the autograd engine passes on for grad `g` of input `t` (validate_outputs): `g` summed
/// to the input's shape and converted to its dtype, undefined for no grad, or nullopt when the
/// engine refuses it.
std::optional<at::Tensor> engine_view(const at::Tensor& g, const at::Tensor& t) {
  if (!g.defined()) return at::Tensor();
  at::Tensor r = g;
  if (!g.sizes().equals(t.sizes())) {
    if (!at::is_expandable_to(t.sizes(), g.sizes())) return std::nullopt;
    r = at::sum_to(r, t.sizes());
  }
  if (!at::isFloatingType(r.scalar_type()) &&
      at::isComplexType(r.scalar_type()) != at::isComplexType(t.scalar_type())) {
    return std::nullopt;
  }
  // NB: the engine moves a 0-dim grad to the input's device; only meta grads differ here,
  // which cannot be copied anywhere.
  if (r.device() != t.device()) return std::nullopt;
  return r.to(t.scalar_type());
}

/// What must become of the grads.
struct Expected {
  bool refused = false;  // they break a rule: a refusal naming the op
  // They are valid, but one for an input that does not require grad is a grad the engine
  // would refuse for one that does (it never sees it): refusing them is fine too.
  bool may_refuse = false;
  std::vector<at::Tensor> grads;  // for each input that requires grad, in schema order
};

Expected expected_outcome(const Plan& p, const Call& c) {
  Expected out;
  const auto ref = reference_view(p, c);
  if (!ref) {
    out.refused = true;
    return out;
  }
  const auto add = [&](const at::Tensor& t, bool requires_grad, const c10::IValue& value) {
    const at::Tensor g = value.isTensor() ? value.toTensor() : at::Tensor();
    const auto passed_on = engine_view(g, t);
    if (!requires_grad) {
      out.may_refuse = out.may_refuse || !passed_on;
    } else if (!passed_on) {
      out.refused = true;
    } else {
      out.grads.push_back(*passed_on);
    }
  };
  add(c.args.x, c.x_grad, (*ref)[0]);
  if (c.args.bias) add(*c.args.bias, c.bias_grad, (*ref)[1]);
  const auto& xs = (*ref)[2].toListRef();
  for (std::size_t k = 0; k < c.args.xs.size(); ++k) add(c.args.xs[k], c.xs_grad[k], xs[k]);
  return out;
}

void run(FuzzInput& in) {
  Call c = make_call(in);
  Plan plan = make_plan(in, c);
  customop::Op<FuzzArgs>& op = op_for(plan.path);
  const std::string op_name = kOpNames[static_cast<int>(plan.path)];
  const Expected expected = expected_outcome(plan, c);
  std::vector<at::Tensor> all_inputs;  // every input that requires grad
  if (c.x_grad) all_inputs.push_back(c.args.x);
  if (c.args.bias && c.bias_grad) all_inputs.push_back(*c.args.bias);
  for (std::size_t k = 0; k < c.args.xs.size(); ++k) {
    if (c.xs_grad[k]) all_inputs.push_back(c.args.xs[k]);
  }
  if (all_inputs.empty()) return;  // no graph, no backward

  g_plan = &plan;
  at::Tensor y = op(c.args);  // the forward must succeed
  std::vector<at::Tensor> got;
  std::optional<std::string> error;
  try {
    got = torch::autograd::grad({y.sum()}, all_inputs, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                /*create_graph=*/false, /*allow_unused=*/true);
  } catch (const c10::Error& e) {
    error = e.msg();
  } catch (const std::exception& e) {
    g_plan = nullptr;
    finding(op_name + ": backward threw an exception that is not a c10::Error: " + e.what());
  }
  g_plan = nullptr;
  if (plan.backward_calls != 1) {
    finding(op_name + ": backward ran " + std::to_string(plan.backward_calls) + " times");
  }
  const std::string prefix = "In the backward function defined for " + op_name + " at ";
  if (error) {
    if (error->rfind(prefix, 0) != 0) {
      finding(op_name + ": a refusal that does not start \"" + prefix + "...\": " + *error);
    }
    if (!expected.refused && !expected.may_refuse) {
      finding(op_name + ": valid grads refused: " + *error);
    }
    return;
  }
  if (expected.refused) finding(op_name + ": invalid grads accepted");
  for (std::size_t i = 0; i < all_inputs.size(); ++i) {
    const at::Tensor& e = expected.grads[i];
    const at::Tensor& g = got[i];
    if (e.defined() != g.defined() ||
        (e.defined() &&
         (g.sizes() != all_inputs[i].sizes() || g.scalar_type() != all_inputs[i].scalar_type() ||
          !at::allclose(g.detach(), e.detach())))) {
      finding(op_name + ": input " + std::to_string(i) + " received another grad than returned");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  customop::fuzz::single_threaded_torch();
  FuzzInput in(data, size);
  run(in);
  return 0;
}
