#include "tensor_kernels.h"

#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>

#include <vector>

#ifdef FLRELU_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace flrelu {
namespace {

constexpr const char* kForward = "fused_bias_leaky_relu";
constexpr const char* kBackward = "fused_bias_leaky_relu_backward";

void check_values(const char* op, double negative_slope, double scale) {
  TORCH_CHECK_VALUE(negative_slope >= 0, op, ": negative_slope must be >= 0, but got ",
                    negative_slope);
  TORCH_CHECK_VALUE(scale > 0, op, ": scale must be > 0, but got ", scale);
}

void check_forward(const at::Tensor& x, const at::Tensor& bias, double negative_slope,
                   double scale) {
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK_TYPE(t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                   kForward, ": x must be float16, bfloat16, float32 or float64, but got ", t);
  TORCH_CHECK_TYPE(bias.scalar_type() == x.scalar_type(), kForward, ": bias must have x's dtype ",
                   x.scalar_type(), ", but got ", bias.scalar_type());
  TORCH_CHECK(bias.device() == x.device(), kForward, ": bias must be on x's device ", x.device(),
              ", but is on ", bias.device());
  TORCH_CHECK(x.dim() >= 2, kForward, ": x must have shape [N, C, *], but got ", x.sym_sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.sym_size(0) == x.sym_size(1), kForward,
              ": bias must have shape [C] = [", x.sym_size(1), "], but got ", bias.sym_sizes());
  check_values(kForward, negative_slope, scale);
}

void check_backward(const at::Tensor& grad, const at::Tensor& out, double negative_slope,
                    double scale) {
  TORCH_CHECK(out.dim() >= 2, kBackward, ": out must have shape [N, C, *], but got ",
              out.sym_sizes());
  TORCH_CHECK(grad.sym_sizes() == out.sym_sizes(), kBackward, ": grad must have out's shape ",
              out.sym_sizes(), ", but got ", grad.sym_sizes());
  TORCH_CHECK_TYPE(grad.scalar_type() == out.scalar_type(), kBackward,
                   ": grad must have out's dtype ", out.scalar_type(), ", but got ",
                   grad.scalar_type());
  TORCH_CHECK(grad.device() == out.device(), kBackward, ": grad must be on out's device ",
              out.device(), ", but is on ", grad.device());
  check_values(kBackward, negative_slope, scale);
}

struct Dims {
  int64_t outer, channels, inner;
};

Dims dims_of(const at::Tensor& t) {
  int64_t inner = 1;
  for (int64_t d = 2; d < t.dim(); ++d) inner *= t.size(d);
  return {t.size(0), t.size(1), inner};
}

// The kernel for a params struct, by overload.
template <class T>
void run_cpu(const ForwardParams<T>& p) {
  forward_cpu(p);
}
template <class T>
void run_cpu(const BackwardParams<T>& p) {
  backward_cpu(p);
}
#ifdef FLRELU_WITH_CUDA
// The CUDA kernels take CUDA's own 16-bit types, of the same layout as c10's.
template <class T>
struct CudaScalar {
  using type = T;
};
template <>
struct CudaScalar<c10::Half> {
  using type = __half;
};
template <>
struct CudaScalar<c10::BFloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using cuda_t = typename CudaScalar<T>::type;

template <class T>
cudaError_t run_cuda(const ForwardParams<T>& p, cudaStream_t stream) {
  using D = cuda_t<T>;
  static_assert(sizeof(D) == sizeof(T) && alignof(D) == alignof(T));
  const ForwardParams<D> d{reinterpret_cast<const D*>(p.x),
                           reinterpret_cast<const D*>(p.bias),
                           reinterpret_cast<D*>(p.out),
                           p.outer,
                           p.channels,
                           p.inner,
                           p.negative_slope,
                           p.scale};
  return forward_cuda(d, stream);
}
template <class T>
cudaError_t run_cuda(const BackwardParams<T>& p, cudaStream_t stream) {
  using D = cuda_t<T>;
  static_assert(sizeof(D) == sizeof(T) && alignof(D) == alignof(T));
  const BackwardParams<D> d{reinterpret_cast<const D*>(p.grad),
                            reinterpret_cast<const D*>(p.out),
                            reinterpret_cast<D*>(p.grad_x),
                            reinterpret_cast<D*>(p.grad_bias),
                            p.outer,
                            p.channels,
                            p.inner,
                            p.negative_slope,
                            p.scale};
  return backward_cuda(d, stream);
}
#endif

// Runs the CPU kernel of `p` on CPU tensors and its CUDA kernel (on `device`'s current stream)
// on CUDA ones; `op` names the op in the errors.
template <class Params>
void launch(const char* op, c10::Device device, const Params& p) {
  if (device.is_cpu()) {
    run_cpu(p);
    return;
  }
#ifdef FLRELU_WITH_CUDA
  const c10::cuda::CUDAGuard guard(device);
  const cudaError_t err = run_cuda(p, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, op, ": CUDA launch failed: ", cudaGetErrorString(err));
#else
  TORCH_CHECK(false, op, ": built without CUDA, got a tensor on ", device);
#endif
}

}  // namespace

at::Tensor fused_forward(const at::Tensor& x_in, const at::Tensor& bias_in, double negative_slope,
                         double scale) {
  check_forward(x_in, bias_in, negative_slope, scale);
  const at::Tensor x = x_in.contiguous();
  const at::Tensor bias = bias_in.contiguous();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const Dims d = dims_of(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), kForward, [&] {
    const ForwardParams<scalar_t> p{x.const_data_ptr<scalar_t>(),
                                    bias.const_data_ptr<scalar_t>(),
                                    out.mutable_data_ptr<scalar_t>(),
                                    d.outer,
                                    d.channels,
                                    d.inner,
                                    static_cast<acc_t<scalar_t>>(negative_slope),
                                    static_cast<acc_t<scalar_t>>(scale)};
    launch(kForward, x.device(), p);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> fused_backward(const at::Tensor& grad_in,
                                                  const at::Tensor& out_in, double negative_slope,
                                                  double scale) {
  check_backward(grad_in, out_in, negative_slope, scale);
  const at::Tensor grad = grad_in.contiguous();
  const at::Tensor out = out_in.contiguous();
  at::Tensor grad_x = at::empty_like(out, at::MemoryFormat::Contiguous);
  at::Tensor grad_bias = at::empty({out.size(1)}, out.options());
  const Dims d = dims_of(out);
  TORCH_CHECK(d.channels < (int64_t{1} << 31), kBackward, ": at most 2^31 - 1 channels, got ",
              d.channels);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), kBackward, [&] {
    const BackwardParams<scalar_t> p{grad.const_data_ptr<scalar_t>(),
                                     out.const_data_ptr<scalar_t>(),
                                     grad_x.mutable_data_ptr<scalar_t>(),
                                     grad_bias.mutable_data_ptr<scalar_t>(),
                                     d.outer,
                                     d.channels,
                                     d.inner,
                                     static_cast<acc_t<scalar_t>>(negative_slope),
                                     static_cast<acc_t<scalar_t>>(scale)};
    launch(kBackward, out.device(), p);
  });
  return {grad_x, grad_bias};
}

at::Tensor fused_forward_meta(const at::Tensor& x, const at::Tensor& bias, double negative_slope,
                              double scale) {
  check_forward(x, bias, negative_slope, scale);
  return at::empty_symint(x.sym_sizes(), x.options());
}

std::tuple<at::Tensor, at::Tensor> fused_backward_meta(const at::Tensor& grad,
                                                       const at::Tensor& out, double negative_slope,
                                                       double scale) {
  check_backward(grad, out, negative_slope, scale);
  return {at::empty_symint(out.sym_sizes(), out.options()),
          at::empty_symint({out.sym_size(1)}, out.options())};
}

at::Tensor bias_as_input(const at::Tensor& grad_bias, const at::Tensor& like) {
  std::vector<c10::SymInt> shape(static_cast<std::size_t>(like.dim()), c10::SymInt(1));
  shape[1] = grad_bias.sym_size(0);
  return grad_bias.view_symint(shape);
}

}  // namespace flrelu
