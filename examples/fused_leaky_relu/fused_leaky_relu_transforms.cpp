// torch.func support for the customop registration of the fused bias + leaky ReLU, which a
// torch::autograd::Function cannot have (the by-hand registration has none; bench/glue_lines.py
// leaves this file out): a JVP and a batching rule for the forward op and for its backward op,
// so that jvp, jacfwd, hessian (forward over reverse) and per-sample gradients (vmap(grad))
// run, vmap's per-example fallback off. The backward op is transformed too: jacrev and vmap(grad)
// batch it, hessian differentiates it forward.
#include "fused_leaky_relu.h"
#include "tensor_kernels.h"

#include <ATen/ATen.h>

#include <tuple>
#include <vector>

namespace flrelu {

namespace {

using BackwardOp = customop::Op<BackwardArgs, std::tuple<at::Tensor, at::Tensor>>;

// The batch (dim 0, size b) folded into N: [b, N, C, *] -> [b * N, C, *]; an unbatched tensor
// ([N, C, *]) is expanded to the batch first.
at::Tensor fold(const at::Tensor& t, bool batched, int64_t b) {
  if (batched) return t.flatten(0, 1);
  std::vector<int64_t> sizes{b};
  sizes.insert(sizes.end(), t.sizes().begin(), t.sizes().end());
  return t.unsqueeze(0).expand(sizes).flatten(0, 1);
}

}  // namespace

void add_transforms(customop::Op<Args>& fwd, BackwardOp& bwd) {
  // out = scale * leaky_relu(x + bias), so d out = scale * (out > 0 ? 1 : slope) * (dx + dbias):
  // the backward kernel's grad_x for grad = dx + dbias (broadcast over dim 1).
  fwd.impl_jvp([&bwd](const Args& p, const Args& t, const at::Tensor& out) {
    at::Tensor d = t.x;
    if (t.bias.defined()) {
      const at::Tensor db = bias_as_input(t.bias, out);
      d = d.defined() ? d + db : db.expand_as(out);
    }
    if (!d.defined()) return at::Tensor();
    return std::get<0>(
        bwd({.grad = d, .out = out, .negative_slope = p.negative_slope, .scale = p.scale}));
  });
  // The backward op is linear in grad, and out enters only through its sign (piecewise
  // constant): its tangent is the op itself applied to grad's tangent.
  bwd.impl_jvp([&bwd](const BackwardArgs& p, const BackwardArgs& t,
                      const std::tuple<at::Tensor, at::Tensor>&) {
    if (!t.grad.defined()) return std::tuple<at::Tensor, at::Tensor>{};
    BackwardArgs again = p;
    again.grad = t.grad;
    return bwd(again);
  });
  // Under vmap: with x alone batched, the batch folds into N and one call serves it; a
  // per-example bias takes one call per example.
  fwd.vmap([&fwd](const Args& a, const customop::BatchInfo& b) -> at::Tensor {
    if (!b.batched("bias")) {
      Args folded = a;
      folded.x = a.x.flatten(0, 1);
      return fwd(folded).unflatten(0, {b.size(), a.x.size(1)});
    }
    std::vector<at::Tensor> outs;
    for (int64_t i = 0; i < b.size(); ++i) {
      Args one = a;
      one.x = b.batched("x") ? a.x[i] : a.x;
      one.bias = a.bias[i];
      outs.push_back(fwd(one));
    }
    return at::stack(outs);
  });
  // The backward op folds the batch into N too; grad_bias is then per example: grad_x summed
  // over every dim but the batch and the channel.
  bwd.vmap([&bwd](const BackwardArgs& a, const customop::BatchInfo& b) {
    const int64_t n = b.batched("out") ? a.out.size(1) : a.out.size(0);
    BackwardArgs folded = a;
    folded.grad = fold(a.grad, b.batched("grad"), b.size());
    folded.out = fold(a.out, b.batched("out"), b.size());
    const at::Tensor grad_x = std::get<0>(bwd(folded)).unflatten(0, {b.size(), n});
    std::vector<int64_t> dims{1};
    for (int64_t k = 3; k < grad_x.dim(); ++k) dims.push_back(k);
    return std::tuple<at::Tensor, at::Tensor>{grad_x, grad_x.sum(dims)};
  });
}

}  // namespace flrelu
