// customop::fused_add_rms_norm_: schema, shape function (its checks), samples, registration.
// An op that writes its arguments (customop::MutableTensor) and returns nothing.

#include "detail/fused_add_rms_norm.h"
#include "detail/checks.h"
#include "detail/samples.h"

#include <string>
#include <utility>
#include <vector>

namespace customop::ops {

namespace detail {

void check_fused_add_rms_norm(const FusedAddRmsNormArgs& a) {
  constexpr const char* kOp = "fused_add_rms_norm_";
  check_same_device(kOp, "residual", a.residual, "input", a.input);
  check_same_device(kOp, "weight", a.weight, "input", a.input);
  check_floating(kOp, "input", a.input, a.input.device().type());
  check_same_dtype(kOp, "residual", a.residual, "input", a.input);
  check_same_dtype(kOp, "weight", a.weight, "input", a.input);
  TORCH_CHECK(a.input.dim() >= 1, kOp,
              ": input must have shape [..., D] (at least 1 dim), but got a 0-d tensor");
  TORCH_CHECK(a.residual.sym_sizes() == a.input.sym_sizes(), kOp,
              ": residual must have input's shape ", a.input.sym_sizes(), ", but got ",
              a.residual.sym_sizes());
  TORCH_CHECK(a.weight.dim() == 1, kOp, ": weight must have shape [D] = [", a.input.sym_size(-1),
              "], but got ", a.weight.sym_sizes());
  TORCH_SYM_CHECK(a.weight.sym_size(0).sym_eq(a.input.sym_size(-1)),
                  "fused_add_rms_norm_: weight must have shape [D] = [", a.input.sym_size(-1),
                  "], but got ", a.weight.sym_sizes());
  TORCH_CHECK_VALUE(a.eps >= 0, kOp, ": eps must be >= 0, but got ", a.eps);
}

}  // namespace detail

namespace {

// No input is differentiable here (a written argument that requires grad is refused), so the
// harness runs its op checks (mutation audit, fake kernel over the shape sweep) and says that
// no gradient is checked.
std::vector<std::pair<std::string, FusedAddRmsNormArgs>> fused_add_rms_norm_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  return {
      {"contiguous [4, 8]",
       {sample_randn({4, 8}, 1, dev, dt), sample_randn({4, 8}, 2, dev, dt),
        sample_randn({8}, 3, dev, dt), 1e-6}},
      {"transposed input and residual [5, 6]",
       {sample_randn({6, 5}, 4, dev, dt).t(), sample_randn({6, 5}, 5, dev, dt).t(),
        sample_randn({6}, 6, dev, dt), 1e-5}},
      {"3-d [2, 3, 7]",
       {sample_randn({2, 3, 7}, 7, dev, dt), sample_randn({2, 3, 7}, 8, dev, dt),
        sample_randn({7}, 9, dev, dt), 1e-3}},
  };
}

}  // namespace

Op<FusedAddRmsNormArgs, void>& fused_add_rms_norm_op() {
  static Op<FusedAddRmsNormArgs, void>& op = []() -> Op<FusedAddRmsNormArgs, void>& {
    auto& o = define<FusedAddRmsNormArgs, void>(
        "customop::fused_add_rms_norm_(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "
        "float eps=1e-6) -> ()");
    o.impl(c10::DeviceType::CPU, &detail::fused_add_rms_norm_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::fused_add_rms_norm_cuda);
#endif
    // The shape function of an op that returns nothing: its checks, run by the fake kernel
    // (torch.compile reports bad input) and before every device's kernel.
    o.shape(&detail::check_fused_add_rms_norm);
    // Under vmap: one call per example, writing its slice of input and residual (both must
    // be batched when anything is).
    o.vmap(customop::BatchRule::loop());
    o.samples(&fused_add_rms_norm_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& fused_add_rms_norm_registered = fused_add_rms_norm_op();
}  // namespace

}  // namespace customop::ops
