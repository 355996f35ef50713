// CPU kernel of customop::rms_norm: one pass over each row for sum(x^2), one to write
// y = (x * r) * w, vectorized (at::vec::Vectorized), rows spread with at::parallel_for; y by
// non-temporal stores as cpu/stream_choice.h decides from the call's footprint (not in place,
// and only rows that start on a vector boundary).
// float16/bfloat16 rows are widened to float32 as they are read (cpu/vec_io.h): sum(x^2), r
// and the products are float32, y is rounded once.
// Built once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace customop::ops::cpu {

/// One kernel call: contiguous input/output [rows, cols], weight [cols], of `dtype`.
struct RmsNormCpuParams {
  const void* input;      // [rows, cols]
  const void* weight;     // [cols]
  void* output;           // [rows, cols], freshly allocated
  int64_t rows;           // N, every leading dim folded in
  int64_t cols;           // D
  double eps;             // added to mean(x^2)
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (accumulates in acc_t)
  bool stream = false;    // y by non-temporal stores (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void rms_norm_kernel(const RmsNormCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// Computes in A = acc_t<T> (float32 for float16/bfloat16 storage): sum(x^2), its rsqrt and
// (x * r) * w; only y is rounded to T.
template <class T, bool kStream>
void rms_norm_rows(const T* x, const T* w, T* y, int64_t begin, int64_t end, int64_t d,
                   acc_t<T> eps) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * d;
    T* yr = y + row * d;
    // Four accumulators keep the FMA pipes busy and shorten the dependency chain.
    Vec acc0(A(0)), acc1(A(0)), acc2(A(0)), acc3(A(0));
    int64_t j = 0;
    for (; j + 4 * kV <= d; j += 4 * kV) {
      const Vec a0 = IO::load(xr + j), a1 = IO::load(xr + j + kV);
      const Vec a2 = IO::load(xr + j + 2 * kV), a3 = IO::load(xr + j + 3 * kV);
      acc0 = at::vec::fmadd(a0, a0, acc0);
      acc1 = at::vec::fmadd(a1, a1, acc1);
      acc2 = at::vec::fmadd(a2, a2, acc2);
      acc3 = at::vec::fmadd(a3, a3, acc3);
    }
    for (; j + kV <= d; j += kV) {
      const Vec a = IO::load(xr + j);
      acc0 = at::vec::fmadd(a, a, acc0);
    }
    if (j < d) {
      const Vec a = IO::load(xr + j, d - j);  // zero-filled tail
      acc1 = at::vec::fmadd(a, a, acc1);
    }
    alignas(64) A lanes[kV];
    ((acc0 + acc1) + (acc2 + acc3)).store(lanes);
    A sum_sq = 0;
    for (int64_t l = 0; l < kV; ++l) sum_sq += lanes[l];
    const A r = A(1) / std::sqrt(sum_sq / static_cast<A>(d) + eps);

    // NB: (x * r) * w, in this order, rounds as ATen's rms_norm does.
    const Vec rv(r);
    j = 0;
    for (; j + kV <= d; j += kV) {
      const Vec v = IO::load(xr + j) * rv * IO::load(w + j);
      if constexpr (kStream) {
        IO::store_stream(v, yr + j);
      } else {
        IO::store(v, yr + j);
      }
    }
    if (j < d) {
      IO::store(IO::load(xr + j, d - j) * rv * IO::load(w + j, d - j), yr + j, d - j);
    }
  }
}

template <class T>
void run(const RmsNormCpuParams& p) {
  const T* x = static_cast<const T*>(p.input);
  const T* w = static_cast<const T*>(p.weight);
  T* y = static_cast<T*>(p.output);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(p.cols, 1));
  at::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
    const auto eps = static_cast<acc_t<T>>(p.eps);
    if (p.stream) {
      rms_norm_rows<T, true>(x, w, y, begin, end, p.cols, eps);
      stream_fence();
    } else {
      rms_norm_rows<T, false>(x, w, y, begin, end, p.cols, eps);
    }
  });
}

}  // namespace

void rms_norm_kernel(const RmsNormCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "cpu/stream_choice.h"
#include "detail/rms_norm.h"

#include <ATen/ops/empty.h>

namespace customop::ops::detail {

void rms_norm_cpu(const RmsNormArgs& a, const at::Tensor& y) {
  const at::Tensor x = a.input.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const int64_t d = x.size(-1);
  cpu::RmsNormCpuParams p{x.const_data_ptr(),
                          w.const_data_ptr(),
                          y.mutable_data_ptr(),
                          d == 0 ? 0 : x.numel() / d,
                          d,
                          a.eps,
                          x.scalar_type()};
  if (p.rows == 0) return;
  // x read, y written (the weight's one row aside). NB: never in place (rms_norm_ writes x
  // itself): each row's lines are then in cache from the first pass, there is no read for
  // ownership to save, and streaming would only evict them.
  static cpu::StreamChoice choice(cpu::stream_rule());
  const int64_t footprint =
      y.is_alias_of(x) ? 0 : cpu::stream_footprint(2, x.numel(), x.scalar_type());
  cpu::timed_stream_call(choice, footprint, [&](bool stream) {
    p.stream = stream;
    CUSTOMOP_CPU_DISPATCH(rms_norm_kernel, p)
  });
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
