// The fused bias + leaky ReLU by hand, for comparison with fused_leaky_relu_customop.cpp: plain
// TORCH_LIBRARY + torch::autograd::Function, the way StyleGAN2-style op libraries register a
// forward op and a hand-written backward op that is itself differentiable. Same schemas,
// kernels and behaviour; bench/RESULTS.md counts the lines of both.
#include "tensor_kernels.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace flrelu_by_hand {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> call_backward_op(const at::Tensor& grad, const at::Tensor& out,
                                                    double negative_slope, double scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("flrelu_by_hand::fused_bias_leaky_relu_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double,
                                                    double)>();
  return op.call(grad, out, negative_slope, scale);
}

void save(AutogradContext* ctx, const at::Tensor& out, double negative_slope, double scale) {
  ctx->save_for_backward({out});
  ctx->saved_data["negative_slope"] = negative_slope;
  ctx->saved_data["scale"] = scale;
}

// d(grad_x, grad_bias)/d grad is the backward kernel again; out is piecewise constant.
struct BackwardFunction : torch::autograd::Function<BackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& out,
                               double negative_slope, double scale) {
    save(ctx, out, negative_slope, scale);
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [grad_x, grad_bias] = call_backward_op(grad, out, negative_slope, scale);
    return {grad_x, grad_bias};
  }
  static variable_list backward(AutogradContext* ctx, variable_list gg) {
    const at::Tensor out = ctx->get_saved_variables()[0];
    const at::Tensor grad = gg[0] + flrelu::bias_as_input(gg[1], out);
    return {std::get<0>(call_backward_op(grad, out, ctx->saved_data["negative_slope"].toDouble(),
                                         ctx->saved_data["scale"].toDouble())),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct ForwardFunction : torch::autograd::Function<ForwardFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            double negative_slope, double scale) {
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("flrelu_by_hand::fused_bias_leaky_relu", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, double)>();
    at::Tensor out;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = op.call(x, bias, negative_slope, scale);
    }
    save(ctx, out, negative_slope, scale);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto [grad_x, grad_bias] = call_backward_op(grads[0], ctx->get_saved_variables()[0],
                                                ctx->saved_data["negative_slope"].toDouble(),
                                                ctx->saved_data["scale"].toDouble());
    return {grad_x, grad_bias, at::Tensor(), at::Tensor()};
  }
};

at::Tensor forward_autograd(const at::Tensor& x, const at::Tensor& bias, double negative_slope,
                            double scale) {
  return ForwardFunction::apply(x, bias, negative_slope, scale);
}

std::tuple<at::Tensor, at::Tensor> backward_autograd(const at::Tensor& grad, const at::Tensor& out,
                                                     double negative_slope, double scale) {
  auto grads = BackwardFunction::apply(grad, out, negative_slope, scale);
  return {grads[0], grads[1]};
}

}  // namespace

TORCH_LIBRARY(flrelu_by_hand, m) {
  m.def(
      "fused_bias_leaky_relu(Tensor x, Tensor bias, float negative_slope=0.2, "
      "float scale=1.4142135623730951) -> Tensor");
  m.def(
      "fused_bias_leaky_relu_backward(Tensor grad, Tensor out, float negative_slope, "
      "float scale) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(flrelu_by_hand, CPU, m) {
  m.impl("fused_bias_leaky_relu", &flrelu::fused_forward);
  m.impl("fused_bias_leaky_relu_backward", &flrelu::fused_backward);
}

TORCH_LIBRARY_IMPL(flrelu_by_hand, CUDA, m) {
  m.impl("fused_bias_leaky_relu", &flrelu::fused_forward);
  m.impl("fused_bias_leaky_relu_backward", &flrelu::fused_backward);
}

TORCH_LIBRARY_IMPL(flrelu_by_hand, Meta, m) {
  m.impl("fused_bias_leaky_relu", &flrelu::fused_forward_meta);
  m.impl("fused_bias_leaky_relu_backward", &flrelu::fused_backward_meta);
}

TORCH_LIBRARY_IMPL(flrelu_by_hand, Autograd, m) {
  m.impl("fused_bias_leaky_relu", &forward_autograd);
  m.impl("fused_bias_leaky_relu_backward", &backward_autograd);
}

}  // namespace flrelu_by_hand
