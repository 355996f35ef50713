#pragma once
/// \file
/// `customop::clamp_count`: torch.clamp(input, min, max) plus the number of elements the
/// clamp changed, ((input < min) | (input > max)).sum().

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace customop::ops {

/// Arguments of `customop::clamp_count(Tensor input, float min, float max)
/// -> (Tensor output, Tensor clamped)`.
struct ClampCountArgs {
  /// x, any shape (0-d included; any strides), float32 or float64 (CPU and CUDA), float16
  /// or bfloat16 (CPU and CUDA; compared in float32, exact). Differentiable.
  at::Tensor input;
  /// Lower bound, in input's units; rounded to input's dtype (as torch.clamp). No default.
  double min;
  /// Upper bound, in input's units, >= min; rounded to input's dtype. No default.
  double max;
};

/// (output, clamped): output = min(max(x, min), max) as a new contiguous tensor of input's
/// shape and dtype (NaN stays NaN); clamped = number of elements with x < min or x > max
/// (NaN counts as neither), a 0-dim int64 tensor on input's device.
///
/// NB: the count is a 0-dim tensor, not an `int`: it depends on the data, so no fake kernel
/// could compute it (under torch.compile / torch.export an int return would need an unbacked
/// symbol and a graph break or a host sync at every call); as a tensor it stays on the device
/// (no stream sync on CUDA) and traces like any other output. `.item<int64_t>()` reads it.
using ClampCountResult = std::tuple<at::Tensor, at::Tensor>;

/// Clamps and counts the clamped elements.
///
/// - Backward: grad of input = g where min <= x <= max (bounds included), else 0, also at
///   NaN. That is torch.clamp's convention up to torch 2.14; torch 2.15's clamp gives 0 at a
///   scalar bound. The count is not differentiable.
/// \returns the op `customop::clamp_count`, registered when libcustomop_ops loads; it returns
///          ClampCountResult (output, clamped) as described there.
/// \throws c10::TypeError naming `clamp_count` and the argument for an unsupported dtype;
///         c10::ValueError when min > max or either is NaN.
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::ClampCountArgs;
///   at::Tensor x = at::randn({1000});
///   auto [y, clamped] = customop::ops::clamp_count_op()(ClampCountArgs{.input = x, .min = -1.0, .max = 1.0});
///   int64_t n = clamped.item<int64_t>();
Op<ClampCountArgs, ClampCountResult>& clamp_count_op();

}  // namespace customop::ops
