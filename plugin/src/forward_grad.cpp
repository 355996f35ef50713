// Forward-mode AD for customop ops (the JVP's registration, Op::impl_jvp, is in
// op_autograd.cpp beside the backward's): the refusal of a
// tangent when the op has none (naming the op and the argument, never a silent zero tangent),
// and the step after the kernel that runs the JVP and sets each output's tangent, as torch's
// generated autograd kernels do: at dual level 0 (torch.func's jvp transform maps its levels
// onto it), without switching grad or forward-grad mode, so that the formula's own ops are
// differentiated by the transforms around this one (hessian = jacfwd(jacrev)).

#include "op_core_internal.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/functions/utils.h>

namespace customop {

namespace {

at::Tensor tangent_of(const at::Tensor& t) {
  return t.defined() ? t._fw_grad(/*level=*/0) : at::Tensor();
}

}  // namespace

bool OpCore::forward_grad_needed(const torch::jit::Stack& stack) const {
  // No dual level entered: nothing can carry a tangent. (try_get_by_idx, not has_any_level:
  // torch 2.11 has only the former.)
  if (torch::autograd::ForwardADLevel::try_get_by_idx(0) == nullptr) return false;
  const std::size_t n = args_.size();
  bool needed = false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    bool has_tangent = false;
    if (v.isTensor()) {
      has_tangent = tangent_of(v.toTensor()).defined();
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        has_tangent = has_tangent || tangent_of(t).defined();
      }
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        !has_tangent || has_jvp(), name_, ": forward-mode AD is not supported: argument '",
        args_[i].name,
        "' carries a tangent (torch.autograd.forward_ad dual tensor, torch.func.jvp, jacfwd "
        "or hessian), but the op has no JVP formula. Register one with op.impl_jvp(fn), or "
        "use reverse mode (Tensor.backward, torch.autograd.grad, torch.func.grad, jacrev)");
    needed = needed || has_tangent;
  }
  return needed;
}

void OpCore::apply_forward_grads(const torch::jit::Stack& args, const torch::jit::Stack& stack) {
  // The formula sees primals without their tangents (Tensor._fw_primal, as torch's own kernels
  // do): a tangent computed from a dual primal would carry a tangent itself, which torch refuses.
  const std::size_t n = args_.size();
  torch::jit::Stack primals;
  torch::jit::Stack tangents;
  primals.reserve(n);
  tangents.reserve(n);
  auto primal_of = [](const at::Tensor& t) {
    return tangent_of(t).defined() ? t._fw_primal(/*level=*/0) : t;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      primals.emplace_back(primal_of(v.toTensor()));
      tangents.emplace_back(tangent_of(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> p;
      std::vector<at::Tensor> t;
      for (const at::Tensor& e : v.toTensorList()) {
        p.push_back(primal_of(e));
        t.push_back(tangent_of(e));
      }
      primals.emplace_back(std::move(p));
      tangents.emplace_back(std::move(t));
    } else {
      primals.push_back(v);
      tangents.push_back(v);
    }
  }
  const std::size_t num_returns = returns_.size();
  const torch::jit::Stack outputs(stack.end() - static_cast<std::ptrdiff_t>(num_returns),
                                  stack.end());
  torch::jit::Stack result;
  try {
    jvp_boxed(primals, tangents, outputs, result);
  } catch (...) {
    detail::rethrow_naming_op(name_, "JVP", jvp_loc_ ? &*jvp_loc_ : nullptr);
  }
  TORCH_INTERNAL_ASSERT(result.size() == num_returns);
  for (std::size_t r = 0; r < num_returns; ++r) {
    auto set = [&](const at::Tensor& out, const at::Tensor& tangent, const std::string& what) {
      if (!tangent.defined() || !out.defined() ||
          !torch::autograd::isDifferentiableType(out.scalar_type())) {
        return;
      }
      TORCH_CHECK(tangent.sym_sizes() == out.sym_sizes() &&
                      tangent.scalar_type() == out.scalar_type() &&
                      tangent.device() == out.device(),
                  name_, ": the JVP registered at ", format_location(*jvp_loc_),
                  " returned a tangent for ", what, " of shape ", tangent.sym_sizes(), ", dtype ",
                  tangent.scalar_type(), " on ", tangent.device(), ", but that output has shape ",
                  out.sym_sizes(), ", dtype ", out.scalar_type(), " on ", out.device(),
                  " (a tangent has its output's shape, dtype and device)");
      out._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/false);
    };
    const c10::IValue& o = outputs[r];
    const c10::IValue& t = result[r];
    if (o.isTensor()) {
      set(o.toTensor(), t.isTensor() ? t.toTensor() : at::Tensor(), c10::str("return ", r));
    } else if (o.isTensorList()) {
      const auto outs = o.toTensorVector();
      const auto ts = t.isTensorList() ? t.toTensorVector() : std::vector<at::Tensor>{};
      TORCH_CHECK(ts.empty() || ts.size() == outs.size(), name_, ": the JVP registered at ",
                  format_location(*jvp_loc_), " returned ", ts.size(), " tangents for return ", r,
                  ", a list of ", outs.size(), " tensors");
      for (std::size_t k = 0; k < ts.size(); ++k) {
        set(outs[k], ts[k], c10::str("return ", r, "[", k, "]"));
      }
    }
  }
}

}  // namespace customop
