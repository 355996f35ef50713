// customop::clamp_count_backward: schema, checks, the ATen formula (reference and the
// subclass path of clamp_count's backward), its own backward and JVP, samples, registration.

#include "detail/checks.h"
#include "detail/clamp_count.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

namespace customop::ops {

namespace detail {

void check_clamp_count_backward(const ClampCountBackwardArgs& a, c10::DeviceType device) {
  check_clamp_count_args("clamp_count_backward", a.input, a.min, a.max, device);
  check_same_device("clamp_count_backward", "grad", a.grad, "input", a.input);
  check_same_dtype("clamp_count_backward", "grad", a.grad, "input", a.input);
  TORCH_CHECK(a.grad.sym_sizes() == a.input.sym_sizes(),
              "clamp_count_backward: grad must have input's shape ", a.input.sym_sizes(),
              ", but got ", a.grad.sym_sizes());
}

// NB: comparing with the double bounds rounds them to x's dtype, as the forward does.
at::Tensor clamp_count_backward_composite(const ClampCountBackwardArgs& a) {
  const at::Tensor inside = (a.input >= a.min).logical_and_(a.input <= a.max);
  return at::where(inside, a.grad, at::zeros_like(a.grad));
}

}  // namespace detail

namespace {

struct ClampCountBackwardGrads {
  at::Tensor grad;
  at::Tensor input;
};

struct ClampCountBackwardSaved {
  at::Tensor input;
  double min;
  double max;
};

ClampCountBackwardSaved clamp_count_backward_save(const ClampCountBackwardArgs& a,
                                                  const at::Tensor& /*out*/) {
  return {a.input, a.min, a.max};
}

// The op is linear in g with the mask of x: its VJP in g is the op again on the cotangent;
// in x it is 0 almost everywhere (no grad).
ClampCountBackwardGrads clamp_count_backward_double_backward(const ClampCountBackwardSaved& s,
                                                             const at::Tensor& c) {
  if (!c.defined()) return {};
  return {clamp_count_backward_op()(ClampCountBackwardArgs{c, s.input, s.min, s.max}), {}};
}

// JVP: likewise, the op on g's tangent.
at::Tensor clamp_count_backward_jvp(const ClampCountBackwardArgs& p,
                                    const ClampCountBackwardArgs& t, const at::Tensor& /*out*/) {
  if (!t.grad.defined()) return {};
  return clamp_count_backward_op()(ClampCountBackwardArgs{t.grad, p.input, p.min, p.max});
}

TensorSpec clamp_count_backward_shape(const ClampCountBackwardArgs& a) {
  detail::check_clamp_count_backward(a, a.input.device().type());
  return TensorSpec::like(a.input);
}

std::vector<std::pair<std::string, ClampCountBackwardArgs>> clamp_count_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  // Inputs away from the bounds -0.5 and 0.7 (the result is piecewise constant in x).
  const auto away = [&](at::IntArrayRef sizes, uint64_t seed) {
    at::Tensor x = sample_randn(sizes, seed, c10::kCPU, at::kDouble);
    x = at::where((x + 0.5).abs() < 0.1, x + 0.2, x);
    x = at::where((x - 0.7).abs() < 0.1, x + 0.2, x);
    return x.to(at::TensorOptions().device(dev).dtype(dt));
  };
  return {
      {"contiguous [4, 8]", {sample_randn({4, 8}, 81, dev, dt), away({4, 8}, 61), -0.5, 0.7}},
      {"transposed [5, 6]",
       {sample_randn({6, 5}, 82, dev, dt).t(), away({6, 5}, 62).t(), -0.5, 0.7}},
      {"sliced 3-d [2, 3, 4]",
       {sample_randn({2, 3, 8}, 83, dev, dt).slice(2, 0, 8, 2),
        away({2, 3, 8}, 63).slice(2, 1, 8, 2), -0.5, 0.7}},
      {"0-d", {sample_randn({}, 84, dev, dt), away({}, 64), -0.5, 0.7}},
  };
}

}  // namespace

Op<ClampCountBackwardArgs>& clamp_count_backward_op() {
  static Op<ClampCountBackwardArgs>& op = []() -> Op<ClampCountBackwardArgs>& {
    auto& o = define<ClampCountBackwardArgs>(
        "customop::clamp_count_backward(Tensor grad, Tensor input, float min, float max) -> "
        "Tensor");
    o.shape(&clamp_count_backward_shape);
    o.impl(c10::DeviceType::CPU, &detail::clamp_count_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::clamp_count_backward_cuda);
#endif
    o.reference(&detail::clamp_count_backward_composite);
    o.sharding(Sharding::pointwise());
    // Autocast: float32, as clamp_count.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&clamp_count_backward_save, &clamp_count_backward_double_backward);
    o.impl_jvp(&clamp_count_backward_jvp);
    // vmap: elementwise, so a batch is more elements.
    o.vmap(customop::BatchRule::rows({"grad", "input"}));
    o.samples(&clamp_count_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& clamp_count_backward_registered = clamp_count_backward_op();
}  // namespace

}  // namespace customop::ops
