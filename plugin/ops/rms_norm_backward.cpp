// customop::rms_norm_backward: schema, checks, the ATen formula (reference, double backward,
// and rms_norm's backward where the kernels do not run), samples, registration.

#include "detail/checks.h"
#include "detail/rms_norm.h"
#include "detail/samples.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

namespace customop::ops {

namespace detail {

void check_rms_norm_backward(const RmsNormBackwardArgs& a, c10::DeviceType device) {
  check_rms_norm_args("rms_norm_backward", a.input, a.weight, a.eps, device);
  check_same_device("rms_norm_backward", "grad", a.grad, "input", a.input);
  check_same_dtype("rms_norm_backward", "grad", a.grad, "input", a.input);
  TORCH_CHECK(a.grad.sym_sizes() == a.input.sym_sizes(),
              "rms_norm_backward: grad must have input's shape ", a.input.sym_sizes(), ", but got ",
              a.grad.sym_sizes());
}

// With r = rsqrt(mean(x^2) + eps) and xhat = x r (y = xhat w), over the last dim:
//   grad_input  = r (g w - xhat mean(g w xhat))
//   grad_weight = g xhat summed over every leading dim
// float16/bfloat16 in float32, as the forward reduces.
RmsNormBackwardResult rms_norm_backward_composite(const RmsNormBackwardArgs& a) {
  const auto dtype = a.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor x = a.input.to(acc);
  const at::Tensor w = a.weight.to(acc);
  const at::Tensor g = a.grad.to(acc);
  const at::Tensor r = at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + a.eps);
  const at::Tensor xhat = x * r;
  const at::Tensor gw = g * w;
  const at::Tensor grad_input = r * (gw - xhat * (gw * xhat).mean(-1, /*keepdim=*/true));
  const at::Tensor grad_weight = (g * xhat).sum_to_size_symint(w.sym_sizes());
  return {grad_input.to(dtype), grad_weight.to(dtype)};
}

}  // namespace detail

namespace {

struct RmsNormBackwardGrads {
  at::Tensor grad;
  at::Tensor input;
  at::Tensor weight;
};

RmsNormBackwardArgs rms_norm_backward_save(const RmsNormBackwardArgs& a,
                                           const RmsNormBackwardResult&) {
  return a;
}

// Double backward: the VJP of the ATen formula, by autograd. A saved tensor that carries a
// graph (create_graph=True upstream) enters through a view of itself, so the VJP's own graph
// (under grad mode here) reaches back to it and every higher order is differentiated too; one
// that carries none enters as a fresh leaf.
RmsNormBackwardGrads rms_norm_backward_double_backward(const RmsNormBackwardArgs& a,
                                                       const at::Tensor& ci, const at::Tensor& cw) {
  if (!ci.defined() && !cw.defined()) return {};
  const bool create_graph = at::GradMode::is_enabled();
  const at::AutoGradMode grad_mode(true);
  const auto enter = [](const at::Tensor& t) {
    return t.requires_grad() ? t.view_as(t) : t.detach().requires_grad_();
  };
  const RmsNormBackwardArgs in{enter(a.grad), enter(a.input), enter(a.weight), a.eps};
  const auto [gi, gw] = detail::rms_norm_backward_composite(in);
  std::vector<at::Tensor> outs, cots;
  if (ci.defined()) {
    outs.push_back(gi);
    cots.push_back(ci);
  }
  if (cw.defined()) {
    outs.push_back(gw);
    cots.push_back(cw);
  }
  const auto vjp = torch::autograd::grad(outs, {in.grad, in.input, in.weight}, cots,
                                         /*retain_graph=*/create_graph,
                                         /*create_graph=*/create_graph, /*allow_unused=*/true);
  return {vjp[0], vjp[1], vjp[2]};
}

// JVP, differentiated by hand from the formula above (per row, means over the last dim):
//   r = rsqrt(mean(x^2) + eps),  dr = -r^3 mean(x dx)
//   xhat = x r,                  dxhat = dx r + x dr
//   gw = g w,                    dgw = dg w + g dw
//   m = mean(gw xhat),           dm = mean(dgw xhat + gw dxhat)
//   d grad_input  = dr (gw - xhat m) + r (dgw - dxhat m - xhat dm)
//   d grad_weight = (dg xhat + g dxhat) summed over every leading dim
// A tangent that is not given counts as 0. float16/bfloat16 in float32, as the formula.
RmsNormBackwardResult rms_norm_backward_jvp(const RmsNormBackwardArgs& p,
                                            const RmsNormBackwardArgs& t,
                                            const RmsNormBackwardResult& /*out*/) {
  if (!t.grad.defined() && !t.input.defined() && !t.weight.defined()) return {};
  const auto dtype = p.input.scalar_type();
  const auto acc = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  const at::Tensor x = p.input.to(acc), w = p.weight.to(acc), g = p.grad.to(acc);
  const auto tangent = [&](const at::Tensor& d, const at::Tensor& like) {
    return d.defined() ? d.to(acc) : at::zeros_like(like);
  };
  const at::Tensor dx = tangent(t.input, x), dw = tangent(t.weight, w), dg = tangent(t.grad, g);
  const at::Tensor r = at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + p.eps);
  const at::Tensor dr = -(r * r * r) * (x * dx).mean(-1, /*keepdim=*/true);
  const at::Tensor xhat = x * r, dxhat = dx * r + x * dr;
  const at::Tensor gw = g * w, dgw = dg * w + g * dw;
  const at::Tensor m = (gw * xhat).mean(-1, /*keepdim=*/true);
  const at::Tensor dm = (dgw * xhat + gw * dxhat).mean(-1, /*keepdim=*/true);
  const at::Tensor d_input = dr * (gw - xhat * m) + r * (dgw - dxhat * m - xhat * dm);
  const at::Tensor d_weight = (dg * xhat + g * dxhat).sum_to_size_symint(w.sym_sizes());
  return {d_input.to(dtype), d_weight.to(dtype)};
}

std::tuple<TensorSpec, TensorSpec> rms_norm_backward_shape(const RmsNormBackwardArgs& a) {
  detail::check_rms_norm_backward(a, a.input.device().type());
  return {TensorSpec::like(a.input), TensorSpec::like(a.weight)};
}

std::vector<std::pair<std::string, RmsNormBackwardArgs>> rms_norm_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"contiguous [4, 8]",
       {sample_randn({4, 8}, 11, dev, dt), sample_randn({4, 8}, 1, dev, dt),
        sample_randn({8}, 2, dev, dt), 1e-6}},
      {"transposed grad and input [5, 6]",
       {sample_randn({6, 5}, 13, dev, dt).t(), sample_randn({6, 5}, 3, dev, dt).t(),
        sample_randn({6}, 4, dev, dt), 1e-5}},
      {"sliced 3-d grad and input, strided weight [2, 3, 7]",
       {sample_randn({2, 3, 14}, 15, dev, dt).slice(-1, 1, 14, 2),
        sample_randn({2, 3, 14}, 5, dev, dt).slice(-1, 0, 14, 2),
        sample_randn({14}, 6, dev, dt).slice(0, 0, 14, 2), 1e-3}},
      {"1-d [33]",
       {sample_randn({33}, 17, dev, dt), sample_randn({33}, 7, dev, dt),
        sample_randn({33}, 8, dev, dt), 1e-6}},
  };
}

}  // namespace

Op<RmsNormBackwardArgs, RmsNormBackwardResult>& rms_norm_backward_op() {
  using O = Op<RmsNormBackwardArgs, RmsNormBackwardResult>;
  static O& op = []() -> O& {
    auto& o = define<RmsNormBackwardArgs, RmsNormBackwardResult>(
        "customop::rms_norm_backward(Tensor grad, Tensor input, Tensor weight, float eps=1e-6) "
        "-> (Tensor grad_input, Tensor grad_weight)");
    o.shape(&rms_norm_backward_shape);
    o.impl(c10::DeviceType::CPU, &detail::rms_norm_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::rms_norm_backward_cuda);
#endif
    o.reference(&detail::rms_norm_backward_composite);
    // Sharding: replicate. A row shard makes grad_weight a partial sum and a 1-d input has no
    // row dim to shard; rms_norm's own backward runs the ATen formula on DTensors.
    o.sharding(Sharding::replicate());
    // Autocast: float32, as rms_norm.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&rms_norm_backward_save, &rms_norm_backward_double_backward);
    o.impl_jvp(&rms_norm_backward_jvp);
    // vmap: grad_weight sums the rows, so a batch folded into them would be summed too.
    o.vmap(customop::BatchRule::loop());
    o.samples(&rms_norm_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& rms_norm_backward_registered = rms_norm_backward_op();
}  // namespace

}  // namespace customop::ops
