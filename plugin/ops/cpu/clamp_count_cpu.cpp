// CPU kernel of customop::clamp_count: y = clamp(x, min, max) and the count of clamped
// elements in one pass; chunks spread with at::parallel_for, one atomic add per chunk. The
// branch-free loop body is left to the compiler's vectorizer (this file is built once per
// instruction set, cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdint>

namespace customop::ops::cpu {

/// One kernel call: contiguous input/output of `numel` elements of `dtype`.
struct ClampCountCpuParams {
  const void* input;      // numel elements
  void* output;           // numel elements, freshly allocated
  int64_t numel;          // elements
  double min;             // lower bound (rounded to dtype here)
  double max;             // upper bound (rounded to dtype here), >= min
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16
};

CUSTOMOP_CPU_DECLARE(int64_t clamp_count_kernel(const ClampCountCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Compares in A = acc_t<T> (widening float16/bfloat16 is exact); lo and hi are already
// values of T, so an output is always x, lo or hi. float32/float64: a branch-free loop the
// compiler vectorizes; float16/bfloat16: at::vec vectors of float32 (the scalar conversions
// would not vectorize), the same results: clamping in float32 and rounding back is exact.
template <class T>
int64_t clamp_chunk(const T* x, T* y, int64_t n, T lo, T hi) {
  using A = acc_t<T>;
  const A lo_a = static_cast<A>(lo);
  const A hi_a = static_cast<A>(hi);
  int64_t count = 0;
  int64_t i = 0;
  if constexpr (kReduced<T>) {
    using IO = VecIO<T>;
    using Vec = typename IO::Vec;
    constexpr int64_t kV = IO::kLanes;
    const Vec vlo(lo_a), vhi(hi_a);
    for (; i + kV <= n; i += kV) {
      const Vec v = IO::load(x + i);
      const Vec below = v < vlo;
      const Vec above = v > vhi;
      // NaN compares false both ways and stays NaN.
      IO::store(Vec::blendv(Vec::blendv(v, vlo, below), vhi, above), y + i);
      // zero_mask(): a bit per lane that is 0, i.e. not clamped.
      count += kV - __builtin_popcount(static_cast<unsigned>((below | above).zero_mask()));
    }
  }
  for (; i < n; ++i) {
    const T v = x[i];
    const A va = static_cast<A>(v);
    const bool below = va < lo_a;
    const bool above = va > hi_a;
    y[i] = below ? lo : (above ? hi : v);  // NaN compares false both ways and stays NaN
    count += static_cast<int64_t>(below | above);
  }
  return count;
}

template <class T>
int64_t run(const ClampCountCpuParams& p) {
  const T* x = static_cast<const T*>(p.input);
  T* y = static_cast<T*>(p.output);
  const T lo = static_cast<T>(p.min);
  const T hi = static_cast<T>(p.max);
  std::atomic<int64_t> total{0};
  at::parallel_for(0, p.numel, kGrainSize, [&](int64_t begin, int64_t end) {
    total.fetch_add(clamp_chunk<T>(x + begin, y + begin, end - begin, lo, hi),
                    std::memory_order_relaxed);
  });
  return total.load();
}

}  // namespace

int64_t clamp_count_kernel(const ClampCountCpuParams& p) {
  return dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { return run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/clamp_count.h"

namespace customop::ops::detail {

void clamp_count_cpu(const ClampCountArgs& a, const ClampCountResult& out) {
  const auto& [y, count] = out;
  const at::Tensor x = a.input.contiguous();
  const cpu::ClampCountCpuParams p{
      x.const_data_ptr(), y.mutable_data_ptr(), x.numel(), a.min, a.max, x.scalar_type()};
  int64_t clamped = 0;
  if (p.numel > 0) {
    clamped = [&]() -> int64_t { CUSTOMOP_CPU_DISPATCH(clamp_count_kernel, p) }();
  }
  *count.mutable_data_ptr<int64_t>() = clamped;
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
