#include "smooth_abs.h"

#include <ATen/ATen.h>

#ifdef DOWNSTREAM_WITH_CUDA
#include "smooth_abs_params.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace downstream {
namespace {

struct SmoothAbsSaved {
  at::Tensor x;
  at::Tensor y;
};

void check_args(const SmoothAbsArgs& a) {
  TORCH_CHECK_TYPE(a.x.scalar_type() == at::kFloat || a.x.scalar_type() == at::kDouble,
                   "smooth_abs: x must be float32 or float64, but got ", a.x.scalar_type());
  TORCH_CHECK_VALUE(a.eps > 0, "smooth_abs: eps must be > 0, but got ", a.eps);
}

at::Tensor smooth_abs_cpu(const SmoothAbsArgs& a) {
  check_args(a);
  return at::sqrt(a.x * a.x + a.eps * a.eps).contiguous();
}

#ifdef DOWNSTREAM_WITH_CUDA
at::Tensor smooth_abs_cuda(const SmoothAbsArgs& a) {
  check_args(a);
  const c10::cuda::CUDAGuard guard(a.x.device());
  const at::Tensor x = a.x.contiguous();
  at::Tensor y = at::empty_like(x);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaError_t err = cudaSuccess;
  if (x.scalar_type() == at::kDouble) {
    err = launch_smooth_abs_fwd<double>(
        {x.data_ptr<double>(), y.data_ptr<double>(), x.numel(), a.eps * a.eps}, stream);
  } else {
    err = launch_smooth_abs_fwd<float>(
        {x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), static_cast<float>(a.eps * a.eps)},
        stream);
  }
  TORCH_CHECK(err == cudaSuccess,
              "smooth_abs: CUDA kernel launch failed: ", cudaGetErrorString(err));
  return y;
}
#endif

customop::Op<SmoothAbsArgs>& define_smooth_abs() {
  auto& op =
      customop::define<SmoothAbsArgs>("downstream::smooth_abs(Tensor x, float eps) -> Tensor");
  op.impl(c10::DeviceType::CPU, smooth_abs_cpu);
#ifdef DOWNSTREAM_WITH_CUDA
  op.impl(c10::DeviceType::CUDA, smooth_abs_cuda);
#endif
  // dy/dx = x / y (y >= eps > 0, so no division by zero).
  op.impl_save_for_backward([](const SmoothAbsArgs& in, const at::Tensor& y) {
    return SmoothAbsSaved{in.x, y};
  });
  op.impl_backward([](const SmoothAbsSaved& s, const at::Tensor& grad_y) {
    return customop::Grads{{"x", grad_y * s.x / s.y}};
  });
  return op;
}

// Registers the op when the library loads, so torch.ops.load_library finds it.
[[maybe_unused]] const bool kRegistered = (smooth_abs_op(), true);

}  // namespace

customop::Op<SmoothAbsArgs>& smooth_abs_op() {
  static customop::Op<SmoothAbsArgs>& op = define_smooth_abs();
  return op;
}

}  // namespace downstream
