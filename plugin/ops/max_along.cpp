// customop::max_along: schema, checks, backward formula, samples, registration.

#include "detail/max_along.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>

#include <vector>

namespace customop::ops {

namespace detail {

int64_t check_max_along(const MaxAlongArgs& a, c10::DeviceType device) {
  check_floating("max_along", "input", a.input, device);
  const int64_t dim = wrap_dim("max_along", a.dim, a.input.dim());
  if (a.input.dim() > 0) {
    TORCH_CHECK(a.input.sym_size(dim) > 0, "max_along: input must have a non-empty dim ", a.dim,
                " to reduce, but got shape ", a.input.sym_sizes());
  }
  return dim;
}

}  // namespace detail

namespace {

struct MaxAlongSaved {
  at::Tensor indices;
  std::vector<c10::SymInt> input_sizes;  // symbolic under torch.compile(dynamic=True)
  int64_t dim;                           // wrapped
  bool keepdim;
};

struct MaxAlongGrads {
  at::Tensor input;
};

MaxAlongSaved max_along_save(const MaxAlongArgs& a, const MaxAlongResult& out) {
  return {std::get<1>(out), a.input.sym_sizes().vec(),
          detail::wrap_dim("max_along", a.dim, a.input.dim()), a.keepdim};
}

// The max picks one element per slice: grad_input is grad_values scattered to the argmax
// positions and 0 elsewhere. grad_indices (indices are not differentiable) is ignored.
MaxAlongGrads max_along_backward(const MaxAlongSaved& s, const at::Tensor& grad_values,
                                 const at::Tensor& /*grad_indices*/) {
  if (s.input_sizes.empty()) return {grad_values.reshape({})};  // 0-d: the max is the input
  at::Tensor g = grad_values;
  at::Tensor idx = s.indices;
  if (!s.keepdim) {
    g = g.unsqueeze(s.dim);
    idx = idx.unsqueeze(s.dim);
  }
  // Plain tensors: the op customop::max_along_backward, zeros and the scatter in one write pass
  // of its kernels. A tensor subclass (DTensor, fake tensors) or a torch.func wrapper takes
  // ATen's zeros + scatter (new_zeros: a DTensor grad gives a DTensor); under grad mode both
  // record a graph that is linear in g.
  if (detail::any_subclass_or_functorch({&g, &idx})) {
    return {g.new_zeros_symint(s.input_sizes).scatter(s.dim, idx, g)};
  }
  return {max_along_backward_op()(
      MaxAlongBackwardArgs{g, idx, s.dim, s.input_sizes[static_cast<size_t>(s.dim)]})};
}

// JVP: the values' tangent is dx at the argmax of each slice (gathered); indices are integers
// (no tangent).
MaxAlongResult max_along_jvp(const MaxAlongArgs& p, const MaxAlongArgs& t,
                             const MaxAlongResult& out) {
  if (!t.input.defined()) return {};
  if (p.input.dim() == 0) return {t.input.clone(), at::Tensor()};
  const int64_t dim = detail::wrap_dim("max_along", p.dim, p.input.dim());
  const at::Tensor idx = p.keepdim ? std::get<1>(out) : std::get<1>(out).unsqueeze(dim);
  at::Tensor values = t.input.gather(dim, idx);
  if (!p.keepdim) values = values.squeeze(dim);
  return {values, at::Tensor()};
}

// Output metadata, the one statement of it: values (input's dtype) and int64 indices of
// max_along_out_sizes, contiguous. The fake (Meta) kernel and the CPU/CUDA kernels' outputs
// come from it; the checks run on every device.
std::tuple<TensorSpec, TensorSpec> max_along_shape(const MaxAlongArgs& a) {
  const int64_t dim = detail::check_max_along(a, a.input.device().type());
  const TensorSpec values = TensorSpec::like(a.input).sized(
      detail::max_along_out_sizes(a.input.sym_sizes(), dim, a.keepdim));
  return {values, values.typed(at::kLong)};
}

// Distinct values at least 0.37 apart (no ties, so finite differences see no kink).
at::Tensor distinct(at::IntArrayRef sizes, uint64_t seed, c10::Device dev, c10::ScalarType dt) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randperm(n, gen, at::TensorOptions().dtype(at::kDouble)) * 0.37 - 0.2 * n)
      .reshape(sizes)
      .to(at::TensorOptions().device(dev).dtype(dt));
}

std::vector<std::pair<std::string, MaxAlongArgs>> max_along_samples(c10::Device dev,
                                                                    c10::ScalarType dt) {
  return {
      {"last dim [4, 6]", {distinct({4, 6}, 41, dev, dt), -1, false}},
      {"dim 0, keepdim, transposed [5, 3]", {distinct({3, 5}, 42, dev, dt).t(), 0, true}},
      {"middle dim of a sliced 3-d input [2, 5, 3]",
       {distinct({2, 5, 6}, 43, dev, dt).slice(2, 0, 6, 2), 1, false}},
      {"0-d input", {distinct({}, 44, dev, dt), 0, false}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck.
MaxAlongResult max_along_reference(const MaxAlongArgs& a) {
  return at::max(a.input, a.dim, a.keepdim);
}

}  // namespace

Op<MaxAlongArgs, MaxAlongResult>& max_along_op() {
  static Op<MaxAlongArgs, MaxAlongResult>& op = []() -> Op<MaxAlongArgs, MaxAlongResult>& {
    auto& o = define<MaxAlongArgs, MaxAlongResult>(
        "customop::max_along(Tensor input, int dim, bool keepdim=False) -> "
        "(Tensor values, Tensor indices)");
    o.shape(&max_along_shape);
    o.impl(c10::DeviceType::CPU, &detail::max_along_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::max_along_cuda);
#endif
    o.reference(&max_along_reference);
    // Sharding: independent along every dim but `dim`; values and indices drop it unless
    // keepdim (indices are positions along the whole dim, which no rank splits).
    o.sharding(Sharding::reduction("dim", "keepdim"));
    // Autocast: float32. A max is exact: float32 holds every float16/bfloat16 value, so the cast
    // changes no result, and every device's kernel takes float32.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&max_along_save, &max_along_backward, {true, false});
    o.impl_jvp(&max_along_jvp);
    // vmap: slices along `dim` are independent.
    o.vmap(customop::BatchRule::rows({"input"}, {"dim"}));
    o.samples(&max_along_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& max_along_registered = max_along_op();
}  // namespace

}  // namespace customop::ops
