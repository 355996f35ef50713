// customop::weighted_sum_backward: schema, checks, the ATen formula (reference and the subclass
// path of weighted_sum's backward), its own backward and JVP, batching rule, samples,
// registration.

#include "detail/checks.h"
#include "detail/samples.h"
#include "detail/weighted_sum.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty_like.h>

#include <string>
#include <vector>

namespace customop::ops {

namespace detail {

void check_weighted_sum_backward(const WeightedSumBackwardArgs& a, c10::DeviceType device) {
  check_floating("weighted_sum_backward", "grad", a.grad, device);
  TORCH_CHECK_VALUE(!a.weights.empty(),
                    "weighted_sum_backward: weights must hold at least one weight (one per input "
                    "of weighted_sum), but got an empty list");
}

std::vector<at::Tensor> weighted_sum_backward_composite(const WeightedSumBackwardArgs& a) {
  std::vector<at::Tensor> grads;
  grads.reserve(a.weights.size());
  for (double w : a.weights) grads.push_back(a.grad * w);
  return grads;
}

std::vector<at::Tensor> weighted_sum_backward_outputs(const WeightedSumBackwardArgs& a) {
  check_weighted_sum_backward(a, a.grad.device().type());
  std::vector<at::Tensor> out;
  out.reserve(a.weights.size());
  for (size_t k = 0; k < a.weights.size(); ++k) {
    out.push_back(at::empty_like(a.grad, at::MemoryFormat::Contiguous));
  }
  return out;
}

}  // namespace detail

namespace {

struct WeightedSumBackwardGrads {
  at::Tensor grad;
};

struct WeightedSumBackwardSaved {
  std::vector<double> weights;
};

WeightedSumBackwardSaved weighted_sum_backward_save(const WeightedSumBackwardArgs& a,
                                                    const std::vector<at::Tensor>& /*out*/) {
  return {a.weights};
}

// Linear in g: out[k] = w_k g, so the VJP of cotangents c_k is sum_k w_k c_k, the forward op
// weighted_sum (an undefined c_k, a zero, is left out with its weight).
WeightedSumBackwardGrads weighted_sum_backward_double_backward(const WeightedSumBackwardSaved& s,
                                                               const std::vector<at::Tensor>& c) {
  WeightedSumArgs sum;
  for (size_t k = 0; k < c.size() && k < s.weights.size(); ++k) {
    if (!c[k].defined()) continue;
    sum.inputs.push_back(c[k]);
    sum.weights.push_back(s.weights[k]);
  }
  if (sum.inputs.empty()) return {};
  return {weighted_sum_op()(sum)};
}

// JVP: the op on g's tangent.
std::vector<at::Tensor> weighted_sum_backward_jvp(const WeightedSumBackwardArgs& p,
                                                  const WeightedSumBackwardArgs& t,
                                                  const std::vector<at::Tensor>& /*out*/) {
  if (!t.grad.defined()) return std::vector<at::Tensor>(p.weights.size());
  return weighted_sum_backward_op()(WeightedSumBackwardArgs{t.grad, p.weights});
}

// vmap: elementwise in g, so the batch (g's dim 0) rides along into every output.
std::vector<at::Tensor> weighted_sum_backward_batched(const WeightedSumBackwardArgs& a,
                                                      const BatchInfo& info) {
  std::vector<at::Tensor> out = weighted_sum_backward_op()(a);
  if (!info.batched("grad")) {
    for (auto& t : out) {
      std::vector<int64_t> sizes = t.sizes().vec();
      sizes.insert(sizes.begin(), info.size());
      t = t.unsqueeze(0).expand(sizes);
    }
  }
  return out;
}

std::vector<std::pair<std::string, WeightedSumBackwardArgs>> weighted_sum_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"three weights, contiguous [3, 4]", {sample_randn({3, 4}, 101, dev, dt), {0.5, -1.25, 2.0}}},
      {"two weights, transposed [5, 6]", {sample_randn({6, 5}, 102, dev, dt).t(), {1.5, -0.75}}},
      {"one weight, sliced [7]", {sample_randn({14}, 103, dev, dt).slice(0, 0, 14, 2), {3.0}}},
      {"0-d", {sample_randn({}, 104, dev, dt), {-2.0, 0.25}}},
  };
}

}  // namespace

Op<WeightedSumBackwardArgs, std::vector<at::Tensor>>& weighted_sum_backward_op() {
  static Op<WeightedSumBackwardArgs, std::vector<at::Tensor>>& op =
      []() -> Op<WeightedSumBackwardArgs, std::vector<at::Tensor>>& {
    auto& o = define<WeightedSumBackwardArgs, std::vector<at::Tensor>>(
        "customop::weighted_sum_backward(Tensor grad, float[] weights) -> Tensor[]");
    // The K outputs: grad's shape and dtype, contiguous, each its own allocation (a K-times
    // larger one crosses glibc's mmap threshold sooner: fresh pages, faulted in on every call);
    // on meta tensors they are the fake kernel. The checks run on every device.
    o.impl_fake(&detail::weighted_sum_backward_outputs);
    o.impl(c10::DeviceType::CPU, &detail::weighted_sum_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::weighted_sum_backward_cuda);
#endif
    o.reference(&detail::weighted_sum_backward_composite);
    // Autocast: float32, as weighted_sum.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&weighted_sum_backward_save, &weighted_sum_backward_double_backward);
    o.impl_jvp(&weighted_sum_backward_jvp);
    o.vmap(&weighted_sum_backward_batched);
    o.samples(&weighted_sum_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& weighted_sum_backward_registered = weighted_sum_backward_op();
}  // namespace

}  // namespace customop::ops
