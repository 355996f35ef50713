// The bad-input matrix: every built-in op x tensor argument x kind of bad input (dtype, device,
// shape, layout, non-finite values, None), list-length and huge-size cases, the registration
// API, the gradcheck CLI, and damaged model files. Each case runs in a forked child with a time
// limit (isolated.h), so a crash or a hang is counted and named. Each must end in
//   - a correct result: outputs (and, on the CPU, the grads of a backward pass) equal to an
//     ATen composite reference on the same values, or
//   - a c10::Error naming the op, the argument, and the actual value.
// Prints "bad-input matrix: N cases, C crashes, K errors checked" and a line per failure.

#include "isolated.h"
#include "ops_model_loader.h"
#include "support/tensor_assertions.h"

#include <customop/customop.h>
#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

using customop::testing::Outcome;
using customop::testing::run_isolated;
using customop::testing::Verdict;
using Stack = torch::jit::Stack;

constexpr std::chrono::seconds kLimit{60};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the cases ------------------------------------------------------------------------------

enum class Expect {
  kResult,         // must return the reference's result
  kResultOrError,  // the reference's result, or a named error
  kError,          // must throw a named error
};

struct Case {
  std::string section;  // "customop::rms_norm", "registration", "cli", "model files"
  std::string label;    // "input: int64", "weights: one too many"
  std::function<Verdict()> body;
};

/// The error text `e` must contain each of `needles`: kCheckedError, or kBadError naming
/// the first one missing.
Verdict named_error(const std::string& msg, const std::vector<std::string>& needles) {
  for (const auto& n : needles) {
    if (msg.find(n) == std::string::npos) {
      return {Outcome::kBadError, "message lacks '" + n + "': " + msg.substr(0, 300)};
    }
  }
  return {Outcome::kCheckedError, msg.substr(0, 200)};
}

// ---- op cases: references and variants ------------------------------------------------------

at::Tensor T(const Stack& s, size_t i) { return s.at(i).toTensor(); }

/// True when this process can run CUDA kernels (call it in a forked child only).
bool has_gpu() { return at::hasCUDA() && at::getNumGPUs() > 0; }

/// An op under test: its reference (ATen composites, on the same IValues) and which of its
/// outputs are differentiable.
struct OpUnderTest {
  std::string short_name;  // as the ops' messages spell it: "rms_norm"
  const customop::OpCore* op;
  std::function<std::vector<at::Tensor>(const Stack&)> reference;
  std::vector<bool> differentiable;
  /// Extra per-op rows: a label, the stack edit, the expectation, the argument named.
  struct Extra {
    std::string label;
    std::function<void(Stack&)> edit;
    Expect expect;
    std::vector<std::string> needles;
  };
  std::vector<Extra> extras;
};

std::vector<OpUnderTest> ops_under_test() {
  using customop::find_op;
  // Touch each op so its registration is linked in.
  (void)customop::ops::bias_gelu_op();
  (void)customop::ops::clamp_count_op();
  (void)customop::ops::masked_softmax_op();
  (void)customop::ops::max_along_op();
  (void)customop::ops::rms_norm_op();
  (void)customop::ops::weighted_sum_op();
  std::vector<OpUnderTest> ops;
  ops.push_back({"bias_gelu",
                 find_op("customop::bias_gelu"),
                 [](const Stack& s) {
                   return std::vector<at::Tensor>{at::gelu(T(s, 0) + T(s, 1), s[2].toStringRef())};
                 },
                 {true},
                 {{"approximate: 'bogus'",
                   [](Stack& s) { s[2] = std::string("bogus"); },
                   Expect::kError,
                   {"bias_gelu", "approximate", "bogus"}}}});
  ops.push_back(
      {"clamp_count",
       find_op("customop::clamp_count"),
       [](const Stack& s) {
         const at::Tensor x = T(s, 0);
         const double lo = s[1].toDouble(), hi = s[2].toDouble();
         return std::vector<at::Tensor>{at::clamp(x, lo, hi), ((x < lo) | (x > hi)).sum()};
       },
       {true, false},
       {{"min > max",
         [](Stack& s) { std::swap(s[1], s[2]); },
         Expect::kResultOrError,
         {"clamp_count", "min", "max"}},
        {"min: NaN",
         [](Stack& s) { s[1] = kNaN; },
         Expect::kResultOrError,
         {"clamp_count", "min", "nan"}}}});
  ops.push_back({"masked_softmax",
                 find_op("customop::masked_softmax"),
                 [](const Stack& s) {
                   const at::Tensor x = T(s, 0);
                   const int64_t dim = s[2].toInt();
                   // NB: on meta, softmax alone (where/masked_fill have no C++ Meta kernel;
                   // the mask changes no shape).
                   if (s[1].isNone() || x.is_meta())
                     return std::vector<at::Tensor>{at::softmax(x, dim)};
                   const at::Tensor keep = s[1].toTensor().expand(x.sizes());
                   // NB: where, not masked_fill(~keep): logical_not has no Meta kernel.
                   const at::Tensor y =
                       at::softmax(at::where(keep, x, at::full({}, -kInf, x.options())), dim);
                   return std::vector<at::Tensor>{at::where(keep, y, at::zeros_like(y))};
                 },
                 {true},
                 {{"dim: 7",
                   [](Stack& s) { s[2] = int64_t{7}; },
                   Expect::kError,
                   {"masked_softmax", "dim", "7"}}}});
  ops.push_back({"max_along",
                 find_op("customop::max_along"),
                 [](const Stack& s) {
                   auto [v, i] = at::max(T(s, 0), s[1].toInt(), s[2].toBool());
                   return std::vector<at::Tensor>{v, i};
                 },
                 {true, false},
                 {{"dim: -9",
                   [](Stack& s) { s[1] = int64_t{-9}; },
                   Expect::kError,
                   {"max_along", "dim", "-9"}}}});
  ops.push_back(
      {"rms_norm",
       find_op("customop::rms_norm"),
       [](const Stack& s) {
         const at::Tensor x = T(s, 0);
         return std::vector<at::Tensor>{
             x * at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + s[2].toDouble()) * T(s, 1)};
       },
       {true},
       {{"eps: -1", [](Stack& s) { s[2] = -1.0; }, Expect::kError, {"rms_norm", "eps", "-1"}},
        {"eps: NaN", [](Stack& s) { s[2] = kNaN; }, Expect::kError, {"rms_norm", "eps", "nan"}}}});
  ops.push_back({"weighted_sum",
                 find_op("customop::weighted_sum"),
                 [](const Stack& s) {
                   const auto xs = s[0].toTensorVector();
                   const auto w = s[1].toDoubleVector();
                   TORCH_CHECK(!xs.empty() && xs.size() == w.size(), "reference: lengths");
                   at::Tensor y = xs[0] * w[0];
                   for (size_t k = 1; k < xs.size(); ++k) y = y + xs[k] * w[k];
                   return std::vector<at::Tensor>{y};
                 },
                 {true},
                 {{"inputs: []",
                   [](Stack& s) {
                     s[0] = c10::List<at::Tensor>();
                     s[1] = std::vector<double>{};
                   },
                   Expect::kError,
                   {"weighted_sum", "inputs", "empty"}},
                  {"weights: one too many",
                   [](Stack& s) {
                     auto w = s[1].toDoubleVector();
                     w.push_back(1.0);
                     s[1] = w;
                   },
                   Expect::kError,
                   {"weighted_sum", "weights", "inputs"}},
                  {"weights: []",
                   [](Stack& s) { s[1] = std::vector<double>{}; },
                   Expect::kError,
                   {"weighted_sum", "weights", "0"}},
                  {"inputs: shapes differ",
                   [](Stack& s) {
                     auto xs = s[0].toTensorVector();
                     xs.push_back(at::zeros({3, 1}, xs[0].options()));
                     auto w = s[1].toDoubleVector();
                     w.push_back(1.0);
                     s[0] = xs;
                     s[1] = w;
                   },
                   Expect::kError,
                   {"weighted_sum", "inputs", "shape"}},
                  {"inputs: dtypes differ",
                   [](Stack& s) {
                     auto xs = s[0].toTensorVector();
                     xs.back() = xs.back().to(at::kFloat);
                     s[0] = xs;
                   },
                   Expect::kError,
                   {"weighted_sum", "inputs", "float32"}}}});
  for (const auto& o : ops) {
    if (o.op == nullptr) throw std::runtime_error("op not registered: customop::" + o.short_name);
  }
  return ops;
}

enum class ArgShape { kTensor, kOptionalTensor, kTensorList, kOther };

ArgShape arg_shape(const c10::Argument& a) {
  const auto& t = a.type();
  if (t->kind() == c10::TypeKind::TensorType) return ArgShape::kTensor;
  if (t->kind() == c10::TypeKind::OptionalType &&
      t->expectRef<c10::OptionalType>().getElementType()->kind() == c10::TypeKind::TensorType) {
    return ArgShape::kOptionalTensor;
  }
  if (t->kind() == c10::TypeKind::ListType &&
      t->expectRef<c10::ListType>().getElementType()->kind() == c10::TypeKind::TensorType) {
    return ArgShape::kTensorList;
  }
  return ArgShape::kOther;
}

/// Applies `f` to the tensor(s) of argument `i`: the tensor, a present Tensor?, the first
/// element of a Tensor[] (every element when `all_elements`). False when there was none.
bool edit_tensor_arg(Stack& s, size_t i, ArgShape shape,
                     const std::function<at::Tensor(const at::Tensor&)>& f,
                     bool all_elements = false) {
  switch (shape) {
    case ArgShape::kTensor: s[i] = f(s[i].toTensor()); return true;
    case ArgShape::kOptionalTensor:
      if (s[i].isNone()) return false;
      s[i] = f(s[i].toTensor());
      return true;
    case ArgShape::kTensorList: {
      auto xs = s[i].toTensorVector();
      if (xs.empty()) return false;
      for (size_t k = 0; k < (all_elements ? xs.size() : 1); ++k) xs[k] = f(xs[k]);
      s[i] = xs;
      return true;
    }
    case ArgShape::kOther: return false;
  }
  return false;
}

/// A copy of the stack whose tensors are fresh copies (so a child's in-place edits, like
/// requires_grad_, never reach the sample).
Stack deep_copy(const Stack& s) {
  Stack out;
  for (const auto& v : s) {
    if (v.isTensor()) {
      out.emplace_back(v.toTensor().defined() ? v.toTensor().clone() : at::Tensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> xs;
      for (const auto& t : v.toTensorVector()) xs.push_back(t.clone());
      out.emplace_back(xs);
    } else {
      out.push_back(v);
    }
  }
  return out;
}

std::vector<at::Tensor> float_tensors(const Stack& s) {
  std::vector<at::Tensor> out;
  for (const auto& v : s) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_floating_point()) {
      out.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) {
        if (t.is_floating_point()) out.push_back(t);
      }
    }
  }
  return out;
}

std::string dtype_text(c10::ScalarType d) {
  switch (d) {
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kComplexFloat: return "complex64";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBool: return "bool";
    default: return c10::toString(d);
  }
}

customop::testing::Tolerance tolerance(c10::ScalarType d) {
  switch (d) {
    case at::kDouble: return {1e-9, 1e-10};
    case at::kFloat: return {1e-5, 1e-5};
    case at::kHalf: return {5e-3, 5e-3};
    case at::kBFloat16: return {3e-2, 3e-2};
    default: return {0, 0};
  }
}

/// Compares outputs with the reference's: shapes, dtypes, devices; values unless on meta.
std::optional<std::string> compare_outputs(const std::vector<at::Tensor>& got,
                                           const std::vector<at::Tensor>& want,
                                           const std::string& what) {
  if (got.size() != want.size()) {
    return what + ": " + std::to_string(got.size()) + " outputs, reference " +
           std::to_string(want.size());
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string name = what + " " + std::to_string(k);
    if (got[k].defined() != want[k].defined()) return name + ": defined differs";
    if (!want[k].defined()) continue;
    std::ostringstream m;
    if (got[k].sizes() != want[k].sizes()) {
      m << name << ": shape " << got[k].sizes() << ", reference " << want[k].sizes();
      return m.str();
    }
    if (got[k].scalar_type() != want[k].scalar_type()) {
      return name + ": dtype " + dtype_text(got[k].scalar_type()) + ", reference " +
             dtype_text(want[k].scalar_type());
    }
    if (got[k].device() != want[k].device()) {
      return name + ": device " + got[k].device().str() + ", reference " + want[k].device().str();
    }
    if (want[k].is_meta()) continue;
    const auto r =
        want[k].is_floating_point()
            ? customop::testing::tensors_close(got[k], want[k], tolerance(want[k].scalar_type()))
            : customop::testing::tensors_equal(got[k], want[k]);
    if (!r) return name + ": " + r.message();
  }
  return std::nullopt;
}

/// The variant of one op sample a case runs.
struct OpVariant {
  std::string label;
  std::function<bool(Stack&)> make;  // edits the sample; false: does not apply (skipped)
  Expect expect;
  std::vector<std::string> needles;  // besides the op's name
  bool check_backward = true;        // CPU, finite values: compare grads too
  bool noncontiguous_grad_outputs = false;
};

Verdict run_op_variant(const OpUnderTest& o, const Stack& sample, const OpVariant& v) {
  at::manual_seed(0);
  Stack args = deep_copy(sample);
  if (!v.make(args)) return {Outcome::kResult, "skipped"};
  const bool on_cpu = [&] {
    for (const auto& t : float_tensors(args)) {
      if (!t.device().is_cpu()) return false;
    }
    return true;
  }();
  const bool backward = v.check_backward && on_cpu && v.expect != Expect::kError;
  std::vector<at::Tensor> leaves;
  if (backward) {
    for (auto& t : float_tensors(args)) {
      if (at::isFloatingType(t.scalar_type()) && t.scalar_type() == at::kDouble) {
        t.requires_grad_(true);
        leaves.push_back(t);
      }
    }
  }
  Stack ref_args = args;  // shares the (leaf) tensors
  std::vector<at::Tensor> got;
  try {
    Stack s = args;
    o.op->handle().callBoxed(s);
    for (auto& r : s) got.push_back(r.toTensor());
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    if (v.expect == Expect::kResult)
      return {Outcome::kWrongResult, "refused: " + msg.substr(0, 300)};
    std::vector<std::string> needles{o.short_name};
    needles.insert(needles.end(), v.needles.begin(), v.needles.end());
    return named_error(msg, needles);
  }
  if (v.expect == Expect::kError) return {Outcome::kWrongResult, "accepted (expected an error)"};
  std::vector<at::Tensor> want;
  try {
    want = o.reference(ref_args);
  } catch (const c10::Error& e) {
    return {Outcome::kWrongResult,
            std::string("returned a result where the ATen reference refuses: ") +
                e.what_without_backtrace()};
  }
  if (auto diff = compare_outputs(got, want, "output")) return {Outcome::kWrongResult, *diff};
  if (!backward || leaves.empty()) return {Outcome::kResult, ""};
  // Backward: the same grad_outputs through the op and through the reference.
  std::vector<at::Tensor> outs, ref_outs, gouts;
  for (size_t k = 0; k < got.size(); ++k) {
    if (!o.differentiable[k]) continue;
    at::Tensor g = at::randn(got[k].sizes(), got[k].options().requires_grad(false));
    if (v.noncontiguous_grad_outputs && g.dim() >= 1) {
      auto sizes = g.sizes().vec();
      sizes.back() *= 2;
      at::Tensor buf = at::zeros(sizes, g.options());
      at::Tensor view = buf.slice(-1, 0, c10::nullopt, 2);
      view.copy_(g);
      if (view.dim() >= 2) view = view.transpose(-1, -2).contiguous().transpose(-1, -2);
      if (view.is_contiguous() && view.numel() > 1) {
        return {Outcome::kWrongResult, "test setup: grad_output still contiguous"};
      }
      g = view;
    }
    outs.push_back(got[k]);
    ref_outs.push_back(want[k]);
    gouts.push_back(g);
  }
  auto grads = torch::autograd::grad(outs, leaves, gouts, false, false, /*allow_unused=*/true);
  auto ref_grads = torch::autograd::grad(ref_outs, leaves, gouts, false, false, true);
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (!grads[k].defined()) grads[k] = at::zeros_like(leaves[k]);
    if (!ref_grads[k].defined()) ref_grads[k] = at::zeros_like(leaves[k]);
  }
  if (auto diff = compare_outputs(grads, ref_grads, "grad of float input")) {
    return {Outcome::kWrongResult, *diff};
  }
  return {Outcome::kResult, ""};
}

at::Tensor strided_copy(const at::Tensor& t) {
  auto sizes = t.sizes().vec();
  sizes.back() *= 2;
  at::Tensor view = at::zeros(sizes, t.options()).slice(-1, 0, c10::nullopt, 2);
  view.copy_(t);
  return view;
}

std::vector<OpVariant> variants_for(const OpUnderTest& o, const Stack& sample) {
  std::vector<OpVariant> out;
  const auto& schema_args = o.op->schema().arguments();
  size_t tensor_args = 0;
  for (const auto& a : schema_args) tensor_args += arg_shape(a) != ArgShape::kOther ? 1 : 0;
  // Known without touching CUDA (the parent must not initialise it).
  const bool cuda_kernel = o.op->has_kernel(c10::DeviceType::CUDA);
  for (size_t i = 0; i < schema_args.size(); ++i) {
    const ArgShape shape = arg_shape(schema_args[i]);
    if (shape == ArgShape::kOther) continue;
    const std::string arg = schema_args[i].name();
    auto edit = [i, shape](std::function<at::Tensor(const at::Tensor&)> f, bool all = false) {
      return [i, shape, f = std::move(f), all](Stack& s) {
        return edit_tensor_arg(s, i, shape, f, all);
      };
    };
    for (auto d : {at::kLong, at::kHalf, at::kBFloat16, at::kComplexFloat}) {
      out.push_back({arg + ": " + dtype_text(d),
                     edit([d](const at::Tensor& t) { return t.to(d); }),
                     Expect::kResultOrError,
                     {arg, dtype_text(d)}});
    }
    if (tensor_args > 1) {
      // Applies only where another tensor stays on the CPU (a Tensor? may be None).
      out.push_back({arg + ": on meta, the others on cpu",
                     [i, shape](Stack& s) {
                       if (!edit_tensor_arg(s, i, shape,
                                            [](const at::Tensor& t) { return t.to(at::kMeta); })) {
                         return false;
                       }
                       for (size_t j = 0; j < s.size(); ++j) {
                         if (j != i && s[j].isTensor() && s[j].toTensor().defined() &&
                             s[j].toTensor().is_cpu()) {
                           return true;
                         }
                       }
                       return false;
                     },
                     Expect::kError,
                     {arg, "meta"}});
    }
    // NB: CUDA is looked for in the child (a parent that initialised CUDA could not fork
    // children that use it); without a GPU the variant does not apply.
    if (tensor_args > 1) {
      out.push_back({arg + ": on cuda, the others on cpu",
                     [i, shape, cuda_kernel](Stack& s) {
                       return cuda_kernel && has_gpu() &&
                              edit_tensor_arg(s, i, shape,
                                              [](const at::Tensor& t) { return t.to(at::kCUDA); });
                     },
                     Expect::kError,
                     {arg, "cuda"}});
    }
    out.push_back(
        {arg + ": 0-d",
         edit([](const at::Tensor& t) { return t.numel() > 0 ? t.flatten()[0].clone() : t; }),
         Expect::kResultOrError,
         {arg}});
    out.push_back({arg + ": empty (size 0 in dim 0)",
                   edit([](const at::Tensor& t) {
                     return t.dim() >= 1 ? t.narrow(0, 0, 0) : t.reshape({0});
                   }),
                   Expect::kResultOrError,
                   {arg}});
    out.push_back({arg + ": extra leading dim",
                   edit([](const at::Tensor& t) {
                     auto sizes = t.sizes().vec();
                     sizes.insert(sizes.begin(), 2);
                     return t.unsqueeze(0).expand(sizes).contiguous();
                   }),
                   Expect::kResultOrError,
                   {arg}});
    auto layout = [&](std::string what, std::function<at::Tensor(const at::Tensor&)> f,
                      std::function<bool(const at::Tensor&)> applies) {
      out.push_back({arg + ": " + what,
                     [i, shape, f = std::move(f), applies = std::move(applies)](Stack& s) {
                       bool ok = true;
                       edit_tensor_arg(s, i, shape, [&](const at::Tensor& t) {
                         ok = applies(t);
                         return ok ? f(t) : t;
                       });
                       return ok;
                     },
                     Expect::kResult,
                     {}});
    };
    layout("non-contiguous (every other element)", strided_copy,
           [](const at::Tensor& t) { return t.dim() >= 1 && t.numel() > 0; });
    layout(
        "transposed layout",
        [](const at::Tensor& t) { return t.transpose(-1, -2).contiguous().transpose(-1, -2); },
        [](const at::Tensor& t) { return t.dim() >= 2 && t.size(-1) > 1 && t.size(-2) > 1; });
    layout(
        "expanded (stride 0 in dim 0)",
        [](const at::Tensor& t) { return t.narrow(0, 0, 1).expand(t.sizes()); },
        [](const at::Tensor& t) { return t.dim() >= 1 && t.size(0) > 1; });
    out.push_back({arg + ": NaN and inf values",
                   [i, shape](Stack& s) {
                     bool ok = true;
                     edit_tensor_arg(s, i, shape, [&](const at::Tensor& t) {
                       ok = t.is_floating_point() && t.numel() > 0;
                       if (!ok) return t;
                       at::Tensor c = t.clone();
                       c.view(-1)[0] = kNaN;
                       if (c.numel() > 1) c.view(-1)[-1] = kInf;
                       return c;
                     });
                     return ok;
                   },
                   Expect::kResult,
                   {},
                   /*check_backward=*/false});
    if (shape == ArgShape::kTensor) {
      out.push_back({arg + ": None",
                     [i](Stack& s) {
                       s[i] = c10::IValue();
                       return true;
                     },
                     Expect::kError,
                     {arg, "None"}});
      out.push_back({arg + ": undefined tensor",
                     [i](Stack& s) {
                       s[i] = at::Tensor();
                       return true;
                     },
                     Expect::kError,
                     {arg, "None"}});
    }
  }
  // Every tensor on meta: the fake kernel's shapes and dtypes equal the reference's on meta.
  auto to_meta_all = [schema_args](Stack& s) {
    for (size_t i = 0; i < schema_args.size(); ++i) {
      edit_tensor_arg(
          s, i, arg_shape(schema_args[i]), [](const at::Tensor& t) { return t.to(at::kMeta); },
          true);
    }
  };
  out.push_back({"every tensor on cuda",
                 [schema_args, cuda_kernel](Stack& s) {
                   if (!cuda_kernel || !has_gpu()) return false;
                   for (size_t i = 0; i < schema_args.size(); ++i) {
                     edit_tensor_arg(
                         s, i, arg_shape(schema_args[i]),
                         [](const at::Tensor& t) { return t.to(at::kCUDA); }, true);
                   }
                   return true;
                 },
                 Expect::kResult,
                 {}});
  out.push_back({"every tensor on meta",
                 [to_meta_all](Stack& s) {
                   to_meta_all(s);
                   return true;
                 },
                 Expect::kResult,
                 {}});
  // More than 2^31 elements (64-bit index math), on meta: the first tensor argument (every
  // element of a list) gets a leading dim of the size that takes it past 2^31.
  out.push_back({"more than 2^31 elements, on meta",
                 [to_meta_all, schema_args](Stack& s) {
                   to_meta_all(s);
                   for (size_t i = 0; i < schema_args.size(); ++i) {
                     const ArgShape shape = arg_shape(schema_args[i]);
                     if (shape == ArgShape::kOther) continue;
                     return edit_tensor_arg(
                         s, i, shape,
                         [](const at::Tensor& t) {
                           const int64_t n = std::max<int64_t>(t.numel(), 1);
                           const int64_t lead = (int64_t{1} << 31) / n + 1;
                           auto sizes = t.sizes().vec();
                           sizes.insert(sizes.begin(), lead);
                           return t.unsqueeze(0).expand(sizes);
                         },
                         true);
                   }
                   return false;
                 },
                 Expect::kResult,
                 {}});
  out.push_back({"non-contiguous grad_outputs",
                 [](Stack&) { return true; },
                 Expect::kResult,
                 {},
                 true,
                 /*noncontiguous_grad_outputs=*/true});
  for (const auto& e : o.extras) {
    out.push_back({e.label,
                   [edit = e.edit](Stack& s) {
                     edit(s);
                     return true;
                   },
                   e.expect, e.needles});
  }
  (void)sample;
  return out;
}

// ---- registration API -----------------------------------------------------------------------

struct XArgs {
  at::Tensor x;
};
struct XAlphaArgs {
  at::Tensor x;
  double alpha;
};

at::Tensor identity(const XArgs& a) { return a.x.clone(); }

template <class F>
Verdict expect_registration_error(F&& f, std::vector<std::string> needles) {
  try {
    f();
  } catch (const c10::Error& e) {
    return named_error(e.what_without_backtrace(), needles);
  }
  return {Outcome::kWrongResult, "accepted (expected an error)"};
}

std::vector<Case> registration_cases() {
  const std::string s = "registration";
  std::vector<Case> c;
  c.push_back({s, "schema does not parse", [] {
                 return expect_registration_error(
                     [] { customop::define<XArgs>("bad_input::p(Tensor x -> Tensor"); },
                     {"bad_input::p", "does not parse"});
               }});
  c.push_back(
      {s, "field name differs from the schema's", [] {
         return expect_registration_error(
             [] { customop::define<XAlphaArgs>("bad_input::f(Tensor x, float beta) -> Tensor"); },
             {"bad_input::f", "alpha", "beta"});
       }});
  c.push_back(
      {s, "field type differs from the schema's", [] {
         return expect_registration_error(
             [] { customop::define<XAlphaArgs>("bad_input::t(Tensor x, int alpha) -> Tensor"); },
             {"bad_input::t", "alpha", "int"});
       }});
  c.push_back(
      {s, "too few fields", [] {
         return expect_registration_error(
             [] { customop::define<XArgs>("bad_input::n(Tensor x, float alpha) -> Tensor"); },
             {"bad_input::n", "1 fields"});
       }});
  c.push_back({s, "reserved namespace", [] {
                 return expect_registration_error(
                     [] { customop::define<XArgs>("aten::bad_input_x(Tensor x) -> Tensor"); },
                     {"aten::bad_input_x", "reserved"});
               }});
  c.push_back({s, "defined twice", [] {
                 customop::define<XArgs>("bad_input::twice(Tensor x) -> Tensor");
                 return expect_registration_error(
                     [] { customop::define<XArgs>("bad_input::twice(Tensor x) -> Tensor"); },
                     {"bad_input::twice", "defined multiple times"});
               }});
  c.push_back({s, "CPU kernel registered twice", [] {
                 auto& op = customop::define<XArgs>("bad_input::k2(Tensor x) -> Tensor");
                 op.impl(c10::DeviceType::CPU, &identity);
                 return expect_registration_error(
                     [&] { op.impl(c10::DeviceType::CPU, &identity); },
                     {"bad_input::k2", "CPU impl is already registered"});
               }});
  c.push_back({s, "called on a device without a kernel", [] {
                 auto& op = customop::define<XArgs>("bad_input::nok(Tensor x) -> Tensor");
                 return expect_registration_error([&] { op(XArgs{at::ones({2})}); },
                                                  {"bad_input::nok", "no CPU impl registered"});
               }});
  c.push_back({s, "backward returns a grad for an unknown argument", [] {
                 auto& op = customop::define<XArgs>("bad_input::gk(Tensor x) -> Tensor");
                 op.impl(c10::DeviceType::CPU, &identity);
                 op.impl_autograd([](const XArgs&, const at::Tensor&) { return XArgs{}; },
                                  [](const XArgs&, const at::Tensor& g) {
                                    return customop::Grads{{"x", g}, {"y", g}};
                                  });
                 at::Tensor x = at::ones({2}, at::kDouble).requires_grad_();
                 return expect_registration_error([&] { op(XArgs{x}).sum().backward(); },
                                                  {"bad_input::gk", "'y'"});
               }});
  c.push_back({s, "backward returns a grad of the wrong shape", [] {
                 auto& op = customop::define<XArgs>("bad_input::gs(Tensor x) -> Tensor");
                 op.impl(c10::DeviceType::CPU, &identity);
                 op.impl_autograd([](const XArgs&, const at::Tensor&) { return XArgs{}; },
                                  [](const XArgs&, const at::Tensor& g) {
                                    return customop::Grads{{"x", g.sum()}};
                                  });
                 at::Tensor x = at::ones({2}, at::kDouble).requires_grad_();
                 return expect_registration_error([&] { op(XArgs{x}).sum().backward(); },
                                                  {"bad_input::gs", "shape"});
               }});
  return c;
}

// ---- the gradcheck CLI ----------------------------------------------------------------------

std::filesystem::path scratch_dir() {
  static const auto dir = [] {
    auto d = std::filesystem::path(::testing::TempDir()) /
             ("customop_bad_input_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = scratch_dir() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

/// Runs the CLI with `args`; the exit status must be `status` and the output hold `needles`.
Verdict run_cli(const std::string& args, int status, const std::vector<std::string>& needles) {
  const std::string cmd = std::string("'") + CUSTOMOP_GRADCHECK_CLI + "' -q " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {Outcome::kCrash, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int raw = ::pclose(p);
  const int code = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  if (code >= 128 || (code != 0 && code != 1 && code != 2 && code != 4)) {
    return {Outcome::kCrash, "exit status " + std::to_string(code) + ": " + out.substr(0, 300)};
  }
  if (code != status) {
    return {status == 0 ? Outcome::kWrongResult : Outcome::kBadError,
            "exit status " + std::to_string(code) + ", expected " + std::to_string(status) + ": " +
                out.substr(0, 300)};
  }
  if (status == 0) return {Outcome::kResult, ""};
  return named_error(out, needles);
}

std::string spec(const std::string& op, const std::string& args) {
  return R"({"op": ")" + op + R"(", "args": )" + args + "}";
}

std::vector<Case> cli_cases() {
  const std::string s = "cli";
  std::vector<Case> c;
  auto add = [&](std::string label, std::string args, int status,
                 std::vector<std::string> needles) {
    c.push_back({s, label, [args, status, needles] { return run_cli(args, status, needles); }});
  };
  auto add_spec = [&](std::string label, std::string text, std::vector<std::string> needles) {
    const std::string file = write_file("spec_" + std::to_string(c.size()) + ".json", text);
    add(std::move(label), "--samples '" + file + "'", 2, [&] {
      needles.insert(needles.begin(), file);
      return needles;
    }());
  };
  add("--samples: no such file", "--samples /nonexistent/spec.json", 2, {"/nonexistent/spec.json"});
  add_spec("spec: not JSON", "{\"op\": ", {"JSON"});
  add_spec("spec: empty file", "", {"JSON"});
  add_spec("spec: unknown op", spec("customop::no_such_op", "[]"), {"customop::no_such_op"});
  add_spec("spec: low > high",
           spec("customop::rms_norm",
                R"([{"tensor": {"shape": [2, 3], "init": "uniform", "low": 2, "high": 1}},)"
                R"( {"tensor": {"shape": [3]}}])"),
           {"low", "high"});
  add_spec(
      "spec: negative size",
      spec("customop::rms_norm", R"([{"tensor": {"shape": [-2, 3]}}, {"tensor": {"shape": [3]}}])"),
      {"shape", "-2"});
  add_spec("spec: a string where a tensor goes",
           spec("customop::rms_norm", R"(["x", {"tensor": {"shape": [3]}}])"), {"input"});
  add_spec("spec: too many arguments",
           spec("customop::max_along", R"([{"tensor": {"shape": [3]}}, 0, false, 1, 2])"),
           {"customop::max_along", "arguments"});
  add_spec("spec: values of the wrong shape",
           spec("customop::rms_norm",
                R"([{"tensor": {"shape": [2, 3], "values": [1, 2]}}, {"tensor": {"shape": [3]}}])"),
           {"values"});
  add_spec("spec: unknown dtype",
           spec("customop::rms_norm",
                R"([{"tensor": {"shape": [3], "dtype": "float13"}}, {"tensor": {"shape": [3]}}])"),
           {"float13"});
  add("--load: no such file", "--load /nonexistent/lib.so", 2, {"/nonexistent/lib.so"});
  const std::string not_elf = write_file("not_a_library.so", "this is not an ELF file\n");
  add("--load: not a shared library", "--load '" + not_elf + "'", 2, {not_elf});
  add("--eps: negative", "--eps -1", 2, {"eps"});
  add("--device: unknown", "--device tpu", 2, {"device", "tpu"});
  add("--op: matches nothing", "--op 'no_such_*'", 2, {"no_such_*"});
  return c;
}

// ---- damaged model files --------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<Case> model_cases() {
  const std::string s = "model files";
  std::vector<Case> c;
  const std::string good = (scratch_dir() / "tiny_model.pt").string();
  const std::string make =
      std::string("'") + CUSTOMOP_MODEL_MAKER + "' --make-model '" + good + "'";
  if (std::system(make.c_str()) != 0) throw std::runtime_error("could not save the model: " + make);
  const std::string bytes = read_file(good);
  std::string flipped = bytes;  // the zip's central directory (its tail) overwritten
  for (size_t k = flipped.size() > 200 ? flipped.size() - 200 : 0; k < flipped.size(); k += 3) {
    flipped[k] = static_cast<char>(flipped[k] ^ 0x5a);
  }
  const std::map<std::string, std::string> damaged = {
      {"empty", ""},
      {"not a zip", "garbage, not a model\n"},
      {"truncated to half", bytes.substr(0, bytes.size() / 2)},
      {"truncated by one byte", bytes.substr(0, bytes.size() - 1)},
      {"central directory corrupted", flipped},
  };
  int k = 0;
  for (const auto& [what, data] : damaged) {
    const std::string pt = write_file("damaged_" + std::to_string(k) + ".pt", data);
    const std::string pt2 = write_file("damaged_" + std::to_string(k++) + ".pt2", data);
    c.push_back({s, "TorchScript .pt: " + what, [pt] {
                   try {
                     customop::examples::load_scripted_model(pt);
                   } catch (const c10::Error& e) {
                     return Verdict{Outcome::kCheckedError,
                                    std::string(e.what_without_backtrace()).substr(0, 200)};
                   }
                   return Verdict{Outcome::kWrongResult, "loaded a damaged model"};
                 }});
    c.push_back({s, "AOTInductor .pt2: " + what, [pt2] {
                   try {
                     customop::examples::load_aoti_package(pt2);
                   } catch (const c10::Error& e) {
                     return Verdict{Outcome::kCheckedError,
                                    std::string(e.what_without_backtrace()).substr(0, 200)};
                   } catch (const std::exception& e) {
                     return Verdict{Outcome::kCheckedError, e.what()};
                   }
                   return Verdict{Outcome::kWrongResult, "loaded a damaged package"};
                 }});
  }
  c.push_back({s, "TorchScript .pt: intact (control)", [good] {
                 auto m = customop::examples::load_scripted_model(good);
                 at::Tensor x = at::randn({3, 5}, at::kDouble);
                 at::Tensor y = m.forward({x}).toTensor();
                 return y.sizes() == x.sizes() ? Verdict{Outcome::kResult, ""}
                                               : Verdict{Outcome::kWrongResult, "wrong shape"};
               }});
  return c;
}

// ---- the matrix -----------------------------------------------------------------------------

TEST(BadInputMatrix, EveryCaseEndsInACorrectResultOrANamedError) {
  at::set_num_threads(1);  // no intra-op pool for the forked children to miss
  const std::vector<OpUnderTest> ops = ops_under_test();
  std::vector<Case> cases;
  for (const auto& o : ops) {
    auto samples = o.op->samples(c10::Device(c10::kCPU), at::kDouble);
    ASSERT_FALSE(samples.empty()) << o.op->name();
    // The sample with the most tensors present (a Tensor? given, a Tensor[] of several).
    auto tensors_in = [](const Stack& s) {
      size_t n = 0;
      for (const auto& v : s)
        n += v.isTensor() ? 1 : v.isTensorList() ? v.toTensorList().size() : 0;
      return n;
    };
    const Stack sample =
        std::max_element(samples.begin(), samples.end(), [&](const auto& a, const auto& b) {
          return tensors_in(a.args) < tensors_in(b.args);
        })->args;
    for (const auto& v : variants_for(o, sample)) {
      cases.push_back(
          {o.op->name(), v.label, [&o, sample, v] { return run_op_variant(o, sample, v); }});
    }
  }
  for (auto& c : registration_cases()) cases.push_back(std::move(c));
  for (auto& c : cli_cases()) cases.push_back(std::move(c));
  for (auto& c : model_cases()) cases.push_back(std::move(c));

  std::map<Outcome, int> counts;
  std::map<std::string, std::array<int, 3>> per_section;  // cases, results, errors checked
  std::vector<std::string> failures;
  int skipped = 0;
  for (const auto& c : cases) {
    const Verdict v = run_isolated(c.body, kLimit);
    if (v.outcome == Outcome::kResult && v.detail == "skipped") {
      ++skipped;
      continue;
    }
    ++counts[v.outcome];
    auto& row = per_section[c.section];
    ++row[0];
    if (v.outcome == Outcome::kResult) ++row[1];
    if (v.outcome == Outcome::kCheckedError) ++row[2];
    if (v.outcome != Outcome::kResult && v.outcome != Outcome::kCheckedError) {
      failures.push_back(std::string(customop::testing::outcome_name(v.outcome)) + ": " +
                         c.section + " / " + c.label + ": " + v.detail);
    }
  }
  int total = 0;
  for (const auto& [outcome, n] : counts) total += n;
  std::cout << "section                      cases  results  errors checked\n";
  for (const auto& [section, row] : per_section) {
    std::printf("%-28s %5d  %7d  %14d\n", section.c_str(), row[0], row[1], row[2]);
  }
  for (const auto& f : failures) std::cout << "  " << f << "\n";
  std::cout << "bad-input matrix: " << total << " cases, " << counts[Outcome::kCrash]
            << " crashes, " << counts[Outcome::kCheckedError] << " errors checked ("
            << counts[Outcome::kResult] << " correct results, " << counts[Outcome::kHang]
            << " hangs, " << counts[Outcome::kBadError] << " bad errors, "
            << counts[Outcome::kWrongResult] << " wrong results; " << skipped
            << " variants not applicable)\n";
  EXPECT_EQ(counts[Outcome::kCrash], 0);
  EXPECT_EQ(counts[Outcome::kHang], 0);
  EXPECT_EQ(counts[Outcome::kBadError], 0);
  EXPECT_EQ(counts[Outcome::kWrongResult], 0);
  EXPECT_GT(counts[Outcome::kCheckedError], 0);
  EXPECT_GT(counts[Outcome::kResult], 0);
  std::filesystem::remove_all(scratch_dir());
}

// The harness itself: a crash, a hang and a wrong verdict in a child are seen as such.
TEST(Isolated, CountsACrashAHangAndAVerdict) {
  using customop::testing::outcome_name;
  const auto crash = run_isolated(
      []() -> Verdict {
        std::raise(SIGSEGV);
        return {};
      },
      kLimit);
  EXPECT_EQ(crash.outcome, Outcome::kCrash) << outcome_name(crash.outcome) << crash.detail;
  const auto hang = run_isolated(
      []() -> Verdict {
        for (;;) ::pause();
      },
      std::chrono::seconds(1));
  EXPECT_EQ(hang.outcome, Outcome::kHang) << outcome_name(hang.outcome);
  const auto wrong = run_isolated([] { return Verdict{Outcome::kWrongResult, "x"}; }, kLimit);
  EXPECT_EQ(wrong.outcome, Outcome::kWrongResult);
  EXPECT_EQ(wrong.detail, "x");
}

}  // namespace
