#pragma once
/// \file
/// StyleGAN2's fused bias + leaky ReLU registered twice, for comparison: with customop
/// (`flrelu::fused_bias_leaky_relu`, fused_leaky_relu_customop.cpp) and with plain
/// TORCH_LIBRARY + torch::autograd::Function (`flrelu_by_hand::fused_bias_leaky_relu`,
/// fused_leaky_relu_by_hand.cpp). Same schema, kernels (tensor_kernels.h) and behaviour:
///
///   fused_bias_leaky_relu(Tensor x, Tensor bias, float negative_slope=0.2,
///                         float scale=1.4142135623730951) -> Tensor
///   fused_bias_leaky_relu_backward(Tensor grad, Tensor out, float negative_slope,
///                                  float scale) -> (Tensor, Tensor)
///
/// out = scale * leaky_relu(x + bias, negative_slope) (x: [N, C, *], bias: [C]); the backward
/// op is the hand-written backward kernel, itself differentiable (double backward), as
/// StyleGAN2's FusedLeakyReLUFunctionBackward.

#include <customop/op.h>

#include <tuple>

namespace flrelu {

/// The forward op's named arguments (customop registration).
struct Args {
  at::Tensor x;
  at::Tensor bias;
  double negative_slope = 0.2;
  double scale = 1.4142135623730951;  // sqrt(2)
};

/// The backward op's named arguments: `grad` receives the grad of the forward's output
/// (`{}`: designated initializers may leave it out without -Wmissing-field-initializers).
struct BackwardArgs {
  at::Tensor grad{};
  at::Tensor out;
  double negative_slope;
  double scale;
};

/// The customop-registered forward op (defined on first use and when the library loads).
customop::Op<Args>& fused_bias_leaky_relu_op();

/// Adds what torch.func needs (JVPs, batching rules) to both ops (fused_leaky_relu_transforms.cpp).
void add_transforms(customop::Op<Args>& fwd,
                    customop::Op<BackwardArgs, std::tuple<at::Tensor, at::Tensor>>& bwd);

}  // namespace flrelu
