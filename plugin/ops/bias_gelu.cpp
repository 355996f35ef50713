// customop::bias_gelu: schema, checks, backward formula, samples, registration.

#include "detail/bias_gelu.h"
#include "detail/checks.h"
#include "detail/fused_backward.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/gelu.h>

#include <string>
#include <utility>

namespace customop::ops {

namespace detail {

void check_bias_gelu_args(const char* op, const at::Tensor& input, const at::Tensor& bias,
                          const std::string& approximate, c10::DeviceType device) {
  check_same_device(op, "bias", bias, "input", input);
  check_floating(op, "input", input, device);
  check_same_dtype(op, "bias", bias, "input", input);
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have shape [..., D] (at least 1 dim), but got a 0-d tensor");
  const c10::SymInt d = input.sym_size(-1);
  TORCH_CHECK(bias.dim() == 1 && bias.sym_size(0) == d, op, ": bias must have shape [D] = [", d,
              "], but got ", bias.sym_sizes());
  TORCH_CHECK_VALUE(approximate == "none" || approximate == "tanh", op,
                    ": approximate must be \"none\" or \"tanh\", but got \"", approximate, "\"");
}

void check_bias_gelu(const BiasGeluArgs& a, c10::DeviceType device) {
  check_bias_gelu_args("bias_gelu", a.input, a.bias, a.approximate, device);
}

}  // namespace detail

namespace {

struct BiasGeluSaved {
  at::Tensor input;
  at::Tensor bias;
  bool tanh;
};

struct BiasGeluGrads {
  at::Tensor input;
  at::Tensor bias;
};

BiasGeluSaved bias_gelu_save(const BiasGeluArgs& a, const at::Tensor& /*output*/) {
  return {a.input, a.bias, a.approximate == "tanh"};
}

// grad_input = g * gelu'(s), grad_bias = grad_input summed over every leading dim, s = x + b:
// the op customop::bias_gelu_backward (bias_gelu_backward.cpp has the formulas), one pass of
// its kernels. A tensor subclass (DTensor; its Python key) takes the same formula in ATen ops,
// which it shards as it shards them (the backward op's rule covers last-dim shards only).
BiasGeluGrads bias_gelu_backward(const BiasGeluSaved& s, const at::Tensor& grad) {
  const BiasGeluBackwardArgs a{grad, s.input, s.bias, s.tanh ? "tanh" : "none"};
  auto [grad_input, grad_bias] = detail::any_subclass({&grad, &s.input, &s.bias})
                                     ? detail::bias_gelu_backward_composite(a)
                                     : bias_gelu_backward_op()(a);
  return {std::move(grad_input), std::move(grad_bias)};
}

// JVP: dy = gelu'(s) * (dx + db), db broadcast over the leading dims.
at::Tensor bias_gelu_jvp(const BiasGeluArgs& p, const BiasGeluArgs& t, const at::Tensor& /*out*/) {
  if (!t.input.defined() && !t.bias.defined()) return {};
  const auto dtype = p.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor x = (p.input + p.bias).to(acc);
  at::Tensor ds = t.input.defined() ? t.input.to(acc) : at::Tensor();
  if (t.bias.defined()) ds = ds.defined() ? ds + t.bias.to(acc) : t.bias.to(acc).expand_as(x);
  return (detail::gelu_derivative(x, p.approximate == "tanh") * ds).to(dtype);
}

// Output metadata, the one statement of it: input's shape and dtype, contiguous. The fake
// (Meta) kernel and the CPU/CUDA kernels' outputs come from it; the checks run on every device.
TensorSpec bias_gelu_shape(const BiasGeluArgs& a) {
  detail::check_bias_gelu(a, a.input.device().type());
  return TensorSpec::like(a.input);
}

std::vector<std::pair<std::string, BiasGeluArgs>> bias_gelu_samples(c10::Device dev,
                                                                    c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"exact, contiguous [4, 8]",
       {sample_randn({4, 8}, 21, dev, dt), sample_randn({8}, 22, dev, dt), "none"}},
      {"tanh, transposed input [5, 6]",
       {sample_randn({6, 5}, 23, dev, dt).t(), sample_randn({6}, 24, dev, dt), "tanh"}},
      {"exact, sliced 3-d input and strided bias [2, 3, 7]",
       {sample_randn({2, 3, 14}, 25, dev, dt).slice(-1, 1, 14, 2),
        sample_randn({14}, 26, dev, dt).slice(0, 0, 14, 2), "none"}},
      {"tanh, 1-d input [17]",
       {sample_randn({17}, 27, dev, dt), sample_randn({17}, 28, dev, dt), "tanh"}},
  };
}

// The ATen composite: the reference of the float16/bfloat16 gradcheck.
at::Tensor bias_gelu_reference(const BiasGeluArgs& a) {
  return at::gelu(a.input + a.bias, a.approximate);
}

}  // namespace

Op<BiasGeluArgs>& bias_gelu_op() {
  static Op<BiasGeluArgs>& op = []() -> Op<BiasGeluArgs>& {
    auto& o = define<BiasGeluArgs>(
        "customop::bias_gelu(Tensor input, Tensor bias, str approximate=\"none\") -> Tensor");
    o.shape(&bias_gelu_shape);
    // customop::bias_gelu_(Tensor(a!) x, ...) -> Tensor(a!): an activation written in place, by
    // the out kernel itself (kDirect: elementwise, each element read before it is written).
    o.inplace_variant(InplaceGrad::kRefuse, InplaceWrite::kDirect);
    o.impl(c10::DeviceType::CPU, &detail::bias_gelu_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::bias_gelu_cuda);
#endif
    o.reference(&bias_gelu_reference);
    // Sharding: pointwise; bias [D] aligns with input's last dim, so it is sharded with it
    // and replicated when input is sharded along a leading dim.
    o.sharding(Sharding::pointwise());
    // Autocast: promote, as torch's pointwise ops over several tensors: autocast hands a
    // low-precision activation beside a float32 bias, and the wider dtype runs on every device.
    o.autocast(AutocastPolicy::kPromote);
    o.impl_autograd(&bias_gelu_save, &bias_gelu_backward);
    o.impl_jvp(&bias_gelu_jvp);
    // vmap: rows are independent (the normalized/pointwise dims come last).
    o.vmap(customop::BatchRule::rows({"input"}));
    o.samples(&bias_gelu_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& bias_gelu_registered = bias_gelu_op();
}  // namespace

}  // namespace customop::ops
