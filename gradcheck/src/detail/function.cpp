#include "detail/function.h"

#include "detail/draws.h"
#include "detail/values.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>

namespace customop::gradcheck::detail {

namespace {

bool is_differentiable_tensor(const at::Tensor& t) {
  return t.defined() && at::isFloatingType(t.scalar_type()) && t.requires_grad();
}

at::Tensor convert(const at::Tensor& t, bool to_double, const std::optional<c10::Device>& device) {
  if (!t.defined()) return t;
  at::Tensor out = t;
  if (to_double && at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kDouble) {
    out = clone_like(out, at::kDouble);
  }
  if (device.has_value() && out.device() != *device) out = out.detach().to(*device);
  return out;
}

}  // namespace

std::vector<Slot> find_slots(const torch::jit::Stack& args,
                             const std::vector<std::string>& arg_names) {
  std::vector<Slot> slots;
  auto name_of = [&](std::size_t i) {
    return i < arg_names.size() && !arg_names[i].empty() ? arg_names[i] : "arg" + std::to_string(i);
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& v = args[i];
    if (v.isTensor()) {
      if (is_differentiable_tensor(v.toTensor())) slots.push_back({i, -1, name_of(i)});
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (std::size_t k = 0; k < list.size(); ++k) {
        if (is_differentiable_tensor(list.get(k))) {
          slots.push_back({i, static_cast<int64_t>(k), name_of(i) + "[" + std::to_string(k) + "]"});
        }
      }
    } else if (v.isList()) {
      // Tensor?[] arrives as a generic list.
      const auto& elems = v.toListRef();
      for (std::size_t k = 0; k < elems.size(); ++k) {
        if (elems[k].isTensor() && is_differentiable_tensor(elems[k].toTensor())) {
          slots.push_back({i, static_cast<int64_t>(k), name_of(i) + "[" + std::to_string(k) + "]"});
        }
      }
    }
  }
  return slots;
}

torch::jit::Stack substitute(const torch::jit::Stack& args, const std::vector<Slot>& slots,
                             const std::vector<at::Tensor>& inputs, bool to_double,
                             std::optional<c10::Device> device) {
  torch::jit::Stack out;
  out.reserve(args.size());
  for (const auto& v : args) {
    if (v.isTensor()) {
      out.emplace_back(convert(v.toTensor(), to_double, device));
    } else if (v.isTensorList()) {
      // NB: c10::List has reference semantics; copying the IValue would share the list.
      c10::List<at::Tensor> list;
      const auto in = v.toTensorList();
      for (std::size_t k = 0; k < in.size(); ++k) {
        list.push_back(convert(in.get(k), to_double, device));
      }
      out.emplace_back(std::move(list));
    } else if (v.isList() && !v.toListRef().empty() &&
               (v.toListRef()[0].isTensor() || v.toListRef()[0].isNone())) {
      c10::List<std::optional<at::Tensor>> list;
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          list.push_back(convert(e.toTensor(), to_double, device));
        } else {
          list.push_back(std::nullopt);
        }
      }
      out.emplace_back(std::move(list));
    } else {
      out.push_back(v);
    }
  }
  for (std::size_t s = 0; s < slots.size(); ++s) {
    const auto& slot = slots[s];
    at::Tensor t = inputs[s];
    if (device.has_value() && t.device() != *device) t = convert(t, false, device);
    if (slot.element < 0) {
      out[slot.arg] = t;
    } else if (out[slot.arg].isTensorList()) {
      auto list = out[slot.arg].toTensorList();
      list.set(static_cast<std::size_t>(slot.element), t);
    } else {
      auto list = out[slot.arg].to<c10::List<std::optional<at::Tensor>>>();
      list.set(static_cast<std::size_t>(slot.element), t);
    }
  }
  return out;
}

std::vector<at::Tensor> flatten_returns(const torch::jit::Stack& returns) {
  std::vector<at::Tensor> out;
  for (const auto& v : returns) {
    if (v.isTensor()) {
      out.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (std::size_t k = 0; k < list.size(); ++k) out.push_back(list.get(k));
    }
  }
  return out;
}

namespace {
std::vector<std::string> names_of_returns(const torch::jit::Stack& returns,
                                          const std::vector<std::string>& return_names) {
  std::vector<std::string> names;
  for (std::size_t r = 0; r < returns.size(); ++r) {
    const std::string base = r < return_names.size() && !return_names[r].empty()
                                 ? return_names[r]
                                 : "output " + std::to_string(r);
    const auto& v = returns[r];
    if (v.isTensor()) {
      names.push_back(base);
    } else if (v.isTensorList()) {
      const auto n = v.toTensorList().size();
      for (std::size_t k = 0; k < n; ++k) names.push_back(base + "[" + std::to_string(k) + "]");
    }
  }
  return names;
}
}  // namespace

std::string output_label(std::size_t o, const std::string& name) {
  if (name.empty()) return "output " + std::to_string(o);
  if (name.starts_with("output ")) return name;
  return "output " + std::to_string(o) + " ('" + name + "')";
}

Function make_op_function(const BoxedFunction& fn, const torch::jit::Stack& args,
                          const std::vector<Slot>& slots, OpCounts* counts) {
  struct State {
    BoxedFunction fn;
    torch::jit::Stack args;
    std::vector<Slot> slots;
    OpCounts* counts;
    std::vector<std::string> last_names;
  };
  auto state = std::make_shared<State>(State{fn, args, slots, counts, {}});
  auto run = [state](const std::vector<at::Tensor>& inputs, bool reference) {
    torch::jit::Stack stack = substitute(state->args, state->slots, inputs, reference);
    ++state->counts->forward_calls;
    try {
      state->fn.call(stack);
    } catch (const std::exception& e) {
      throw FunctionRaised(std::string(reference ? "the float64 run of " : "") + state->fn.name +
                           " raised: " + one_line_error(e));
    }
    state->last_names = names_of_returns(stack, state->fn.return_names);
    return flatten_returns(stack);
  };
  Function f;
  for (const auto& s : slots) f.input_names.push_back(s.name);
  f.eval = [run](const std::vector<at::Tensor>& inputs) { return run(inputs, false); };
  f.eval_reference = [run](const std::vector<at::Tensor>& inputs) { return run(inputs, true); };
  f.output_names = [state] { return state->last_names; };
  return f;
}

at::Tensor clone_like(const at::Tensor& t, std::optional<c10::ScalarType> dtype) {
  const auto options = t.options().dtype(dtype.value_or(t.scalar_type()));
  if (t.numel() == 0) return at::empty_strided(t.sizes(), t.strides(), options);
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * std::abs(t.stride(d));
  const int64_t offset = t.storage_offset();
  at::Tensor storage = at::zeros({offset + span}, options);
  at::Tensor out = storage.as_strided(t.sizes(), t.strides(), offset);
  at::NoGradGuard no_grad;
  out.copy_(t.detach());
  return out;
}

at::Tensor random_grad_output(const at::Tensor& y, at::Generator& gen) {
  return uniform_like(y, gen, -1.0, 1.0);
}

double largest_finite_abs(const at::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  // A loop over the float64 values (one conversion at most), not four ATen ops.
  const at::Tensor a = dense_double(t);
  double largest = 0.0;
  for (const double v : values_of(a)) {
    if (std::isfinite(v)) largest = std::max(largest, std::abs(v));
  }
  return largest;
}

std::string format_sizes(c10::IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

std::vector<int64_t> unravel(int64_t flat, c10::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    const int64_t n = sizes[d];
    if (n > 0) {
      index[d] = flat % n;
      flat /= n;
    }
  }
  return index;
}

std::string format_index(const std::vector<int64_t>& index) { return format_sizes(index); }

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    default: return c10::toString(t);
  }
}

namespace {
std::atomic<std::string (*)()> caught_error_hook{nullptr};
}  // namespace

std::string note_caught_error() {
  if (auto* hook = caught_error_hook.load(std::memory_order_acquire)) return hook();
  return {};
}

namespace {
/// "/path/ops.py(42): backward" (a pybind11 traceback line) as "/path/ops.py:42 in backward";
/// any other text as it is.
std::string python_frame(const std::string& frame) {
  const auto close = frame.find("): ");
  const auto open = close == std::string::npos ? close : frame.rfind('(', close);
  if (open == std::string::npos || open + 1 >= close) return frame;
  const std::string line = frame.substr(open + 1, close - open - 1);
  if (line.find_first_not_of("0123456789") != std::string::npos) return frame;
  return frame.substr(0, open) + ":" + line + " in " + frame.substr(close + 3);
}
}  // namespace

std::string one_line_error(const std::exception& e) {
  const std::string origin = note_caught_error();
  std::string what;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    what = ce->what_without_backtrace();
  } else {
    what = e.what();
  }
  // Drop libtorch's "Exception raised from ..." tail and join the lines.
  if (auto pos = what.find("\nException raised from"); pos != std::string::npos) {
    what.resize(pos);
  }
  // A Python error's traceback (pybind11 and torch write "\n\nAt:\n" and one frame a line,
  // innermost first, as "  /path/ops.py(42): backward"): only the frame that raised it, written
  // as customop._errors writes one ("raised at /path/ops.py:42 in backward").
  if (auto pos = what.find("\n\nAt:\n"); pos != std::string::npos) {
    std::string frame = what.substr(pos + 6, what.find('\n', pos + 6) - (pos + 6));
    frame.erase(0, frame.find_first_not_of(' '));
    what.resize(pos);
    if (origin.empty() && !frame.empty()) what += " (raised at " + python_frame(frame) + ")";
  }
  // The hook's "ValueError, raised at ..." (customop._errors.describe): "ValueError: <message>
  // (raised at ...)", the form of the errors the Python front end reports itself.
  if (!origin.empty()) {
    const auto comma = origin.find(", ");
    const std::string type = origin.substr(0, comma);
    if (what.rfind(type + ": ", 0) != 0) what = type + ": " + what;
    if (comma != std::string::npos) what += " (" + origin.substr(comma + 2) + ")";
  }
  for (auto& c : what) {
    if (c == '\n') c = ' ';
  }
  return what;
}

}  // namespace customop::gradcheck::detail

namespace customop::gradcheck {

void set_caught_error_hook(std::string (*hook)()) {
  detail::caught_error_hook.store(hook, std::memory_order_release);
}

}  // namespace customop::gradcheck
