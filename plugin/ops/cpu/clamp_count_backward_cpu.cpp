// CPU kernel of customop::clamp_count_backward: grad_input = g where lo <= x <= hi, else 0
// (NaN compares false: 0), one pass over g and x, vectorized (at::vec::Vectorized, compares in
// acc_t), chunks of whole 1024-element blocks spread with at::parallel_for; grad_input by
// non-temporal stores as cpu/stream_choice.h decides. Built once per instruction set
// (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace customop::ops::cpu {

/// One kernel call: contiguous grad, input and grad_input of `numel` elements of `dtype`.
struct ClampCountBackwardCpuParams {
  const void* grad;       // numel elements
  const void* input;      // numel elements
  void* grad_input;       // numel elements
  int64_t numel;          // elements
  double min;             // lower bound (rounded to dtype here)
  double max;             // upper bound (rounded to dtype here), >= min
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16
  bool stream = false;    // grad_input by non-temporal stores (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void clamp_count_backward_kernel(const ClampCountBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

template <class T, bool kStream>
void run(const ClampCountBackwardCpuParams& p) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  const T* g = static_cast<const T*>(p.grad);
  const T* x = static_cast<const T*>(p.input);
  T* gi = static_cast<T*>(p.grad_input);
  // The bounds rounded to T, as clamp_count's forward and ATen's comparisons round them.
  const Vec lo(static_cast<A>(static_cast<T>(p.min)));
  const Vec hi(static_cast<A>(static_cast<T>(p.max)));
  const Vec zero(A(0));
  // Tasks of whole blocks of 1024 elements (parallel_for_blocks): each starts on a vector
  // boundary, so streamed stores stay aligned on every thread.
  constexpr int64_t kCcbBlock = 1024;
  parallel_for_blocks(p.numel, kCcbBlock, kGrainSize / kCcbBlock, kStream,
                      [&](int64_t b, int64_t len) {
                        const int64_t end = b + len;
                        for (int64_t i = b; i < end; i += kV) {
                          const int64_t n = std::min(kV, end - i);
                          const Vec xv = IO::load(x + i, n);
                          const Vec inside = (xv >= lo) & (xv <= hi);
                          const Vec v = Vec::blendv(zero, IO::load(g + i, n), inside);
                          if (kStream && n == kV) {
                            IO::store_stream(v, gi + i);
                          } else {
                            IO::store(v, gi + i, n);
                          }
                        }
                      });
}

}  // namespace

void clamp_count_backward_kernel(const ClampCountBackwardCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) {
    if (p.stream) {
      run<T, true>(p);
    } else {
      run<T, false>(p);
    }
  });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "cpu/stream_choice.h"
#include "detail/clamp_count.h"

namespace customop::ops::detail {

void clamp_count_backward_cpu(const ClampCountBackwardArgs& a, const at::Tensor& out) {
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  cpu::ClampCountBackwardCpuParams p{
      g.const_data_ptr(), x.const_data_ptr(), out.mutable_data_ptr(), x.numel(), a.min, a.max,
      x.scalar_type()};
  if (p.numel == 0) return;
  // g and x read, grad_input written
  static cpu::StreamChoice choice(cpu::stream_rule());
  cpu::timed_stream_call(choice, cpu::stream_footprint(3, x.numel(), x.scalar_type()),
                         [&](bool stream) {
                           p.stream = stream;
                           CUSTOMOP_CPU_DISPATCH(clamp_count_backward_kernel, p)
                         });
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
