// customop::masked_softmax: schema, checks, backward formula, samples, registration.

#include "detail/masked_softmax.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/softmax.h>

namespace customop::ops {

namespace detail {

int64_t check_masked_softmax(const MaskedSoftmaxArgs& a, c10::DeviceType device) {
  if (a.mask) check_same_device("masked_softmax", "mask", *a.mask, "input", a.input);
  check_floating("masked_softmax", "input", a.input, device);
  if (a.mask) {
    TORCH_CHECK_TYPE(a.mask->scalar_type() == at::kBool,
                     "masked_softmax: mask must be a bool tensor, but got ",
                     dtype_name(a.mask->scalar_type()));
    const auto in = a.input.sym_sizes();
    const auto m = a.mask->sym_sizes();
    bool ok = m.size() <= in.size();
    for (size_t i = 1; ok && i <= m.size(); ++i) {
      ok = m[m.size() - i] == 1 || m[m.size() - i] == in[in.size() - i];
    }
    TORCH_CHECK(ok, "masked_softmax: mask must have input's shape ", in,
                " or one broadcastable to it, but got ", m);
  }
  return wrap_dim("masked_softmax", a.dim, a.input.dim());
}

}  // namespace detail

namespace {

struct MaskedSoftmaxSaved {
  at::Tensor output;
  int64_t dim;
};

struct MaskedSoftmaxGrads {
  at::Tensor input;
  std::optional<at::Tensor> mask;
};

MaskedSoftmaxSaved masked_softmax_save(const MaskedSoftmaxArgs& a, const at::Tensor& output) {
  return {output, a.dim};
}

// Softmax's VJP over the kept elements: grad_input = y * (g - sum(g * y, dim)). Masked
// positions (and fully masked slices) have y = 0, so they get 0 without looking at the mask.
// The op customop::masked_softmax_backward (masked_softmax_backward.cpp has its formulas), one
// pass of its kernels per slice; a tensor subclass (DTensor, fake tensors: the Python key) takes
// the same formula in ATen ops, which it handles as in the forward.
MaskedSoftmaxGrads masked_softmax_backward(const MaskedSoftmaxSaved& s, const at::Tensor& grad) {
  const MaskedSoftmaxBackwardArgs a{grad, s.output, s.dim};
  return {detail::any_subclass({&grad, &s.output}) ? detail::masked_softmax_backward_composite(a)
                                                   : masked_softmax_backward_op()(a),
          std::nullopt};
}

// JVP of softmax over the kept elements: dy = y * (dx - sum(y * dx, dim)); masked positions
// (y = 0) get 0. The mask is boolean (no tangent).
at::Tensor masked_softmax_jvp(const MaskedSoftmaxArgs& p, const MaskedSoftmaxArgs& t,
                              const at::Tensor& out) {
  if (!t.input.defined()) return {};
  const auto dtype = out.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor y = out.to(acc);
  const at::Tensor ydx = y * t.input.to(acc);
  return (ydx - y * ydx.sum(p.dim, /*keepdim=*/true)).to(dtype);
}

// Output metadata, the one statement of it: input's shape and dtype, contiguous. The fake
// (Meta) kernel and the CPU/CUDA kernels' outputs come from it; the checks run on every device.
TensorSpec masked_softmax_shape(const MaskedSoftmaxArgs& a) {
  detail::check_masked_softmax(a, a.input.device().type());
  return TensorSpec::like(a.input);
}

std::vector<std::pair<std::string, MaskedSoftmaxArgs>> masked_softmax_samples(c10::Device dev,
                                                                              c10::ScalarType dt) {
  using detail::sample_randn;
  const auto bool_opts = at::TensorOptions().device(dev).dtype(at::kBool);
  // Row 2 fully masked; the others keep column 0 at least.
  at::Tensor mask_46 = sample_randn({4, 6}, 51, c10::kCPU, at::kDouble) > -0.3;
  mask_46.select(1, 0).fill_(true);
  mask_46.select(0, 2).fill_(false);
  // Masks rows of the softmax dim (dim 0) in every column; row 0 kept.
  at::Tensor mask_rows = sample_randn({5, 1}, 52, c10::kCPU, at::kDouble) > 0.0;
  mask_rows.select(0, 0).fill_(true);
  return {
      {"no mask, last dim [3, 5]", {sample_randn({3, 5}, 53, dev, dt), std::nullopt, -1}},
      {"same-shape mask with a fully masked row [4, 6]",
       {sample_randn({4, 6}, 54, dev, dt), mask_46.to(bool_opts), 1}},
      {"broadcast [5, 1] mask, dim 0 of a transposed input [5, 6]",
       {sample_randn({6, 5}, 55, dev, dt).t(), mask_rows.to(bool_opts), 0}},
      {"no mask, middle dim of a sliced 3-d input [2, 4, 3]",
       {sample_randn({2, 4, 6}, 56, dev, dt).slice(2, 0, 6, 2), std::nullopt, 1}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck (a fully masked
// slice: softmax of -inf gives NaN, and the masked_fill after it zeros).
at::Tensor masked_softmax_reference(const MaskedSoftmaxArgs& a) {
  if (!a.mask) return at::softmax(a.input, a.dim);
  const at::Tensor drop = a.mask->logical_not();
  return at::softmax(a.input.masked_fill(drop, -INFINITY), a.dim).masked_fill(drop, 0);
}

}  // namespace

Op<MaskedSoftmaxArgs>& masked_softmax_op() {
  static Op<MaskedSoftmaxArgs>& op = []() -> Op<MaskedSoftmaxArgs>& {
    auto& o = define<MaskedSoftmaxArgs>(
        "customop::masked_softmax(Tensor input, Tensor? mask, int dim) -> Tensor");
    o.shape(&masked_softmax_shape);
    o.impl(c10::DeviceType::CPU, &detail::masked_softmax_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::masked_softmax_cuda);
#endif
    o.reference(&masked_softmax_reference);
    // Sharding: independent along every dim but `dim`, which stays whole (the mask, broadcast
    // to input, is sharded with it).
    o.sharding(Sharding::reduction("dim"));
    // Autocast: float32, as torch's softmax: exp over a row's range and its sum.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&masked_softmax_save, &masked_softmax_backward);
    o.impl_jvp(&masked_softmax_jvp);
    // vmap: rows independent except along `dim`; the mask broadcasts to input.
    o.vmap(customop::BatchRule::rows({"input", "mask"}, {"dim"}));
    o.samples(&masked_softmax_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& masked_softmax_registered = masked_softmax_op();
}  // namespace

}  // namespace customop::ops
