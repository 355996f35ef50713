// CPU kernel of customop::fused_add_rms_norm_: per row, one pass writes s = residual + input
// (rounded to the storage dtype) into residual and sums s^2 from the rounded values; a second
// pass writes input = (s * r) * w. Vectorized (at::vec::Vectorized through cpu/vec_io.h, in
// float32 for float16/bfloat16), rows spread with at::parallel_for.
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

/// One kernel call: contiguous input/residual [rows, cols] (both written), weight [cols].
struct FusedAddRmsNormCpuParams {
  void* input;            // [rows, cols]: read, then written with the normalized row
  void* residual;         // [rows, cols]: read, then written with residual + input
  const void* weight;     // [cols]
  int64_t rows;           // every leading dim folded in
  int64_t cols;           // D
  double eps;             // added to mean(s^2)
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16
};

CUSTOMOP_CPU_DECLARE(void fused_add_rms_norm_kernel(const FusedAddRmsNormCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

template <class T>
void fused_rows(T* x, T* res, const T* w, int64_t begin, int64_t end, int64_t d, acc_t<T> eps) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  for (int64_t row = begin; row < end; ++row) {
    T* xr = x + row * d;
    T* rr = res + row * d;
    Vec acc0(A(0)), acc1(A(0));
    int64_t j = 0;
    for (; j + kV <= d; j += kV) {
      IO::store(IO::load(xr + j) + IO::load(rr + j), rr + j);
      const Vec s = IO::load(rr + j);  // the rounded sum, as the caller's residual holds it
      acc0 = at::vec::fmadd(s, s, acc0);
    }
    if (j < d) {
      IO::store(IO::load(xr + j, d - j) + IO::load(rr + j, d - j), rr + j, d - j);
      const Vec s = IO::load(rr + j, d - j);  // zero-filled tail
      acc1 = at::vec::fmadd(s, s, acc1);
    }
    alignas(64) A lanes[kV];
    (acc0 + acc1).store(lanes);
    A sum_sq = 0;
    for (int64_t l = 0; l < kV; ++l) sum_sq += lanes[l];
    const Vec rv(A(1) / std::sqrt(sum_sq / static_cast<A>(d) + eps));
    j = 0;
    for (; j + kV <= d; j += kV) {
      IO::store(IO::load(rr + j) * rv * IO::load(w + j), xr + j);
    }
    if (j < d) {
      IO::store(IO::load(rr + j, d - j) * rv * IO::load(w + j, d - j), xr + j, d - j);
    }
  }
}

}  // namespace

void fused_add_rms_norm_kernel(const FusedAddRmsNormCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) {
    T* x = static_cast<T*>(p.input);
    T* res = static_cast<T*>(p.residual);
    const T* w = static_cast<const T*>(p.weight);
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(p.cols, 1));
    at::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
      fused_rows<T>(x, res, w, begin, end, p.cols, static_cast<acc_t<T>>(p.eps));
    });
  });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/fused_add_rms_norm.h"

namespace customop::ops::detail {

void fused_add_rms_norm_cpu(const FusedAddRmsNormArgs& a) {
  // NB: a non-contiguous written tensor is computed in a contiguous copy and copied back; the
  // caller's tensor is written once, after the kernel.
  const at::Tensor x = a.input.is_contiguous() ? at::Tensor(a.input) : a.input.contiguous();
  const at::Tensor res =
      a.residual.is_contiguous() ? at::Tensor(a.residual) : a.residual.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const int64_t d = x.size(-1);
  const cpu::FusedAddRmsNormCpuParams p{x.mutable_data_ptr(),
                                        res.mutable_data_ptr(),
                                        w.const_data_ptr(),
                                        d == 0 ? 0 : x.numel() / d,
                                        d,
                                        a.eps,
                                        x.scalar_type()};
  if (p.rows > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(fused_add_rms_norm_kernel, p) }();
  }
  if (!x.is_same(a.input)) a.input.copy_(x);
  if (!res.is_same(a.residual)) a.residual.copy_(res);
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
