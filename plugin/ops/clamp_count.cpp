// customop::clamp_count: schema, checks, backward formula, samples, registration.

#include "detail/clamp_count.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

namespace customop::ops {

namespace detail {

void check_clamp_count_args(const char* op, const at::Tensor& input, double min, double max,
                            c10::DeviceType device) {
  check_floating(op, "input", input, device);
  TORCH_CHECK_VALUE(min <= max, op, ": min must be <= max (and neither NaN), but got min = ", min,
                    " and max = ", max);
}

void check_clamp_count(const ClampCountArgs& a, c10::DeviceType device) {
  check_clamp_count_args("clamp_count", a.input, a.min, a.max, device);
}

}  // namespace detail

namespace {

struct ClampCountSaved {
  at::Tensor input;
  double min;
  double max;
};

struct ClampCountGrads {
  at::Tensor input;
};

ClampCountSaved clamp_count_save(const ClampCountArgs& a, const ClampCountResult& /*out*/) {
  return {a.input, a.min, a.max};
}

// g where min <= x <= max (the bounds included; torch.clamp's up to 2.14), 0 elsewhere and at
// NaN: the op customop::clamp_count_backward (clamp_count_backward.cpp), one pass of its
// kernels; a tensor subclass (DTensor, fake tensors: the Python key) takes the same formula in
// ATen ops, which it handles as in the forward.
ClampCountGrads clamp_count_backward(const ClampCountSaved& s, const at::Tensor& grad,
                                     const at::Tensor& /*grad_clamped*/) {
  const ClampCountBackwardArgs a{grad, s.input, s.min, s.max};
  return {detail::any_subclass({&grad, &s.input}) ? detail::clamp_count_backward_composite(a)
                                                  : clamp_count_backward_op()(a)};
}

// JVP: d output = dx where min <= x <= max (as the backward), 0 elsewhere; the count is an
// integer (no tangent).
ClampCountResult clamp_count_jvp(const ClampCountArgs& p, const ClampCountArgs& t,
                                 const ClampCountResult& /*out*/) {
  if (!t.input.defined()) return {};
  const at::Tensor inside = (p.input >= p.min).logical_and_(p.input <= p.max);
  return {at::where(inside, t.input, at::zeros_like(t.input)), at::Tensor()};
}

// Output metadata, the one statement of it: output of input's shape and dtype (contiguous)
// and the 0-dim int64 count. The fake (Meta) kernel and the CPU/CUDA kernels' outputs come
// from it; the checks run on every device.
std::tuple<TensorSpec, TensorSpec> clamp_count_shape(const ClampCountArgs& a) {
  detail::check_clamp_count(a, a.input.device().type());
  const TensorSpec output = TensorSpec::like(a.input);
  return {output, output.sized({}).typed(at::kLong)};
}

// Normal values moved at least 0.05 away from both bounds (finite differences must not
// straddle a kink). Bounds -0.5 and 0.7.
at::Tensor away_from_bounds(at::IntArrayRef sizes, uint64_t seed, c10::Device dev,
                            c10::ScalarType dt) {
  at::Tensor x = detail::sample_randn(sizes, seed, c10::kCPU, at::kDouble);
  x = at::where((x + 0.5).abs() < 0.1, x + 0.2, x);
  x = at::where((x - 0.7).abs() < 0.1, x + 0.2, x);
  return x.to(at::TensorOptions().device(dev).dtype(dt));
}

std::vector<std::pair<std::string, ClampCountArgs>> clamp_count_samples(c10::Device dev,
                                                                        c10::ScalarType dt) {
  return {
      {"contiguous [4, 8]", {away_from_bounds({4, 8}, 61, dev, dt), -0.5, 0.7}},
      {"transposed [5, 6]", {away_from_bounds({6, 5}, 62, dev, dt).t(), -0.5, 0.7}},
      {"sliced 3-d [2, 3, 4]",
       {away_from_bounds({2, 3, 8}, 63, dev, dt).slice(2, 1, 8, 2), -0.5, 0.7}},
      {"0-d", {away_from_bounds({}, 64, dev, dt), -0.5, 0.7}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck; where() passes the grad
// at the bounds, as the op's backward.
ClampCountResult clamp_count_reference(const ClampCountArgs& a) {
  const at::Tensor lo = at::scalar_tensor(a.min, a.input.options()).to(a.input.scalar_type());
  const at::Tensor hi = at::scalar_tensor(a.max, a.input.options()).to(a.input.scalar_type());
  const at::Tensor below = a.input < lo;
  const at::Tensor above = a.input > hi;
  const at::Tensor y = at::where(below, lo, at::where(above, hi, a.input));
  return {y, (below | above).sum()};
}

}  // namespace

Op<ClampCountArgs, ClampCountResult>& clamp_count_op() {
  static Op<ClampCountArgs, ClampCountResult>& op = []() -> Op<ClampCountArgs, ClampCountResult>& {
    auto& o = define<ClampCountArgs, ClampCountResult>(
        "customop::clamp_count(Tensor input, float min, float max) -> "
        "(Tensor output, Tensor clamped)");
    o.shape(&clamp_count_shape);
    o.impl(c10::DeviceType::CPU, &detail::clamp_count_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::clamp_count_cuda);
#endif
    o.reference(&clamp_count_reference);
    // Sharding: the output is pointwise; `clamped` counts the elements a rank holds, so the
    // count of a sharded input is the sum over ranks (Partial).
    o.sharding(Sharding::pointwise().partial_sum("clamped"));
    // Autocast: float32. Comparisons only: float32 holds every float16/bfloat16 value, so the
    // cast changes no result, and every device's kernel takes float32.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&clamp_count_save, &clamp_count_backward, {true, false});
    o.impl_jvp(&clamp_count_jvp);
    // vmap: one call per example; the count is a total over the whole input, so a batched
    // call would mix the examples.
    o.vmap(customop::BatchRule::loop());
    o.samples(&clamp_count_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& clamp_count_registered = clamp_count_op();
}  // namespace

}  // namespace customop::ops
