// CPU kernel of customop::weighted_sum: y = sum_k w_k * x_k in one pass over each x_k.
// The output is built block by block (a block stays in L1 while the K inputs are added to
// it), vectorized with at::vec::Vectorized; blocks are spread with at::parallel_for.
// Built once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

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
  c10::ScalarType dtype;      // kDouble, kFloat, kHalf, kBFloat16 (accumulates in acc_t)
};

CUSTOMOP_CPU_DECLARE(void weighted_sum_kernel(const WeightedSumCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Elements of one block: 16 KiB of float32 stays in L1 next to the input stream.
constexpr int64_t kBlock = 4096;

// y[0, n) = sum_i w_i * x_i[begin, begin + n), accumulated in A = acc_t<T>: in y itself when A
// is T, else (float16/bfloat16) in a float32 block that is rounded to T once at the end.
template <class T>
void weighted_sum_block(const T* const* x, const double* w, int64_t k, T* y, int64_t begin,
                        int64_t n) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  alignas(64) A scratch[kReduced<T> ? kBlock : 1];
  A* acc = nullptr;
  if constexpr (kReduced<T>) {
    acc = scratch;
  } else {
    acc = y;
  }
  const int64_t full = n - n % kV;
  {
    const Vec w0(static_cast<A>(w[0]));
    const T* x0 = x[0] + begin;
    int64_t j = 0;
    for (; j < full; j += kV) (IO::load(x0 + j) * w0).store(acc + j);
    if (j < n) (IO::load(x0 + j, n - j) * w0).store(acc + j, static_cast<int>(n - j));
  }
  for (int64_t i = 1; i < k; ++i) {
    const Vec wi(static_cast<A>(w[i]));
    const T* xi = x[i] + begin;
    int64_t j = 0;
    for (; j < full; j += kV)
      at::vec::fmadd(IO::load(xi + j), wi, Vec::loadu(acc + j)).store(acc + j);
    if (j < n) {
      const int r = static_cast<int>(n - j);
      at::vec::fmadd(IO::load(xi + j, r), wi, Vec::loadu(acc + j, r)).store(acc + j, r);
    }
  }
  if constexpr (kReduced<T>) {
    int64_t j = 0;
    for (; j < full; j += kV) IO::store(Vec::loadu(acc + j), y + j);
    if (j < n) IO::store(Vec::loadu(acc + j, static_cast<int>(n - j)), y + j, n - j);
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

void weighted_sum_cpu(const WeightedSumArgs& a, const at::Tensor& y) {
  std::vector<at::Tensor> xs;
  std::vector<const void*> ptrs;
  xs.reserve(a.inputs.size());
  ptrs.reserve(a.inputs.size());
  for (const auto& t : a.inputs) {
    xs.push_back(t.contiguous());
    ptrs.push_back(xs.back().const_data_ptr());
  }
  const cpu::WeightedSumCpuParams p{
      ptrs.data(), a.weights.data(), y.mutable_data_ptr(), static_cast<int64_t>(xs.size()),
      y.numel(),   y.scalar_type()};
  if (p.numel > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(weighted_sum_kernel, p) }();
  }
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
