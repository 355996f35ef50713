// CPU kernel of customop::max_along_backward: grad_input = g at the index along dim, 0
// elsewhere, for contiguous tensors viewed as [outer, size, inner] (g and indices
// [outer, 1, inner]). Each [size, inner-tile] block is zeroed and its indexed elements written
// while it is in cache: one write pass over grad_input, where ATen's zeros + scatter_ make two.
// Every index is checked against [0, size) before anything is written, so a refused call (one
// into a .out buffer included) leaves grad_input as it was; the entry throws. Chunks of blocks are
// spread with at::parallel_for. Built once per instruction set (cpu/cpu_dispatch.h); the default
// build holds the entry.

#include "cpu/cpu_dispatch.h"

#include <ATen/Parallel.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace customop::ops::cpu {

/// One kernel call.
struct MaxAlongBackwardCpuParams {
  const void* grad;        // g, [outer, inner]
  const int64_t* indices;  // [outer, inner]
  void* grad_input;        // [outer, size, inner], freshly allocated
  int64_t outer;           // product of the dims before dim
  int64_t size;            // length of dim, >= 1
  int64_t inner;           // product of the dims after dim
  c10::ScalarType dtype;   // kDouble, kFloat, kHalf, kBFloat16
};

/// Runs the kernel; returns the lowest flat position (o * inner + i) of an index outside
/// [0, size) without writing grad_input, or -1 when every index is in range (and the kernel
/// ran).
CUSTOMOP_CPU_DECLARE(int64_t max_along_backward_kernel(const MaxAlongBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

/// Bytes of grad_input one block of the inner > 1 path spans (zeroed, then written in L2).
constexpr int64_t kMabBlockBytes = 256 * 1024;

/// The lowest flat position of an index outside [0, size) among indices[0, n), or -1. The
/// lowest over every chunk, so the report does not depend on the threads. One read of the
/// indices (n = grad_input's elements / size), a branch-free pass per chunk that vectorizes
/// (a negative index is a large unsigned one); the writing pass then finds them in cache when
/// a chunk's indices fit it.
int64_t first_bad_index(const int64_t* indices, int64_t n, int64_t size) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> bad{kNone};
  const auto limit = static_cast<uint64_t>(size);
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    bool any = false;
    for (int64_t i = begin; i < end; ++i) any |= static_cast<uint64_t>(indices[i]) >= limit;
    if (!any) return;
    int64_t at = begin;
    while (static_cast<uint64_t>(indices[at]) < limit) ++at;
    int64_t seen = bad.load();
    while (at < seen && !bad.compare_exchange_weak(seen, at)) {
    }
  });
  return bad.load() == kNone ? -1 : bad.load();
}

template <class T>
int64_t mab_run(const MaxAlongBackwardCpuParams& p) {
  const T* g = static_cast<const T*>(p.grad);
  T* out = static_cast<T*>(p.grad_input);
  if (const int64_t bad = first_bad_index(p.indices, p.outer * p.inner, p.size); bad >= 0) {
    return bad;
  }
  if (p.inner == 1) {
    at::parallel_for(0, p.outer, std::max<int64_t>(1, kGrainSize / p.size),
                     [&](int64_t begin, int64_t end) {
                       std::memset(static_cast<void*>(out + begin * p.size), 0,
                                   static_cast<size_t>((end - begin) * p.size) * sizeof(T));
                       for (int64_t o = begin; o < end; ++o) {
                         out[o * p.size + p.indices[o]] = g[o];
                       }
                     });
    return -1;
  }
  // Blocks of `tile` columns of one o, all `size` rows.
  const int64_t fit = kMabBlockBytes / (static_cast<int64_t>(sizeof(T)) * p.size);
  const int64_t tile = std::min(p.inner, std::max<int64_t>(64, fit));
  const int64_t tiles_per_outer = (p.inner + tile - 1) / tile;
  at::parallel_for(0, p.outer * tiles_per_outer, std::max<int64_t>(1, kGrainSize / (p.size * tile)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t t = begin; t < end; ++t) {
                       const int64_t o = t / tiles_per_outer;
                       const int64_t i0 = (t % tiles_per_outer) * tile;
                       const int64_t w = std::min(p.inner, i0 + tile) - i0;
                       T* block = out + o * p.size * p.inner + i0;
                       for (int64_t s = 0; s < p.size; ++s) {
                         std::memset(static_cast<void*>(block + s * p.inner), 0,
                                     static_cast<size_t>(w) * sizeof(T));
                       }
                       const int64_t at = o * p.inner + i0;
                       for (int64_t i = 0; i < w; ++i) {
                         block[p.indices[at + i] * p.inner + i] = g[at + i];
                       }
                     }
                   });
  return -1;
}

}  // namespace

int64_t max_along_backward_kernel(const MaxAlongBackwardCpuParams& p) {
  return dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { return mab_run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/checks.h"
#include "detail/max_along.h"

namespace customop::ops::detail {

void max_along_backward_cpu(const MaxAlongBackwardArgs& a, const at::Tensor& out) {
  // Checked by op.shape.
  const int64_t dim = wrap_dim("max_along_backward", a.dim, a.grad.dim());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor idx = a.indices.contiguous();
  const auto s = split_at_dim(out.sizes(), dim);
  const cpu::MaxAlongBackwardCpuParams p{g.const_data_ptr(),
                                         static_cast<const int64_t*>(idx.const_data_ptr()),
                                         out.mutable_data_ptr(),
                                         s.outer,
                                         s.size,
                                         s.inner,
                                         g.scalar_type()};
  if (out.numel() == 0) return;
  const int64_t bad = [&] { CUSTOMOP_CPU_DISPATCH(max_along_backward_kernel, p) }();
  if (bad >= 0) {
    const int64_t k = static_cast<const int64_t*>(idx.const_data_ptr())[bad];
    TORCH_CHECK_INDEX(false, "max_along_backward: indices must be in [0, size) = [0, ", a.size,
                      "), but got ", k, " at flat position ", bad);
  }
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
