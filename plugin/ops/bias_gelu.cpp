// customop::bias_gelu: schema, checks, backward formula, samples, registration.

#include "detail/bias_gelu.h"
#include "detail/checks.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/erf.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/tanh.h>

#include <cmath>

namespace customop::ops {

namespace detail {

void check_bias_gelu(const BiasGeluArgs& a, c10::DeviceType device) {
  check_same_device("bias_gelu", "bias", a.bias, "input", a.input);
  check_floating("bias_gelu", "input", a.input, device);
  check_same_dtype("bias_gelu", "bias", a.bias, "input", a.input);
  TORCH_CHECK(a.input.dim() >= 1,
              "bias_gelu: input must have shape [..., D] (at least 1 dim), but got a 0-d tensor");
  const c10::SymInt d = a.input.sym_size(-1);
  TORCH_CHECK(a.bias.dim() == 1 && a.bias.sym_size(0) == d,
              "bias_gelu: bias must have shape [D] = [", d, "], but got ", a.bias.sym_sizes());
  TORCH_CHECK_VALUE(a.approximate == "none" || a.approximate == "tanh",
                    "bias_gelu: approximate must be \"none\" or \"tanh\", but got \"",
                    a.approximate, "\"");
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

// d gelu / ds at s = x + b:
//   exact: Phi(s) + s * phi(s) = 0.5 * (1 + erf(s / sqrt(2))) + s * exp(-s^2 / 2) / sqrt(2 pi)
//   tanh:  with u = sqrt(2/pi) * (s + 0.044715 s^3), t = tanh(u):
//          0.5 * (1 + t) + 0.5 * s * (1 - t^2) * sqrt(2/pi) * (1 + 3 * 0.044715 * s^2)
// grad_input = g * gelu'(s); grad_bias = grad_input summed over every leading dim.
// gelu'(x), x in the accumulation dtype.
at::Tensor gelu_derivative(const at::Tensor& x, bool tanh) {
  at::Tensor dgelu;
  if (tanh) {
    const double k_beta = std::sqrt(2.0 / M_PI);
    const double k_kappa = 0.044715;
    const at::Tensor x_sq = x * x;
    const at::Tensor t = at::tanh(k_beta * (x + k_kappa * x_sq * x));
    dgelu = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k_beta * (1 + 3 * k_kappa * x_sq);
  } else {
    const double k_inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
    dgelu = 0.5 * (1 + at::erf(x * M_SQRT1_2)) + x * at::exp(-0.5 * x * x) * k_inv_sqrt_2pi;
  }
  return dgelu;
}

BiasGeluGrads bias_gelu_backward(const BiasGeluSaved& s, const at::Tensor& grad) {
  const auto dtype = s.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  // NB: the forward rounds s to the dtype before the GELU; so does this.
  const at::Tensor x = (s.input + s.bias).to(acc);
  const at::Tensor grad_input = grad.to(acc) * gelu_derivative(x, s.tanh);
  const at::Tensor grad_bias = grad_input.sum_to_size_symint(s.bias.sym_sizes());
  return {grad_input.to(dtype), grad_bias.to(dtype)};
}

// JVP: dy = gelu'(s) * (dx + db), db broadcast over the leading dims (gelu' as above).
at::Tensor bias_gelu_jvp(const BiasGeluArgs& p, const BiasGeluArgs& t, const at::Tensor& /*out*/) {
  if (!t.input.defined() && !t.bias.defined()) return {};
  const auto dtype = p.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor x = (p.input + p.bias).to(acc);
  at::Tensor ds = t.input.defined() ? t.input.to(acc) : at::Tensor();
  if (t.bias.defined()) ds = ds.defined() ? ds + t.bias.to(acc) : t.bias.to(acc).expand_as(x);
  return (gelu_derivative(x, p.approximate == "tanh") * ds).to(dtype);
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
