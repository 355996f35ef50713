// The fused bias + leaky ReLU with customop: forward op, backward op with its own formula
// (double backward), fake kernels. Compare fused_leaky_relu_by_hand.cpp.
#include "fused_leaky_relu.h"
#include "tensor_kernels.h"

#include <ATen/TensorOperators.h>

namespace flrelu {

customop::Op<Args>& fused_bias_leaky_relu_op() {
  static customop::Op<Args>& op = []() -> customop::Op<Args>& {
    auto& fwd = customop::define<Args>("flrelu::fused_bias_leaky_relu");
    auto forward = [](const Args& a) {
      return fused_forward(a.x, a.bias, a.negative_slope, a.scale);
    };
    fwd.impl(c10::DeviceType::CPU, forward);
    fwd.impl(c10::DeviceType::CUDA, forward);
    fwd.impl_fake(
        [](const Args& a) { return fused_forward_meta(a.x, a.bias, a.negative_slope, a.scale); });
    auto& bwd = fwd.define_backward<BackwardArgs>([](const Args& a, const at::Tensor& out) {
      return BackwardArgs{.out = out, .negative_slope = a.negative_slope, .scale = a.scale};
    });
    auto backward = [](const BackwardArgs& b) {
      return fused_backward(b.grad, b.out, b.negative_slope, b.scale);
    };
    bwd.impl(c10::DeviceType::CPU, backward);
    bwd.impl(c10::DeviceType::CUDA, backward);
    bwd.impl_fake([](const BackwardArgs& b) {
      return fused_backward_meta(b.grad, b.out, b.negative_slope, b.scale);
    });
    // d(grad_x, grad_bias)/d grad is the backward kernel again; out is piecewise constant.
    bwd.impl_autograd(
        [](const BackwardArgs& b, const std::tuple<at::Tensor, at::Tensor>&) {
          return BackwardArgs{.out = b.out, .negative_slope = b.negative_slope, .scale = b.scale};
        },
        [&bwd](const BackwardArgs& s, const at::Tensor& gg_x, const at::Tensor& gg_bias) {
          BackwardArgs again = s;
          again.grad = gg_x + bias_as_input(gg_bias, s.out);
          return customop::Grads{{"grad", std::get<0>(bwd(again))}, {"out", std::nullopt}};
        });
    add_transforms(fwd, bwd);  // torch.func: fused_leaky_relu_transforms.cpp
    return fwd;
  }();
  return op;
}

namespace {
[[maybe_unused]] const auto& registered = fused_bias_leaky_relu_op();
}  // namespace

}  // namespace flrelu
