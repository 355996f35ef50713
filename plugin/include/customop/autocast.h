#pragma once
/// \file
/// `customop::AutocastPolicy`: how an op runs under torch.autocast / at::autocast, declared
/// with the op (`op.autocast(policy)`, beside impl_fake).
///
/// Example:
///   customop::define<RmsNormArgs>("myns::rms_norm(Tensor input, Tensor weight) -> Tensor")
///       .impl(c10::DeviceType::CPU, &rms_norm_cpu)
///       .autocast(customop::AutocastPolicy::kFloat32);  // a reduction: accumulate in float32

#include <cstdint>
#include <string_view>

namespace customop {

/// What an op's autocast kernel (dispatch keys AutocastCPU and AutocastCUDA) does with its
/// floating tensor arguments on the autocast device before the op runs, mirroring the lists
/// of torch's own ops (torch/csrc/autograd autocast_mode.cpp: fp32, lower_precision_fp,
/// promote). Tensors on another device and non-floating tensors are never cast; float64 is
/// never cast down. Tensor, Tensor? and Tensor[] arguments are all cast. The op then runs
/// once, below autocast (its own nested ops are not autocast), and its outputs keep the dtype
/// it computes them in: a kFloat32 op returns float32 under a bfloat16 autocast, as torch's
/// softmax and layer_norm do. The casts are recorded by autograd, so each grad comes back in
/// its input's dtype.
/// An op without a policy gets torch's fallthrough: it sees the dtypes the ops before it
/// produced (under autocast, often a bfloat16 activation beside a float32 parameter), and its
/// kernels' dtype checks decide.
enum class AutocastPolicy : std::uint8_t {
  /// Cast float16/bfloat16 tensors to float32 (torch's fp32 list: reductions, norms, softmax,
  /// losses: ops whose accuracy needs a wide accumulator or range).
  kFloat32,
  /// Cast float32 tensors to the autocast dtype (torch's lower_precision_fp list: matmul,
  /// convolution, linear: ops fast in low precision whose accumulation the kernel widens).
  kLowerPrecision,
  /// Cast every floating tensor to the widest floating dtype among them (torch's promote
  /// list: cat, stack, addcmul: pointwise ops over several tensors of mixed dtypes).
  kPromote,
  /// Refuse to run under autocast: c10::Error naming the op and where it was declared (an op
  /// whose kernel needs exact dtypes the caller must choose).
  kRefuse,
};

/// Names a policy, as messages spell it.
/// \param policy  the policy
/// \returns "float32", "lower_precision", "promote" or "refuse"
/// \throws nothing.
/// Example:
///   std::cout << customop::autocast_policy_name(customop::AutocastPolicy::kPromote);
std::string_view autocast_policy_name(AutocastPolicy policy);

}  // namespace customop
