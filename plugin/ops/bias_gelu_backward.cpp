// customop::bias_gelu_backward: schema, checks, the ATen formula (reference and DTensor path),
// double backward and JVP (gelu''), samples, registration.

#include "detail/bias_gelu.h"
#include "detail/checks.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/erf.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

namespace customop::ops {

namespace detail {

namespace {
constexpr double kBeta = 0.79788456080286535587989211986876;  // sqrt(2 / pi)
constexpr double kKappa = 0.044715;
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;  // 1 / sqrt(2 pi)
}  // namespace

void check_bias_gelu_backward(const BiasGeluBackwardArgs& a, c10::DeviceType device) {
  check_bias_gelu_args("bias_gelu_backward", a.input, a.bias, a.approximate, device);
  check_same_device("bias_gelu_backward", "grad", a.grad, "input", a.input);
  check_same_dtype("bias_gelu_backward", "grad", a.grad, "input", a.input);
  TORCH_CHECK(a.grad.sym_sizes() == a.input.sym_sizes(),
              "bias_gelu_backward: grad must have input's shape ", a.input.sym_sizes(),
              ", but got ", a.grad.sym_sizes());
}

// d gelu / ds (Hendrycks & Gimpel 2016; differentiated by hand):
//   exact: Phi(s) + s phi(s) = (1 + erf(s / sqrt(2))) / 2 + s exp(-s^2 / 2) / sqrt(2 pi)
//   tanh:  with u = beta (s + kappa s^3), t = tanh(u), u' = beta (1 + 3 kappa s^2):
//          (1 + t) / 2 + s (1 - t^2) u' / 2
at::Tensor gelu_derivative(const at::Tensor& s, bool tanh) {
  if (tanh) {
    const at::Tensor s_sq = s * s;
    const at::Tensor t = at::tanh(kBeta * (s + kKappa * s_sq * s));
    return 0.5 * (1 + t) + 0.5 * s * (1 - t * t) * kBeta * (1 + 3 * kKappa * s_sq);
  }
  return 0.5 * (1 + at::erf(s * M_SQRT1_2)) + s * at::exp(-0.5 * s * s) * kInvSqrt2Pi;
}

// d^2 gelu / ds^2, the derivative of the above:
//   exact: phi(s) (2 - s^2)            (phi' = -s phi)
//   tanh:  (1 - t^2) (u' + s (u'' - 2 t u'^2) / 2), u'' = 6 beta kappa s   (t' = (1 - t^2) u')
at::Tensor gelu_second_derivative(const at::Tensor& s, bool tanh) {
  const at::Tensor s_sq = s * s;
  if (tanh) {
    const at::Tensor t = at::tanh(kBeta * (s + kKappa * s_sq * s));
    const at::Tensor du = kBeta * (1 + 3 * kKappa * s_sq);
    const at::Tensor ddu = (6 * kBeta * kKappa) * s;
    return (1 - t * t) * (du + 0.5 * s * (ddu - 2 * t * du * du));
  }
  return at::exp(-0.5 * s_sq) * kInvSqrt2Pi * (2 - s_sq);
}

BiasGeluBackwardResult bias_gelu_backward_composite(const BiasGeluBackwardArgs& a) {
  const auto dtype = a.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  // NB: s is rounded to the dtype before the GELU, as in the forward.
  const at::Tensor s = (a.input + a.bias).to(acc);
  const at::Tensor grad_input = a.grad.to(acc) * gelu_derivative(s, a.approximate == "tanh");
  const at::Tensor grad_bias = grad_input.sum_to_size_symint(a.bias.sym_sizes());
  return {grad_input.to(dtype), grad_bias.to(dtype)};
}

}  // namespace detail

namespace {

struct BiasGeluBackwardGrads {
  at::Tensor grad;
  at::Tensor input;
  at::Tensor bias;
};

BiasGeluBackwardArgs bias_gelu_backward_save(const BiasGeluBackwardArgs& a,
                                             const BiasGeluBackwardResult&) {
  return a;
}

/// The op's inputs in the compute dtype: s = x + b (rounded to the dtype first) and g.
struct BiasGeluBackwardWidened {
  at::ScalarType dtype;
  at::Tensor s;
  at::Tensor g;
};

BiasGeluBackwardWidened bias_gelu_backward_widen(const BiasGeluBackwardArgs& a) {
  const auto dtype = a.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  return {dtype, (a.input + a.bias).to(acc), a.grad.to(acc)};
}

// Double backward. The op maps (g, x, b) to (gi, gb) = (g gelu'(s), sum of gi over the rows),
// s = x + b; with the cotangents (ci, cb) and c = ci + cb broadcast over the rows:
//   d/dg = c gelu'(s);  d/dx = c g gelu''(s);  d/db = d/dx summed over the rows.
BiasGeluBackwardGrads bias_gelu_backward_double_backward(const BiasGeluBackwardArgs& a,
                                                         const at::Tensor& ci,
                                                         const at::Tensor& cb) {
  if (!ci.defined() && !cb.defined()) return {};
  const BiasGeluBackwardWidened w = bias_gelu_backward_widen(a);
  const bool tanh = a.approximate == "tanh";
  at::Tensor c = ci.defined() ? ci.to(w.s.scalar_type()) : at::Tensor();
  if (cb.defined()) {
    const at::Tensor cbw = cb.to(w.s.scalar_type());
    c = c.defined() ? c + cbw : cbw.expand_as(w.s);
  }
  const at::Tensor ds = c * w.g * detail::gelu_second_derivative(w.s, tanh);
  return {(c * detail::gelu_derivative(w.s, tanh)).to(w.dtype), ds.to(w.dtype),
          ds.sum_to_size_symint(a.bias.sym_sizes()).to(w.dtype)};
}

// JVP: d gi = dg gelu'(s) + g gelu''(s) (dx + db); d gb = d gi summed over the rows.
BiasGeluBackwardResult bias_gelu_backward_jvp(const BiasGeluBackwardArgs& p,
                                              const BiasGeluBackwardArgs& t,
                                              const BiasGeluBackwardResult& /*out*/) {
  if (!t.grad.defined() && !t.input.defined() && !t.bias.defined()) return {};
  const BiasGeluBackwardWidened w = bias_gelu_backward_widen(p);
  const bool tanh = p.approximate == "tanh";
  const auto acc = w.s.scalar_type();
  at::Tensor d = at::zeros_like(w.s);
  if (t.grad.defined()) d = d + t.grad.to(acc) * detail::gelu_derivative(w.s, tanh);
  at::Tensor ds;
  if (t.input.defined()) ds = t.input.to(acc);
  if (t.bias.defined()) ds = ds.defined() ? ds + t.bias.to(acc) : t.bias.to(acc).expand_as(w.s);
  if (ds.defined()) d = d + w.g * detail::gelu_second_derivative(w.s, tanh) * ds;
  return {d.to(w.dtype), d.sum_to_size_symint(p.bias.sym_sizes()).to(w.dtype)};
}

std::tuple<TensorSpec, TensorSpec> bias_gelu_backward_shape(const BiasGeluBackwardArgs& a) {
  detail::check_bias_gelu_backward(a, a.input.device().type());
  return {TensorSpec::like(a.input), TensorSpec::like(a.bias)};
}

std::vector<std::pair<std::string, BiasGeluBackwardArgs>> bias_gelu_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"exact, contiguous [4, 8]",
       {sample_randn({4, 8}, 31, dev, dt), sample_randn({4, 8}, 21, dev, dt),
        sample_randn({8}, 22, dev, dt), "none"}},
      {"tanh, transposed grad and input [5, 6]",
       {sample_randn({6, 5}, 33, dev, dt).t(), sample_randn({6, 5}, 23, dev, dt).t(),
        sample_randn({6}, 24, dev, dt), "tanh"}},
      {"exact, sliced 3-d grad and input, strided bias [2, 3, 7]",
       {sample_randn({2, 3, 14}, 35, dev, dt).slice(-1, 0, 14, 2),
        sample_randn({2, 3, 14}, 25, dev, dt).slice(-1, 1, 14, 2),
        sample_randn({14}, 26, dev, dt).slice(0, 0, 14, 2), "none"}},
      {"tanh, 1-d [17]",
       {sample_randn({17}, 37, dev, dt), sample_randn({17}, 27, dev, dt),
        sample_randn({17}, 28, dev, dt), "tanh"}},
  };
}

}  // namespace

Op<BiasGeluBackwardArgs, BiasGeluBackwardResult>& bias_gelu_backward_op() {
  using O = Op<BiasGeluBackwardArgs, BiasGeluBackwardResult>;
  static O& op = []() -> O& {
    auto& o = define<BiasGeluBackwardArgs, BiasGeluBackwardResult>(
        "customop::bias_gelu_backward(Tensor grad, Tensor input, Tensor bias, "
        "str approximate=\"none\") -> (Tensor grad_input, Tensor grad_bias)");
    o.shape(&bias_gelu_backward_shape);
    o.impl(c10::DeviceType::CPU, &detail::bias_gelu_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::bias_gelu_backward_cuda);
#endif
    o.reference(&detail::bias_gelu_backward_composite);
    // Sharding: along the last dim every rank holds its columns of every tensor, and grad_bias
    // is its slice of the whole. (A leading-dim shard would make grad_bias a partial sum; it
    // is redistributed instead. bias_gelu's own backward runs the ATen formula on DTensors.)
    o.sharding(Sharding::strategies({{.inputs = {{"grad", Placement::shard(-1)},
                                                 {"input", Placement::shard(-1)},
                                                 {"bias", Placement::shard(0)}},
                                      .outputs = {Placement::shard(-1), Placement::shard(0)}}}));
    o.autocast(AutocastPolicy::kPromote);
    o.impl_autograd(&bias_gelu_backward_save, &bias_gelu_backward_double_backward);
    o.impl_jvp(&bias_gelu_backward_jvp);
    // vmap: grad_bias sums the rows, so a batch folded into them would be summed too.
    o.vmap(customop::BatchRule::loop());
    o.samples(&bias_gelu_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& bias_gelu_backward_registered = bias_gelu_backward_op();
}  // namespace

}  // namespace customop::ops
