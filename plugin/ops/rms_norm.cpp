// customop::rms_norm: schema, checks, backward formula, samples, registration.

#include "detail/rms_norm.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/rsqrt.h>
#include <c10/core/GradMode.h>

#include <utility>

namespace customop::ops {

namespace detail {

void check_rms_norm_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                         double eps, c10::DeviceType device) {
  check_same_device(op, "weight", weight, "input", input);
  check_floating(op, "input", input, device);
  check_same_dtype(op, "weight", weight, "input", input);
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have shape [..., D] (at least 1 dim), but got a 0-d tensor");
  // NB: sym_size/sym_sizes, so the fake kernel keeps symbolic shapes symbolic.
  const c10::SymInt d = input.sym_size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.sym_size(0) == d, op, ": weight must have shape [D] = [",
              d, "], but got ", weight.sym_sizes());
  TORCH_CHECK_VALUE(eps >= 0, op, ": eps must be >= 0, but got ", eps);
}

void check_rms_norm(const RmsNormArgs& a, c10::DeviceType device) {
  check_rms_norm_args("rms_norm", a.input, a.weight, a.eps, device);
}

}  // namespace detail

namespace {

struct RmsNormSaved {
  at::Tensor input;
  at::Tensor weight;
  double eps;
};

struct RmsNormGrads {
  at::Tensor input;
  at::Tensor weight;
};

RmsNormSaved rms_norm_save(const RmsNormArgs& a, const at::Tensor& /*output*/) {
  return {a.input, a.weight, a.eps};
}

// grad_input = r g w - r^3 mean(g w x) x and grad_weight = g x r summed over the leading
// dims, r = rsqrt(mean(x^2) + eps): the op customop::rms_norm_backward (its formula and
// kernels: rms_norm_backward.cpp), one pass of its kernels. The ATen formula instead where
// its graph is wanted or the kernels cannot run: under grad mode (create_graph=True, and
// torch.func's transforms, whose VJPs record graphs), and on tensor subclasses (DTensor and
// fake tensors: their Python key), which handle ATen ops as they handle them in the forward.
RmsNormGrads rms_norm_backward(const RmsNormSaved& s, const at::Tensor& grad) {
  const RmsNormBackwardArgs a{grad, s.input, s.weight, s.eps};
  auto [grad_input, grad_weight] =
      at::GradMode::is_enabled() || detail::any_subclass({&grad, &s.input, &s.weight})
          ? detail::rms_norm_backward_composite(a)
          : rms_norm_backward_op()(a);
  return {std::move(grad_input), std::move(grad_weight)};
}

// JVP, by differentiating y = x * r * w with r = rsqrt(mean(x^2) + eps) over the last dim:
//   dr = -r^3 * mean(x * dx)        (d rsqrt(u) = -u^(-3/2) du / 2, du = 2 mean(x dx))
//   dy = (dx * r + x * dr) * w + x * r * dw
// An undefined tangent is zero; float16/bfloat16 in float32, as the forward reduces.
at::Tensor rms_norm_jvp(const RmsNormArgs& p, const RmsNormArgs& t, const at::Tensor& /*out*/) {
  if (!t.input.defined() && !t.weight.defined()) return {};
  const auto dtype = p.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor x = p.input.to(acc);
  const at::Tensor w = p.weight.to(acc);
  const at::Tensor r = at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + p.eps);
  at::Tensor dy;
  if (t.input.defined()) {
    const at::Tensor dx = t.input.to(acc);
    const at::Tensor dr = -r.pow(3) * (x * dx).mean(-1, /*keepdim=*/true);
    dy = (dx * r + x * dr) * w;
  }
  if (t.weight.defined()) {
    const at::Tensor dw_term = x * r * t.weight.to(acc);
    dy = dy.defined() ? dy + dw_term : dw_term;
  }
  return dy.to(dtype);
}

// Output metadata, the one statement of it: input's shape and dtype, contiguous. The fake
// (Meta) kernel and the CPU/CUDA kernels' outputs come from it; the checks run on every device.
TensorSpec rms_norm_shape(const RmsNormArgs& a) {
  detail::check_rms_norm(a, a.input.device().type());
  return TensorSpec::like(a.input);
}

std::vector<std::pair<std::string, RmsNormArgs>> rms_norm_samples(c10::Device dev,
                                                                  c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"contiguous [4, 8]",
       {sample_randn({4, 8}, 1, dev, dt), sample_randn({8}, 2, dev, dt), 1e-6}},
      {"transposed input [5, 6]",
       {sample_randn({6, 5}, 3, dev, dt).t(), sample_randn({6}, 4, dev, dt), 1e-5}},
      {"sliced 3-d input and strided weight [2, 3, 7]",
       {sample_randn({2, 3, 14}, 5, dev, dt).slice(-1, 0, 14, 2),
        sample_randn({14}, 6, dev, dt).slice(0, 0, 14, 2), 1e-3}},
      {"1-d input [33]", {sample_randn({33}, 7, dev, dt), sample_randn({33}, 8, dev, dt), 1e-6}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck (each op rounds).
at::Tensor rms_norm_reference(const RmsNormArgs& a) {
  return a.input * at::rsqrt(a.input.square().mean(-1, /*keepdim=*/true) + a.eps) * a.weight;
}

}  // namespace

Op<RmsNormArgs>& rms_norm_op() {
  static Op<RmsNormArgs>& op = []() -> Op<RmsNormArgs>& {
    auto& o = define<RmsNormArgs>(
        "customop::rms_norm(Tensor input, Tensor weight, float eps=1e-6) -> Tensor");
    o.shape(&rms_norm_shape);
    // customop::rms_norm_(Tensor(a!) input, Tensor weight, float eps=1e-6) -> Tensor(a!): the
    // result has input's sizes and dtype, so it can be written back (an inference server's
    // residual stream). Differentiable through rms_norm's backward (a training loop's
    // x = rms_norm_(x, w) keeps its grads), at the cost of one copy of input under grad mode.
    // Without grad the kernels write input directly (kDirect: each row is read in full, for its
    // sum of squares, before any of it is written).
    o.inplace_variant(InplaceGrad::kThroughFunctional, InplaceWrite::kDirect);
    o.impl(c10::DeviceType::CPU, &detail::rms_norm_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::rms_norm_cuda);
#endif
    o.reference(&rms_norm_reference);
    // Sharding: rows are independent; the normalized last dim stays whole on every rank
    // (weight [D] aligns with it, so it is replicated).
    o.sharding(Sharding::reduction({-1}));
    // Autocast: float32, as torch's own norms (layer_norm, group_norm): a mean of squares and
    // its rsqrt want a wide accumulator and range; the output is float32.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&rms_norm_save, &rms_norm_backward);
    o.impl_jvp(&rms_norm_jvp);
    // vmap: rows are independent (the normalized/pointwise dims come last).
    o.vmap(customop::BatchRule::rows({"input"}));
    o.samples(&rms_norm_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& rms_norm_registered = rms_norm_op();
}  // namespace

}  // namespace customop::ops
