// CPU kernel of customop::weighted_sum_backward: out_k = w_k * g for k < K, one read of g:
// chunks of whole blocks of g (at::parallel_for; each block starts on a vector boundary) that
// stay in L1 while each of the K outputs takes its block, vectorized (at::vec::Vectorized;
// float16/bfloat16 in float32, rounded once); the outputs by non-temporal stores as
// cpu/stream_choice.h decides from the call's footprint.
// Built once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace customop::ops::cpu {

/// One kernel call: contiguous grad and K contiguous outputs of `numel` elements, weights [K],
/// of `dtype`.
struct WeightedSumBackwardCpuParams {
  const void* grad;       // numel elements
  void* const* out;       // K pointers to numel elements each
  const double* weights;  // K
  int64_t k;              // K >= 1
  int64_t numel;          // elements of grad
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16
  bool stream = false;    // the outputs by non-temporal stores (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void weighted_sum_backward_kernel(const WeightedSumBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Elements of g per block: 16 KiB of float32 (L1 holds it while the K outputs are written).
constexpr int64_t kWsbBlock = 4096;

// out_k[at, at + n) = w_k * g[0, n) for every k: one block, n <= kWsbBlock, elementwise
// (map_unordered; kStream: by non-temporal stores).
template <class T, bool kStream>
void wsb_block(const T* g, void* const* out, int64_t at, const double* w, int64_t k, int64_t n) {
  using Vec = typename VecIO<T>::Vec;
  for (int64_t i = 0; i < k; ++i) {
    const Vec wv(static_cast<acc_t<T>>(w[i]));  // as ATen's grad * w: the weight in acc_t
    map_unordered<kStream>(
        n,
        [&](const std::pair<Vec, Vec>& gv) {
          return std::pair{gv.first * wv, gv.second * wv};
        },
        static_cast<T*>(out[i]) + at, g);
  }
}

template <class T>
void run(const WeightedSumBackwardCpuParams& p) {
  const T* g = static_cast<const T*>(p.grad);
  // Tasks of whole blocks, about kGrainSize elements written per task: every block starts at a
  // multiple of kWsbBlock elements, so streamed stores stay aligned on every thread.
  const int64_t grain = std::max<int64_t>(1, kGrainSize / p.k / kWsbBlock);
  parallel_for_blocks(p.numel, kWsbBlock, grain, p.stream, [&](int64_t b, int64_t n) {
    if (p.stream) {
      wsb_block<T, true>(g + b, p.out, b, p.weights, p.k, n);
    } else {
      wsb_block<T, false>(g + b, p.out, b, p.weights, p.k, n);
    }
  });
}

}  // namespace

void weighted_sum_backward_kernel(const WeightedSumBackwardCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "cpu/stream_choice.h"
#include "detail/weighted_sum.h"

#include <customop/cpu_cache.h>

#include <vector>

namespace customop::ops::detail {

std::vector<at::Tensor> weighted_sum_backward_cpu(const WeightedSumBackwardArgs& a) {
  check_weighted_sum_backward(a, c10::DeviceType::CPU);
  const at::Tensor g = a.grad.contiguous();
  // As weighted_sum_backward_outputs, from the CPU output cache (customop/cpu_cache.h).
  std::vector<at::Tensor> out;
  out.reserve(a.weights.size());
  for (size_t k = 0; k < a.weights.size(); ++k) {
    out.push_back(cpu_cache::empty(g.sizes(), g.scalar_type()));
  }
  std::vector<void*> ptrs;
  ptrs.reserve(out.size());
  for (auto& t : out) ptrs.push_back(t.mutable_data_ptr());
  const auto k = static_cast<int64_t>(a.weights.size());
  cpu::WeightedSumBackwardCpuParams p{g.const_data_ptr(), ptrs.data(),    a.weights.data(), k,
                                      g.numel(),          g.scalar_type()};
  if (p.numel == 0) return out;
  // g read, K outputs written
  static cpu::StreamChoice choice(cpu::stream_rule());
  cpu::timed_stream_call(choice, cpu::stream_footprint(k + 1, g.numel(), g.scalar_type()),
                         [&](bool stream) {
                           p.stream = stream;
                           CUSTOMOP_CPU_DISPATCH(weighted_sum_backward_kernel, p)
                         });
  return out;
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
