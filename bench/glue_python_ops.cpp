// libglue_python_ops.so: y = x * alpha three ways, for glue_python.py's floor rows (the cost of
// a customop op called from Python against the same math as a hand-written C++ op reached
// through torch.ops the same way):
//   glue_bench::scale         customop op, by-name grads (glue_variants.h)
//   glue_bench::scale_typed   customop op, typed grads (glue_variants.h)
//   glue_bench::scale_by_hand TORCH_LIBRARY op written as the PyTorch C++ custom-op tutorial
//                             does it: a CPU kernel, and an Autograd kernel that runs a
//                             torch::autograd::Function whose forward calls the op again below
//                             autograd (ScaleFunction's math, through the dispatcher)
// Loading the library registers all three (torch.ops.load_library).

#include "glue_variants.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/torch.h>

namespace {

at::Tensor scale_by_hand_cpu(const at::Tensor& x, double alpha) { return x * alpha; }

at::Tensor scale_by_hand_call(const at::Tensor& x, double alpha) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("glue_bench::scale_by_hand", "")
                             .typed<at::Tensor(const at::Tensor&, double)>();
  return op.call(x, alpha);
}

struct ScaleByHand : torch::autograd::Function<ScaleByHand> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double alpha) {
    ctx->saved_data["alpha"] = alpha;
    at::AutoDispatchBelowADInplaceOrView guard;
    return scale_by_hand_call(x, alpha);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {g[0] * ctx->saved_data["alpha"].toDouble(), at::Tensor()};
  }
};

at::Tensor scale_by_hand_autograd(const at::Tensor& x, double alpha) {
  return ScaleByHand::apply(x, alpha);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(glue_bench, m) { m.def("scale_by_hand(Tensor x, float alpha) -> Tensor"); }
TORCH_LIBRARY_IMPL(glue_bench, CPU, m) { m.impl("scale_by_hand", &scale_by_hand_cpu); }
TORCH_LIBRARY_IMPL(glue_bench, Autograd, m) { m.impl("scale_by_hand", &scale_by_hand_autograd); }

namespace {
// The customop ops register when first defined.
[[maybe_unused]] const bool registered = [] {
  customop::bench::by_name_op();
  customop::bench::typed_op();
  return true;
}();
}  // namespace
