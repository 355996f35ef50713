// customop::masked_softmax_backward: schema, checks, the ATen formula (reference and the
// subclass path of masked_softmax's backward), its own backward and JVP, samples, registration.

#include "detail/checks.h"
#include "detail/masked_softmax.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/softmax.h>

namespace customop::ops {

namespace detail {

int64_t check_masked_softmax_backward(const MaskedSoftmaxBackwardArgs& a, c10::DeviceType device) {
  check_floating("masked_softmax_backward", "output", a.output, device);
  check_same_device("masked_softmax_backward", "grad", a.grad, "output", a.output);
  check_same_dtype("masked_softmax_backward", "grad", a.grad, "output", a.output);
  TORCH_CHECK(a.grad.sym_sizes() == a.output.sym_sizes(),
              "masked_softmax_backward: grad must have output's shape ", a.output.sym_sizes(),
              ", but got ", a.grad.sym_sizes());
  return wrap_dim("masked_softmax_backward", a.dim, a.output.dim());
}

at::Tensor masked_softmax_backward_composite(const MaskedSoftmaxBackwardArgs& a) {
  const auto dtype = a.output.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor y = a.output.to(acc);
  const at::Tensor gy = a.grad.to(acc) * y;
  return (gy - y * gy.sum(a.dim, /*keepdim=*/true)).to(dtype);
}

}  // namespace detail

namespace {

struct MaskedSoftmaxBackwardGrads {
  at::Tensor grad;
  at::Tensor output;
};

MaskedSoftmaxBackwardArgs masked_softmax_backward_save(const MaskedSoftmaxBackwardArgs& a,
                                                       const at::Tensor& /*out*/) {
  return a;
}

/// sum(a * b, dim) kept as a size-1 dim, in the compute dtype.
at::Tensor masked_softmax_backward_dot(const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  return (a * b).sum(dim, /*keepdim=*/true);
}

/// t in the compute dtype (float32 for float16/bfloat16).
at::Tensor masked_softmax_backward_widen(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

// Double backward (the formulas of the header): out = y g - y s, s = sum(g y). With the
// cotangent c and t = sum(c y): d/dg = y c - y t (the op on (c, y)); d/dy = c (g - s) - g t.
MaskedSoftmaxBackwardGrads masked_softmax_backward_double_backward(
    const MaskedSoftmaxBackwardArgs& a, const at::Tensor& c) {
  if (!c.defined()) return {};
  const auto dtype = a.output.scalar_type();
  const at::Tensor grad_g =
      masked_softmax_backward_op()(MaskedSoftmaxBackwardArgs{c, a.output, a.dim});
  const at::Tensor y = masked_softmax_backward_widen(a.output);
  const at::Tensor g = masked_softmax_backward_widen(a.grad);
  const at::Tensor cw = masked_softmax_backward_widen(c);
  const at::Tensor s = masked_softmax_backward_dot(g, y, a.dim);
  const at::Tensor t = masked_softmax_backward_dot(cw, y, a.dim);
  return {grad_g, (cw * (g - s) - g * t).to(dtype)};
}

// JVP: d out = op(dg, y) + dy (g - s) - y sum(g dy).
at::Tensor masked_softmax_backward_jvp(const MaskedSoftmaxBackwardArgs& p,
                                       const MaskedSoftmaxBackwardArgs& t,
                                       const at::Tensor& /*out*/) {
  if (!t.grad.defined() && !t.output.defined()) return {};
  const auto dtype = p.output.scalar_type();
  at::Tensor d;
  if (t.grad.defined()) {
    d = masked_softmax_backward_op()(MaskedSoftmaxBackwardArgs{t.grad, p.output, p.dim});
  }
  if (t.output.defined()) {
    const at::Tensor y = masked_softmax_backward_widen(p.output);
    const at::Tensor g = masked_softmax_backward_widen(p.grad);
    const at::Tensor dy = masked_softmax_backward_widen(t.output);
    const at::Tensor s = masked_softmax_backward_dot(g, y, p.dim);
    const at::Tensor term = dy * (g - s) - y * masked_softmax_backward_dot(g, dy, p.dim);
    d = d.defined() ? (d.to(term.scalar_type()) + term).to(dtype) : term.to(dtype);
  }
  return d;
}

TensorSpec masked_softmax_backward_shape(const MaskedSoftmaxBackwardArgs& a) {
  detail::check_masked_softmax_backward(a, a.output.device().type());
  return TensorSpec::like(a.output);
}

std::vector<std::pair<std::string, MaskedSoftmaxBackwardArgs>> masked_softmax_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  const auto opts = at::TensorOptions().device(dev).dtype(dt);
  // y: softmax outputs (the op is a polynomial in g and y, so any y would do), with the zeros
  // a mask leaves: row 1 of the second sample is fully masked.
  const auto softmax_of = [&](at::IntArrayRef sizes, uint64_t seed, int64_t dim) {
    return at::softmax(sample_randn(sizes, seed, c10::kCPU, at::kDouble), dim);
  };
  at::Tensor masked = softmax_of({4, 6}, 72, 1);
  masked.select(1, 3).zero_();
  masked.select(0, 1).zero_();
  return {
      {"last dim [3, 5]",
       {sample_randn({3, 5}, 71, dev, dt), softmax_of({3, 5}, 75, 1).to(opts), -1}},
      {"masked zeros and a fully masked row [4, 6]",
       {sample_randn({4, 6}, 73, dev, dt), masked.to(opts), 1}},
      {"dim 0 of transposed tensors [5, 6]",
       {sample_randn({6, 5}, 74, dev, dt).t(), softmax_of({6, 5}, 76, 1).to(opts).t(), 0}},
      {"middle dim of sliced 3-d tensors [2, 4, 3]",
       {sample_randn({2, 4, 6}, 77, dev, dt).slice(2, 0, 6, 2),
        softmax_of({2, 4, 6}, 78, 1).to(opts).slice(2, 1, 6, 2), 1}},
  };
}

}  // namespace

Op<MaskedSoftmaxBackwardArgs>& masked_softmax_backward_op() {
  static Op<MaskedSoftmaxBackwardArgs>& op = []() -> Op<MaskedSoftmaxBackwardArgs>& {
    auto& o = define<MaskedSoftmaxBackwardArgs>(
        "customop::masked_softmax_backward(Tensor grad, Tensor output, int dim) -> Tensor");
    o.shape(&masked_softmax_backward_shape);
    o.impl(c10::DeviceType::CPU, &detail::masked_softmax_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::masked_softmax_backward_cuda);
#endif
    o.reference(&detail::masked_softmax_backward_composite);
    // Sharding: independent along every dim but `dim`, which stays whole (as the forward).
    o.sharding(Sharding::reduction("dim"));
    // Autocast: float32, as masked_softmax.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&masked_softmax_backward_save, &masked_softmax_backward_double_backward);
    o.impl_jvp(&masked_softmax_backward_jvp);
    // vmap: slices independent except along `dim`.
    o.vmap(customop::BatchRule::rows({"grad", "output"}, {"dim"}));
    o.samples(&masked_softmax_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& masked_softmax_backward_registered = masked_softmax_backward_op();
}  // namespace

}  // namespace customop::ops
