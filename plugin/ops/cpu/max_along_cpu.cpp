// CPU kernel of customop::max_along, torch.max(input, dim) semantics (ties: first index;
// NaN wins, at its first position). inner == 1: a vectorized max of each row, then a
// vectorized search for its first position; inner > 1: the running max of a [size, inner]
// block is kept in the output while the rows stream by, so reads stay sequential. Chunks of the
// [outer, inner] outputs are spread with at::parallel_for. Built once per instruction set
// (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace customop::ops::cpu {

/// One kernel call: contiguous input [outer, size, inner] (size > 0), outputs [outer, inner].
struct MaxAlongCpuParams {
  const void* input;      // [outer, size, inner]
  void* values;           // [outer, inner], input's dtype, freshly allocated
  int64_t* indices;       // [outer, inner], in [0, size)
  int64_t outer;          // product of the dims before dim
  int64_t size;           // length of dim, > 0
  int64_t inner;          // product of the dims after dim
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16
};

CUSTOMOP_CPU_DECLARE(void max_along_kernel(const MaxAlongCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// True when v replaces the running max m: larger, or the first NaN.
template <class A>
inline bool takes_over(A v, A m) {
  return !std::isnan(m) && (v > m || std::isnan(v));
}

// Two passes over a row (it stays in cache): the vectorized max (at::vec::maximum keeps NaN),
// then the first position holding it, found with vector compares. Compares in A = acc_t<T>:
// widening float16/bfloat16 to float32 is exact, so the max and its position are those of T.
template <class T>
void max_rows(const T* x, T* values, int64_t* indices, int64_t begin, int64_t end, int64_t size) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  constexpr int kAllFalse = (1 << kV) - 1;  // zero_mask() of a compare with no true lane
  auto at_ = [](const T* p, int64_t i) { return static_cast<A>(p[i]); };
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * size;
    A m = at_(xr, 0);
    int64_t s = 0;
    if (size >= kV) {
      Vec vmax = IO::load(xr);
      s = kV;
      if (size >= 4 * kV) {
        // Four running maxima: one would chain every load's max on the one before (two
        // dependent instructions per vector), slower than a core streams the row from memory.
        auto [m0, m1] = IO::load2(xr);
        auto [m2, m3] = IO::load2(xr + 2 * kV);
        for (s = 4 * kV; s + 4 * kV <= size; s += 4 * kV) {
          const auto [a0, a1] = IO::load2(xr + s);
          const auto [a2, a3] = IO::load2(xr + s + 2 * kV);
          m0 = at::vec::maximum(m0, a0);
          m1 = at::vec::maximum(m1, a1);
          m2 = at::vec::maximum(m2, a2);
          m3 = at::vec::maximum(m3, a3);
        }
        vmax = at::vec::maximum(at::vec::maximum(m0, m1), at::vec::maximum(m2, m3));
      }
      for (; s + kV <= size; s += kV) vmax = at::vec::maximum(vmax, IO::load(xr + s));
      alignas(64) A lanes[kV];
      vmax.store(lanes);
      for (int64_t l = 0; l < kV; ++l) m = std::isnan(m) || m >= lanes[l] ? m : lanes[l];
    }
    for (; s < size; ++s) m = std::isnan(m) || m >= at_(xr, s) ? m : at_(xr, s);

    int64_t at = 0;
    if (std::isnan(m)) {
      while (!std::isnan(at_(xr, at))) ++at;
    } else {
      // NB: compare with == so -0.0 and 0.0 tie, as `>` in torch.max does.
      const Vec vm(m);
      int64_t j = 0;
      while (j + kV <= size && (IO::load(xr + j) == vm).zero_mask() == kAllFalse) j += kV;
      at = j;
      while (at_(xr, at) != m) ++at;
    }
    values[row] = xr[at];
    indices[row] = at;
  }
}

// Outputs [o, i0 .. i1) of one outer index.
template <class T>
void max_columns(const T* x, T* values, int64_t* indices, int64_t o, int64_t i0, int64_t i1,
                 int64_t size, int64_t inner) {
  using A = acc_t<T>;
  const T* xo = x + o * size * inner;
  T* v = values + o * inner;
  int64_t* idx = indices + o * inner;
  for (int64_t i = i0; i < i1; ++i) {
    v[i] = xo[i];
    idx[i] = 0;
  }
  for (int64_t s = 1; s < size; ++s) {
    const T* xs = xo + s * inner;
    for (int64_t i = i0; i < i1; ++i) {
      if (takes_over(static_cast<A>(xs[i]), static_cast<A>(v[i]))) {
        v[i] = xs[i];
        idx[i] = s;
      }
    }
  }
}

template <class T>
void run(const MaxAlongCpuParams& p) {
  const T* x = static_cast<const T*>(p.input);
  T* values = static_cast<T*>(p.values);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / p.size);
  if (p.inner == 1) {
    at::parallel_for(0, p.outer, grain, [&](int64_t begin, int64_t end) {
      max_rows<T>(x, values, p.indices, begin, end, p.size);
    });
    return;
  }
  at::parallel_for(0, p.outer * p.inner, grain, [&](int64_t begin, int64_t end) {
    int64_t k = begin;
    while (k < end) {
      const int64_t o = k / p.inner;
      const int64_t i0 = k % p.inner;
      const int64_t i1 = std::min(p.inner, i0 + (end - k));
      max_columns<T>(x, values, p.indices, o, i0, i1, p.size, p.inner);
      k += i1 - i0;
    }
  });
}

}  // namespace

void max_along_kernel(const MaxAlongCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/checks.h"
#include "detail/max_along.h"

#include <ATen/ops/empty.h>

namespace customop::ops::detail {

void max_along_cpu(const MaxAlongArgs& a, const MaxAlongResult& out) {
  const int64_t dim = wrap_dim("max_along", a.dim, a.input.dim());  // checked by op.shape
  const at::Tensor x = a.input.contiguous();
  const auto& [values, indices] = out;
  const auto s = split_at_dim(x.sizes(), dim);
  const cpu::MaxAlongCpuParams p{x.const_data_ptr(),
                                 values.mutable_data_ptr(),
                                 indices.mutable_data_ptr<int64_t>(),
                                 s.outer,
                                 s.size,
                                 s.inner,
                                 x.scalar_type()};
  if (values.numel() > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(max_along_kernel, p) }();
  }
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
