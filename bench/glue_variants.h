#pragma once
// The six ways glue_bench and glue_count run y = x * alpha forward + backward:
//   customop_by_name   a customop op (dispatcher + generated autograd Function + by-name grads)
//   customop_typed     the same op with typed grads (an aggregate, no name lookup)
//   customop_shaped    the by-name op with a shape function (op.shape): customop allocates the
//                      output from it and the kernel writes into it (mul_out)
//   autograd_function_out  customop_shaped's math by hand: a torch::autograd::Function whose
//                      forward allocates (at::empty_like) and writes with mul_out
//   autograd_function  a hand-written torch::autograd::Function doing the same math
//   aten_composite     the plain ATen composite (x * alpha, autograd's MulBackward)
// The math is one ATen mul each way, so any difference is glue, not kernel.

#include <customop/customop.h>

#include <torch/torch.h>

#include <array>
#include <functional>
#include <string_view>

namespace customop::bench {

struct ScaleArgs {
  at::Tensor x;  // [n] float32
  double alpha;  // scale factor, unitless
};
struct ScaleSaved {
  double alpha;  // the forward's alpha
};
struct ScaleGrads {
  at::Tensor x;  // grad of x, [n]
};

inline Op<ScaleArgs>& by_name_op() {
  static Op<ScaleArgs>& op = []() -> Op<ScaleArgs>& {
    auto& o = define<ScaleArgs>("glue_bench::scale(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_save_for_backward(
        [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
    o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
      return Grads{{"x", g * s.alpha}};
    });
    return o;
  }();
  return op;
}

inline Op<ScaleArgs>& typed_op() {
  static Op<ScaleArgs>& op = []() -> Op<ScaleArgs>& {
    auto& o = define<ScaleArgs>("glue_bench::scale_typed(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_autograd(
        [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; },
        [](const ScaleSaved& s, const at::Tensor& g) { return ScaleGrads{g * s.alpha}; });
    return o;
  }();
  return op;
}

// The output as the shape function states it: x's sizes, dtype and device, contiguous.
inline TensorSpec scale_shape(const ScaleArgs& a) { return TensorSpec::like(a.x); }

inline Op<ScaleArgs>& shaped_op() {
  static Op<ScaleArgs>& op = []() -> Op<ScaleArgs>& {
    auto& o = define<ScaleArgs>("glue_bench::scale_shaped(Tensor x, float alpha) -> Tensor");
    o.shape(&scale_shape);
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a, const at::Tensor& out) {
      at::mul_out(const_cast<at::Tensor&>(out), a.x, a.alpha);
    });
    o.impl_save_for_backward(
        [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
    o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
      return Grads{{"x", g * s.alpha}};
    });
    return o;
  }();
  return op;
}

struct ScaleFunction : torch::autograd::Function<ScaleFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double alpha) {
    ctx->saved_data["alpha"] = alpha;
    return x * alpha;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {g[0] * ctx->saved_data["alpha"].toDouble(), at::Tensor()};
  }
};

struct ScaleOutFunction : torch::autograd::Function<ScaleOutFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double alpha) {
    ctx->saved_data["alpha"] = alpha;
    at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
    at::mul_out(out, x, alpha);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {g[0] * ctx->saved_data["alpha"].toDouble(), at::Tensor()};
  }
};

using Forward = std::function<at::Tensor(const at::Tensor&)>;

struct Variant {
  std::string_view name;  // column name in bench/run's table
  Forward forward;
};

/// The variants, in table order. Defining the ops happens on the first call.
inline std::array<Variant, 6> variants() {
  return {{
      {"customop_by_name",
       [](const at::Tensor& x) {
         return by_name_op()(ScaleArgs{x, 2.0});
       }},
      {"customop_typed",
       [](const at::Tensor& x) {
         return typed_op()(ScaleArgs{x, 2.0});
       }},
      {"customop_shaped",
       [](const at::Tensor& x) {
         return shaped_op()(ScaleArgs{x, 2.0});
       }},
      {"autograd_function", [](const at::Tensor& x) { return ScaleFunction::apply(x, 2.0); }},
      {"autograd_function_out",
       [](const at::Tensor& x) { return ScaleOutFunction::apply(x, 2.0); }},
      {"aten_composite", [](const at::Tensor& x) { return x * 2.0; }},
  }};
}

/// One forward + backward, as a training step would: y = f(x), then backward with g, then the
/// grad is read and dropped so every iteration allocates it anew.
inline void step(const Forward& forward, const at::Tensor& x, const at::Tensor& g) {
  at::Tensor y = forward(x);
  torch::autograd::backward({y}, {g});
  x.mutable_grad().reset();
}

}  // namespace customop::bench
