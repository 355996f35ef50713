// CPU kernel of customop::masked_softmax_backward: grad_input = y * (g - sum(g * y, dim)).
// inner == 1 (the softmax over the last dim): per row, one vectorized pass summing g y, one
// writing y (g - s); the row stays in cache between them, so g and y are read from memory once;
// grad_input by non-temporal stores as cpu/stream_choice.h decides from the call's footprint.
// inner > 1: the same two passes over tiles of columns of a [size, inner] block, vectorized
// along inner, the tile sized so that its g and y stay in cache for the second pass.
// float16/bfloat16 compute in float32 and round once. Rows / tiles are spread with
// at::parallel_for. Built once per instruction set (cpu/cpu_dispatch.h); the default build
// holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace customop::ops::cpu {

/// One kernel call: contiguous grad, output and grad_input viewed as [outer, size, inner].
struct MaskedSoftmaxBackwardCpuParams {
  const void* grad;       // g, [outer, size, inner]
  const void* output;     // y, [outer, size, inner]
  void* grad_input;       // [outer, size, inner], freshly allocated
  int64_t outer;          // product of the dims before dim
  int64_t size;           // length of dim
  int64_t inner;          // product of the dims after dim
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (computes in acc_t)
  bool stream = false;    // grad_input by non-temporal stores, inner == 1 (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void masked_softmax_backward_kernel(const MaskedSoftmaxBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

/// Bytes of g and y one column tile of the inner > 1 path may span (both passes in L2).
constexpr int64_t kMsbTileBytes = 256 * 1024;

/// Elements of a row summed into fresh accumulators before they join the row's running sums
/// (msb_row), and rows likewise for the column sums (msb_columns): a float32 sum of n terms
/// then errs by about kMsbBlock + n / kMsbBlock roundings rather than n / lanes (y need not
/// be a softmax output, whose terms shrink as the row grows).
constexpr int64_t kMsbBlock = 64;

/// One row of n elements: s = sum(g y) (two accumulators, each block of kMsbBlock pairs of
/// vectors summed afresh), then gi = y (g - s). The write pass, which reads g and y from L1,
/// prefetches the next row's (g_next, y_next; null for none), as rms_norm_backward's does
/// (cpu/vec_io.h, prefetch_line: it paid there; here no clear change was measured).
/// kStream: float32/float64 gi by VecIO::store_stream.
template <class T, bool kStream>
void msb_row(const T* g, const T* y, T* gi, int64_t n, const T* g_next, const T* y_next) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  constexpr int64_t kSpan = kMsbBlock * 2 * kV;  // elements per block
  Vec t0(A(0)), t1(A(0));
  int64_t j = 0;
  for (; j + 2 * kV <= n;) {
    const int64_t end = std::min(n - n % (2 * kV), j + kSpan);
    Vec s0(A(0)), s1(A(0));
    for (; j < end; j += 2 * kV) {
      s0 = at::vec::fmadd(IO::load(g + j), IO::load(y + j), s0);
      s1 = at::vec::fmadd(IO::load(g + j + kV), IO::load(y + j + kV), s1);
    }
    t0 = t0 + s0;
    t1 = t1 + s1;
  }
  for (; j < n; j += kV) {
    const int64_t r = std::min(kV, n - j);
    t0 = at::vec::fmadd(IO::load(g + j, r), IO::load(y + j, r), t0);
  }
  alignas(64) A lanes[kV];
  (t0 + t1).store(lanes);
  A s = 0;
  for (int64_t l = 0; l < kV; ++l) s += lanes[l];
  const Vec vs(s);
  for (j = 0; j + kV <= n; j += kV) {
    if (g_next != nullptr) {
      prefetch_line(g_next + j);
      prefetch_line(y_next + j);
    }
    const Vec v = IO::load(y + j) * (IO::load(g + j) - vs);
    if constexpr (kStream) {
      IO::store_stream(v, gi + j);
    } else {
      IO::store(v, gi + j);
    }
  }
  if (j < n) {
    const int64_t r = n - j;
    IO::store(IO::load(y + j, r) * (IO::load(g + j, r) - vs), gi + j, r);
  }
}

/// Columns [i0, i1) of outer index o (inner > 1): s per column over `size` rows of stride
/// inner (blocks of kMsbBlock rows summed in `blk` first), then the write pass. `s` and `blk`
/// hold i1 - i0 accumulators each.
template <class T>
void msb_columns(const T* g, const T* y, T* gi, int64_t o, int64_t i0, int64_t i1, int64_t size,
                 int64_t inner, acc_t<T>* s, acc_t<T>* blk) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  const int64_t w = i1 - i0;
  std::fill(s, s + w, A(0));
  const int64_t base = o * size * inner + i0;
  for (int64_t k0 = 0; k0 < size; k0 += kMsbBlock) {
    std::fill(blk, blk + w, A(0));
    for (int64_t k = k0; k < std::min(size, k0 + kMsbBlock); ++k) {
      const int64_t at_row = base + k * inner;
      for (int64_t i = 0; i < w; i += kV) {
        const int64_t r = std::min(kV, w - i);
        const Vec acc = at::vec::fmadd(IO::load(g + at_row + i, r), IO::load(y + at_row + i, r),
                                       Vec::loadu(blk + i, static_cast<int>(r)));
        acc.store(blk + i, static_cast<int>(r));
      }
    }
    for (int64_t i = 0; i < w; ++i) s[i] += blk[i];
  }
  for (int64_t k = 0; k < size; ++k) {
    const int64_t at_row = base + k * inner;
    for (int64_t i = 0; i < w; i += kV) {
      const int64_t r = std::min(kV, w - i);
      const Vec v = IO::load(y + at_row + i, r) *
                    (IO::load(g + at_row + i, r) - Vec::loadu(s + i, static_cast<int>(r)));
      IO::store(v, gi + at_row + i, r);
    }
  }
}

template <class T>
void msb_run(const MaskedSoftmaxBackwardCpuParams& p) {
  const T* g = static_cast<const T*>(p.grad);
  const T* y = static_cast<const T*>(p.output);
  T* gi = static_cast<T*>(p.grad_input);
  const int64_t size = std::max<int64_t>(p.size, 1);
  if (p.inner == 1) {
    at::parallel_for(0, p.outer, std::max<int64_t>(1, kGrainSize / size),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t row = begin; row < end; ++row) {
                         const bool more = row + 1 < end;
                         const int64_t at = row * p.size;
                         const T* g_next = more ? g + at + p.size : nullptr;
                         const T* y_next = more ? y + at + p.size : nullptr;
                         if (p.stream) {
                           msb_row<T, true>(g + at, y + at, gi + at, p.size, g_next, y_next);
                         } else {
                           msb_row<T, false>(g + at, y + at, gi + at, p.size, g_next, y_next);
                         }
                       }
                       if (p.stream) stream_fence();
                     });
    return;
  }
  // Tiles of `tile` columns (a multiple of the vector width unless inner is smaller).
  constexpr int64_t kV = VecIO<T>::kLanes;
  const int64_t fit = kMsbTileBytes / (2 * static_cast<int64_t>(sizeof(T)) * size);
  const int64_t tile = std::min(p.inner, std::max(kV, fit / kV * kV));
  const int64_t tiles_per_outer = (p.inner + tile - 1) / tile;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / (size * tile));
  at::parallel_for(0, p.outer * tiles_per_outer, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t<T>> s(static_cast<size_t>(2 * tile));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles_per_outer;
      const int64_t i0 = (t % tiles_per_outer) * tile;
      msb_columns<T>(g, y, gi, o, i0, std::min(p.inner, i0 + tile), p.size, p.inner, s.data(),
                     s.data() + tile);
    }
  });
}

}  // namespace

void masked_softmax_backward_kernel(const MaskedSoftmaxBackwardCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { msb_run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "cpu/stream_choice.h"
#include "detail/checks.h"
#include "detail/masked_softmax.h"

namespace customop::ops::detail {

void masked_softmax_backward_cpu(const MaskedSoftmaxBackwardArgs& a, const at::Tensor& out) {
  // Checked by op.shape.
  const int64_t dim = wrap_dim("masked_softmax_backward", a.dim, a.output.dim());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor y = a.output.contiguous();
  const auto s = split_at_dim(y.sizes(), dim);
  cpu::MaskedSoftmaxBackwardCpuParams p{
      g.const_data_ptr(), y.const_data_ptr(), out.mutable_data_ptr(), s.outer, s.size, s.inner,
      y.scalar_type()};
  if (y.numel() == 0) return;
  // g and y read, grad_input written; only the inner == 1 kernel streams.
  static cpu::StreamChoice choice(cpu::stream_rule());
  const int64_t footprint = s.inner == 1 ? cpu::stream_footprint(3, y.numel(), y.scalar_type()) : 0;
  cpu::timed_stream_call(choice, footprint, [&](bool stream) {
    p.stream = stream;
    CUSTOMOP_CPU_DISPATCH(masked_softmax_backward_kernel, p)
  });
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
