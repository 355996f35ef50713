#pragma once
/// \file
/// downstream::smooth_abs(Tensor x, float eps) -> Tensor: y = sqrt(x^2 + eps^2), a smooth |x|
/// (the pseudo-Huber form; Charbonnier, "Two deterministic half-quadratic regularization
/// algorithms", 1994), defined with customop outside the customop tree.

#include <customop/customop.h>

namespace downstream {

/// The op's arguments, in schema order.
struct SmoothAbsArgs {
  at::Tensor x;  ///< input, any shape, float32 or float64, CPU or CUDA
  double eps;    ///< smoothing width, > 0; same unit as x
};

/// The op, defined (and registered with the dispatcher) on first use or when the library loads.
/// \returns customop::Op whose call returns y: x's shape and dtype, contiguous.
/// \throws c10::Error (from the call) when x is not floating or eps <= 0.
/// Example:
///   auto& op = downstream::smooth_abs_op();
///   at::Tensor y = op({.x = torch::randn({8}), .eps = 0.1});
///   // torch.ops.downstream.smooth_abs(x, 0.1) once the library is loaded
customop::Op<SmoothAbsArgs>& smooth_abs_op();

}  // namespace downstream
