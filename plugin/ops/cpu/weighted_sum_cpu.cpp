// CPU kernel of customop::weighted_sum: y = sum_k w_k * x_k in one pass over each x_k.
// The output is built block by block (a block of the sum stays in L1 while the K inputs are
// added to it; y is written once), vectorized with at::vec::Vectorized; blocks are spread with
// at::parallel_for (whole blocks per task, so each starts on a vector boundary); y by
// non-temporal stores as cpu/stream_choice.h decides from the call's footprint.
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
  bool stream = false;        // the output by non-temporal stores (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void weighted_sum_kernel(const WeightedSumCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Elements of one block: 16 KiB of float32 (32 KiB of float64) stays in L1 next to the input
// stream.
constexpr int64_t kBlock = 4096;

// y[0, n) = sum_i w_i * x_i[begin, begin + n), accumulated in A = acc_t<T>: the first K - 1
// terms in a block of A that stays in L1, the last one added on the way to y, rounded to T
// once (kStream: float and double by non-temporal stores, VecIO::store_stream). Each element
// is w_0 x_0 then fmadd(x_i, w_i, acc) for i = 1 .. K - 1, in that order.
template <class T, bool kStream>
void weighted_sum_block(const T* const* x, const double* w, int64_t k, T* y, int64_t begin,
                        int64_t n) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  alignas(64) A acc[kBlock];
  const int64_t full = n - n % kV;
  const int rest = static_cast<int>(n - full);
  for (int64_t i = 0; i + 1 < k; ++i) {
    const Vec wi(static_cast<A>(w[i]));
    const T* xi = x[i] + begin;
    int64_t j = 0;
    if (i == 0) {
      for (; j < full; j += kV) (IO::load(xi + j) * wi).store(acc + j);
      if (rest > 0) (IO::load(xi + j, rest) * wi).store(acc + j, rest);
    } else {
      for (; j < full; j += kV)
        at::vec::fmadd(IO::load(xi + j), wi, Vec::loadu(acc + j)).store(acc + j);
      if (rest > 0)
        at::vec::fmadd(IO::load(xi + j, rest), wi, Vec::loadu(acc + j, rest)).store(acc + j, rest);
    }
  }
  const Vec wl(static_cast<A>(w[k - 1]));
  const T* xl = x[k - 1] + begin;
  const auto put = [&](const Vec& v, int64_t j) {
    if constexpr (kStream) {
      IO::store_stream(v, y + j);
    } else {
      IO::store(v, y + j);
    }
  };
  int64_t j = 0;
  if (k == 1) {
    for (; j < full; j += kV) put(IO::load(xl + j) * wl, j);
    if (rest > 0) IO::store(IO::load(xl + j, rest) * wl, y + j, rest);
  } else {
    for (; j < full; j += kV) put(at::vec::fmadd(IO::load(xl + j), wl, Vec::loadu(acc + j)), j);
    if (rest > 0)
      IO::store(at::vec::fmadd(IO::load(xl + j, rest), wl, Vec::loadu(acc + j, rest)), y + j, rest);
  }
}

template <class T>
void run(const WeightedSumCpuParams& p) {
  const T* const* x = reinterpret_cast<const T* const*>(p.inputs);
  T* y = static_cast<T*>(p.output);
  // Tasks of whole blocks, about kGrainSize elements in total over the K inputs: every block
  // starts at a multiple of kBlock elements, so streamed stores stay aligned on every thread.
  const int64_t grain = std::max<int64_t>(1, kGrainSize / p.k / kBlock);
  parallel_for_blocks(p.numel, kBlock, grain, p.stream, [&](int64_t b, int64_t n) {
    if (p.stream) {
      weighted_sum_block<T, true>(x, p.weights, p.k, y + b, b, n);
    } else {
      weighted_sum_block<T, false>(x, p.weights, p.k, y + b, b, n);
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

#include "cpu/stream_choice.h"
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
  cpu::WeightedSumCpuParams p{
      ptrs.data(), a.weights.data(), y.mutable_data_ptr(), static_cast<int64_t>(xs.size()),
      y.numel(),   y.scalar_type()};
  if (p.numel == 0) return;
  // K inputs read, y written
  static cpu::StreamChoice choice(cpu::stream_rule());
  cpu::timed_stream_call(choice, cpu::stream_footprint(p.k + 1, y.numel(), y.scalar_type()),
                         [&](bool stream) {
                           p.stream = stream;
                           CUSTOMOP_CPU_DISPATCH(weighted_sum_kernel, p)
                         });
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
