// CPU kernel of customop::weighted_sum: y = sum_k w_k * x_k in one pass over each x_k.
// The output is built block by block (a block stays in L1 while the K inputs are added to
// it), vectorized with at::vec::Vectorized; blocks are spread with at::parallel_for.
// Built once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>

namespace customop::ops::cpu {

/// One kernel call: K contiguous inputs and the output, `numel` elements of `dtype` each.
struct WeightedSumCpuParams {
  const void* const* inputs;  // K pointers
  const double* weights;      // K weights
  void* output;               // numel elements, freshly allocated
  int64_t k;                  // K >= 1
  int64_t numel;              // elements per tensor
  c10::ScalarType dtype;      // kFloat or kDouble (accumulates in the same type)
};

CUSTOMOP_CPU_DECLARE(void weighted_sum_kernel(const WeightedSumCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Elements of one block: 16 KiB of float32 stays in L1 next to the input stream.
constexpr int64_t kBlock = 4096;

template <class T>
void weighted_sum_block(const T* const* x, const double* w, int64_t k, T* y, int64_t begin,
                        int64_t n) {
  using Vec = at::vec::Vectorized<T>;
  constexpr int64_t kV = Vec::size();
  const int64_t full = n - n % kV;
  {
    const Vec w0(static_cast<T>(w[0]));
    const T* x0 = x[0] + begin;
    int64_t j = 0;
    for (; j < full; j += kV) (Vec::loadu(x0 + j) * w0).store(y + j);
    if (j < n)
      (Vec::loadu(x0 + j, static_cast<int>(n - j)) * w0).store(y + j, static_cast<int>(n - j));
  }
  for (int64_t i = 1; i < k; ++i) {
    const Vec wi(static_cast<T>(w[i]));
    const T* xi = x[i] + begin;
    int64_t j = 0;
    for (; j < full; j += kV)
      at::vec::fmadd(Vec::loadu(xi + j), wi, Vec::loadu(y + j)).store(y + j);
    if (j < n) {
      const int r = static_cast<int>(n - j);
      at::vec::fmadd(Vec::loadu(xi + j, r), wi, Vec::loadu(y + j, r)).store(y + j, r);
    }
  }
}

template <class T>
void run(const WeightedSumCpuParams& p) {
  const T* const* x = reinterpret_cast<const T* const*>(p.inputs);
  T* y = static_cast<T*>(p.output);
  // A task of kGrainSize elements in total over the K inputs.
  const int64_t grain = std::max<int64_t>(kBlock, kGrainSize / p.k);
  at::parallel_for(0, p.numel, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += kBlock) {
      weighted_sum_block<T>(x, p.weights, p.k, y + b, b, std::min(kBlock, end - b));
    }
  });
}

}  // namespace

void weighted_sum_kernel(const WeightedSumCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/weighted_sum.h"

#include <ATen/ops/empty.h>

#include <vector>

namespace customop::ops::detail {

at::Tensor weighted_sum_cpu(const WeightedSumArgs& a) {
  check_weighted_sum(a, c10::DeviceType::CPU);
  std::vector<at::Tensor> xs;
  std::vector<const void*> ptrs;
  xs.reserve(a.inputs.size());
  ptrs.reserve(a.inputs.size());
  for (const auto& t : a.inputs) {
    xs.push_back(t.contiguous());
    ptrs.push_back(xs.back().const_data_ptr());
  }
  at::Tensor y = at::empty(xs[0].sizes(), xs[0].options());
  const cpu::WeightedSumCpuParams p{
      ptrs.data(), a.weights.data(), y.mutable_data_ptr(), static_cast<int64_t>(xs.size()),
      y.numel(),   y.scalar_type()};
  if (p.numel > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(weighted_sum_kernel, p) }();
  }
  return y;
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
