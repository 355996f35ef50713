// customop::weighted_sum: schema, checks, backward formula, samples, registration.

#include "detail/weighted_sum.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>

#include <string>

namespace customop::ops {

namespace detail {

void check_weighted_sum(const WeightedSumArgs& a, c10::DeviceType device) {
  TORCH_CHECK_VALUE(!a.inputs.empty(),
                    "weighted_sum: inputs must hold at least one tensor, but got an empty list");
  const at::Tensor& first = a.inputs[0];
  for (size_t k = 1; k < a.inputs.size(); ++k) {
    check_same_device("weighted_sum", ("inputs[" + std::to_string(k) + "]").c_str(), a.inputs[k],
                      "inputs[0]", first);
  }
  check_floating("weighted_sum", "inputs[0]", first, device);
  for (size_t k = 1; k < a.inputs.size(); ++k) {
    check_same_dtype("weighted_sum", ("inputs[" + std::to_string(k) + "]").c_str(), a.inputs[k],
                     "inputs[0]", first);
  }
  for (size_t k = 1; k < a.inputs.size(); ++k) {
    TORCH_CHECK(a.inputs[k].sym_sizes() == first.sym_sizes(), "weighted_sum: inputs[", k,
                "] must have the shape of inputs[0] = ", first.sym_sizes(), ", but got ",
                a.inputs[k].sym_sizes());
  }
  TORCH_CHECK_VALUE(a.weights.size() == a.inputs.size(),
                    "weighted_sum: weights must have one entry per tensor in inputs (",
                    a.inputs.size(), "), but got ", a.weights.size());
}

}  // namespace detail

namespace {

struct WeightedSumSaved {
  std::vector<double> weights;
};

struct WeightedSumGrads {
  std::vector<at::Tensor> inputs;
};

WeightedSumSaved weighted_sum_save(const WeightedSumArgs& a, const at::Tensor& /*output*/) {
  return {a.weights};
}

// d y / d x_k = w_k: grad of inputs[k] = w_k * g, all K from one pass of the op
// customop::weighted_sum_backward. A tensor subclass (DTensor;
// its Python key) takes w_k * g in ATen ops, which it shards as it shards them.
WeightedSumGrads weighted_sum_backward(const WeightedSumSaved& s, const at::Tensor& grad) {
  WeightedSumGrads out;
  if (detail::any_subclass({&grad})) {
    out.inputs.reserve(s.weights.size());
    for (double w : s.weights) out.inputs.push_back(grad * w);
    return out;
  }
  out.inputs = weighted_sum_backward_op()(WeightedSumBackwardArgs{grad, s.weights});
  return out;
}

// JVP: dy = sum of w_k * dx_k over the inputs that have a tangent.
at::Tensor weighted_sum_jvp(const WeightedSumArgs& p, const WeightedSumArgs& t,
                            const at::Tensor& /*out*/) {
  at::Tensor dy;
  for (std::size_t k = 0; k < t.inputs.size(); ++k) {
    if (!t.inputs[k].defined()) continue;
    const at::Tensor term = t.inputs[k] * p.weights[k];
    dy = dy.defined() ? dy + term : term;
  }
  return dy;
}

// Output metadata, the one statement of it: inputs[0]'s shape and dtype, contiguous. The fake
// (Meta) kernel and the CPU/CUDA kernels' outputs come from it; the checks run on every device.
TensorSpec weighted_sum_shape(const WeightedSumArgs& a) {
  detail::check_weighted_sum(a,
                             a.inputs.empty() ? c10::DeviceType::CPU : a.inputs[0].device().type());
  return TensorSpec::like(a.inputs[0]);
}

std::vector<std::pair<std::string, WeightedSumArgs>> weighted_sum_samples(c10::Device dev,
                                                                          c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"three contiguous [3, 4]",
       {{sample_randn({3, 4}, 31, dev, dt), sample_randn({3, 4}, 32, dev, dt),
         sample_randn({3, 4}, 33, dev, dt)},
        {0.5, -1.25, 2.0}}},
      {"transposed and sliced [5, 6]",
       {{sample_randn({6, 5}, 34, dev, dt).t(),
         sample_randn({5, 12}, 35, dev, dt).slice(1, 0, 12, 2)},
        {1.5, -0.75}}},
      {"one input [7]", {{sample_randn({7}, 36, dev, dt)}, {3.0}}},
      {"0-d inputs",
       {{sample_randn({}, 37, dev, dt), sample_randn({}, 38, dev, dt)}, {-2.0, 0.25}}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck (each add rounds).
at::Tensor weighted_sum_reference(const WeightedSumArgs& a) {
  at::Tensor y = a.inputs[0] * a.weights[0];
  for (std::size_t k = 1; k < a.inputs.size(); ++k) y = y + a.inputs[k] * a.weights[k];
  return y;
}

}  // namespace

Op<WeightedSumArgs>& weighted_sum_op() {
  static Op<WeightedSumArgs>& op = []() -> Op<WeightedSumArgs>& {
    auto& o = define<WeightedSumArgs>(
        "customop::weighted_sum(Tensor[] inputs, float[] weights) -> Tensor");
    o.shape(&weighted_sum_shape);
    o.impl(c10::DeviceType::CPU, &detail::weighted_sum_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::weighted_sum_cuda);
#endif
    o.reference(&weighted_sum_reference);
    // Sharding: pointwise over the list's tensors (all of one shape).
    o.sharding(Sharding::pointwise());
    // Autocast: float32, as torch's sum and cumsum: a sum over the list.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&weighted_sum_save, &weighted_sum_backward);
    o.impl_jvp(&weighted_sum_jvp);
    // vmap: elementwise over the inputs (all of one shape).
    o.vmap(customop::BatchRule::rows({"inputs"}));
    o.samples(&weighted_sum_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& weighted_sum_registered = weighted_sum_op();
}  // namespace

}  // namespace customop::ops
