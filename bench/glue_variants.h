#pragma once
// The four ways glue_bench and glue_count run y = x * alpha forward + backward:
//   customop_by_name   a customop op (dispatcher + generated autograd Function + by-name grads)
//   customop_typed     the same op with typed grads (an aggregate, no name lookup)
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

using Forward = std::function<at::Tensor(const at::Tensor&)>;

struct Variant {
  std::string_view name;  // column name in bench/run's table
  Forward forward;
};

/// The variants, in table order. Defining the ops happens on the first call.
inline std::array<Variant, 4> variants() {
  return {{
      {"customop_by_name",
       [](const at::Tensor& x) {
         return by_name_op()(ScaleArgs{x, 2.0});
       }},
      {"customop_typed",
       [](const at::Tensor& x) {
         return typed_op()(ScaleArgs{x, 2.0});
       }},
      {"autograd_function", [](const at::Tensor& x) { return ScaleFunction::apply(x, 2.0); }},
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
