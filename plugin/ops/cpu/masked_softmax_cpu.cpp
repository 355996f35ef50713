// CPU kernel of customop::masked_softmax. inner == 1 (softmax over the last dim): per row,
// one vectorized pass for the max of the kept elements, one writing exp(x - max) (0 where
// masked) and summing it, one scaling by 1 / sum; the row stays in cache between passes.
// inner > 1: the same three passes over a [size, inner] block with per-column running max
// and sum, reading along inner. Rows / column chunks are spread with at::parallel_for.
// float16/bfloat16 compute in float32 (max, exp, sum, scale) and round y once.
// Built once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"
#include "cpu/vec_math.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace customop::ops::cpu {

/// One kernel call: contiguous input/output (and mask) viewed as [outer, size, inner].
struct MaskedSoftmaxCpuParams {
  const void* input;      // [outer, size, inner]
  const uint8_t* mask;    // [outer, size, inner], nonzero = kept; nullptr = keep everything
  void* output;           // [outer, size, inner], freshly allocated
  int64_t outer;          // product of the dims before dim
  int64_t size;           // length of dim
  int64_t inner;          // product of the dims after dim
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (computes in acc_t)
};

CUSTOMOP_CPU_DECLARE(void masked_softmax_kernel(const MaskedSoftmaxCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

// max that propagates NaN, as torch.softmax's max does.
template <class T>
inline T nan_max(T a, T b) {
  return (std::isnan(a) || a >= b) ? a : b;
}

// All-ones lanes for the first `n` lanes whose mask byte is set (every one of the first n
// when m is nullptr); zero lanes after n. A full vector of mask bytes is widened with
// AVX2/AVX-512 instructions (the bytes -> lanes step is most of the masked path's cost).
template <class T>
inline at::vec::Vectorized<T> keep_lanes(const uint8_t* m, int64_t n) {
  using Vec = at::vec::Vectorized<T>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
#if defined(CPU_CAPABILITY_AVX512)
  if (m != nullptr && n == Vec::size()) {
    if constexpr (std::is_same_v<T, float>) {  // 16 bytes -> 16 x int32 -> lane mask
      const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m)));
      return Vec(_mm512_castsi512_ps(_mm512_movm_epi32(_mm512_test_epi32_mask(w, w))));
    } else {  // 8 bytes -> 8 x int64
      const __m512i w = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
      return Vec(_mm512_castsi512_pd(_mm512_movm_epi64(_mm512_test_epi64_mask(w, w))));
    }
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if (m != nullptr && n == Vec::size()) {
    const __m256i ones = _mm256_set1_epi32(-1);
    if constexpr (std::is_same_v<T, float>) {  // 8 bytes -> 8 x int32 -> lane mask
      const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
      const __m256i masked = _mm256_cmpeq_epi32(w, _mm256_setzero_si256());
      return Vec(_mm256_castsi256_ps(_mm256_xor_si256(masked, ones)));
    } else {  // 4 bytes -> 4 x int64
      int32_t bytes;
      std::memcpy(&bytes, m, sizeof(bytes));
      const __m256i w = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(bytes));
      const __m256i masked = _mm256_cmpeq_epi64(w, _mm256_setzero_si256());
      return Vec(_mm256_castsi256_pd(_mm256_xor_si256(masked, ones)));
    }
  }
#endif
  alignas(64) T flags[Vec::size()];
  for (int64_t l = 0; l < Vec::size(); ++l) {
    flags[l] = (l < n && (m == nullptr || m[l] != 0)) ? T(1) : T(0);
  }
  return Vec::loadu(flags) != Vec(T(0));
}

// exp per lane in A: float32 inline (cpu/vec_math.h: no out-of-line call per vector), float64
// through ATen's Vectorized<double>::exp.
template <class A>
inline at::vec::Vectorized<A> vexp(const at::vec::Vectorized<A>& v) {
  if constexpr (std::is_same_v<A, float>) {
    return exp_f32(v);
  } else {
    return v.exp();
  }
}

// One row of n elements, computed in A = acc_t<T>. exp(x - max) is kept in `e` (y itself
// when A is T; for float16/bfloat16 a float32 row, so y is rounded once, after the scaling).
template <class T>
void softmax_row(const T* x, const uint8_t* m, T* y, int64_t n, acc_t<T>* scratch) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  const A ninf = -std::numeric_limits<A>::infinity();
  A* e_row = nullptr;
  if constexpr (kReduced<T>) {
    e_row = scratch;
  } else {
    e_row = y;
  }

  // NB: a fully masked row gives zeros, not the NaN of exp(-inf - -inf).
  const bool any = m == nullptr ? n > 0 : std::any_of(m, m + n, [](uint8_t b) { return b != 0; });
  if (!any) {
    std::fill(y, y + n, T(0));
    return;
  }

  // Pass 1: max of the kept elements.
  Vec vmax(ninf);
  for (int64_t j = 0; j < n; j += kV) {
    const int64_t r = std::min(kV, n - j);
    if (m == nullptr && r == kV) {
      vmax = at::vec::maximum(vmax, IO::load(x + j));
    } else {
      const Vec keep = keep_lanes<A>(m == nullptr ? nullptr : m + j, r);
      vmax = at::vec::maximum(vmax, Vec::blendv(Vec(ninf), IO::load(x + j, r), keep));
    }
  }
  alignas(64) A lanes[kV];
  vmax.store(lanes);
  A mx = ninf;
  for (int64_t l = 0; l < kV; ++l) mx = nan_max(mx, lanes[l]);

  // Pass 2: e = exp(x - max) where kept, 0 elsewhere; sum(e).
  const Vec vm(mx);
  Vec vsum(A(0));
  for (int64_t j = 0; j < n; j += kV) {
    const int64_t r = std::min(kV, n - j);
    if (m == nullptr && r == kV) {
      const Vec e = vexp<A>(IO::load(x + j) - vm);
      vsum = vsum + e;
      e.store(e_row + j);
    } else {
      const Vec keep = keep_lanes<A>(m == nullptr ? nullptr : m + j, r);
      const Vec e = Vec::blendv(Vec(A(0)), vexp<A>(IO::load(x + j, r) - vm), keep);
      vsum = vsum + e;
      e.store(e_row + j, static_cast<int>(r));
    }
  }
  vsum.store(lanes);
  A sum = 0;
  for (int64_t l = 0; l < kV; ++l) sum += lanes[l];

  // Pass 3: normalise.
  // NB: a NaN among the kept elements makes the sum NaN, and 0 * NaN would turn the masked
  // zeros into NaN; such a row (rare) is scaled element by element, masked ones kept at 0.
  if (m != nullptr && std::isnan(sum)) {
    for (int64_t k = 0; k < n; ++k) y[k] = m[k] != 0 ? static_cast<T>(e_row[k] / sum) : T(0);
    return;
  }
  const Vec inv(A(1) / sum);
  int64_t j = 0;
  for (; j + kV <= n; j += kV) IO::store(Vec::loadu(e_row + j) * inv, y + j);
  if (j < n) IO::store(Vec::loadu(e_row + j, static_cast<int>(n - j)) * inv, y + j, n - j);
}

// Columns [i0, i1) of outer index o for inner > 1: running max / sum per column, in
// A = acc_t<T>. float16/bfloat16 recompute exp(x - max) in the last pass rather than round
// it to T in between.
template <class T>
void softmax_columns(const T* x, const uint8_t* m, T* y, int64_t o, int64_t i0, int64_t i1,
                     int64_t size, int64_t inner) {
  using A = acc_t<T>;
  const int64_t w = i1 - i0;
  const A ninf = -std::numeric_limits<A>::infinity();
  std::vector<A> mx(static_cast<size_t>(w), ninf);
  std::vector<A> sum(static_cast<size_t>(w), A(0));
  std::vector<uint8_t> any(static_cast<size_t>(w), 0);
  const int64_t base = o * size * inner + i0;
  for (int64_t s = 0; s < size; ++s) {
    const int64_t row = base + s * inner;
    for (int64_t i = 0; i < w; ++i) {
      if (m == nullptr || m[row + i] != 0) {
        mx[i] = nan_max(mx[i], static_cast<A>(x[row + i]));
        any[i] = 1;
      }
    }
  }
  for (int64_t s = 0; s < size; ++s) {
    const int64_t row = base + s * inner;
    for (int64_t i = 0; i < w; ++i) {
      const bool keep = m == nullptr || m[row + i] != 0;
      const A e = keep ? std::exp(static_cast<A>(x[row + i]) - mx[i]) : A(0);
      if constexpr (!kReduced<T>) y[row + i] = e;
      sum[i] += e;
    }
  }
  for (int64_t i = 0; i < w; ++i) sum[i] = any[i] ? A(1) / sum[i] : A(0);
  for (int64_t s = 0; s < size; ++s) {
    const int64_t row = base + s * inner;
    for (int64_t i = 0; i < w; ++i) {
      const bool keep = m == nullptr || m[row + i] != 0;
      if constexpr (kReduced<T>) {
        y[row + i] =
            keep ? static_cast<T>(std::exp(static_cast<A>(x[row + i]) - mx[i]) * sum[i]) : T(0);
      } else {
        y[row + i] = keep ? y[row + i] * sum[i] : T(0);
      }
    }
  }
}

template <class T>
void run(const MaskedSoftmaxCpuParams& p) {
  const T* x = static_cast<const T*>(p.input);
  T* y = static_cast<T*>(p.output);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(p.size, 1));
  if (p.inner == 1) {
    at::parallel_for(0, p.outer, grain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t<T>> scratch(kReduced<T> ? static_cast<size_t>(p.size) : 0);
      for (int64_t row = begin; row < end; ++row) {
        softmax_row<T>(x + row * p.size, p.mask == nullptr ? nullptr : p.mask + row * p.size,
                       y + row * p.size, p.size, scratch.data());
      }
    });
    return;
  }
  at::parallel_for(0, p.outer * p.inner, grain, [&](int64_t begin, int64_t end) {
    int64_t k = begin;
    while (k < end) {
      const int64_t o = k / p.inner;
      const int64_t i0 = k % p.inner;
      const int64_t i1 = std::min(p.inner, i0 + (end - k));
      softmax_columns<T>(x, p.mask, y, o, i0, i1, p.size, p.inner);
      k += i1 - i0;
    }
  });
}

}  // namespace

void masked_softmax_kernel(const MaskedSoftmaxCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/checks.h"
#include "detail/masked_softmax.h"

#include <ATen/ops/empty.h>

namespace customop::ops::detail {

void masked_softmax_cpu(const MaskedSoftmaxArgs& a, const at::Tensor& y) {
  const int64_t dim = wrap_dim("masked_softmax", a.dim, a.input.dim());  // checked by op.shape
  const at::Tensor x = a.input.contiguous();
  // NB: a broadcast mask is materialised (1 byte per element); a same-shape contiguous one
  // is used in place.
  const at::Tensor mask = a.mask ? a.mask->expand(x.sizes()).contiguous() : at::Tensor();
  const auto s = split_at_dim(x.sizes(), dim);
  const cpu::MaskedSoftmaxCpuParams p{
      x.const_data_ptr(),
      mask.defined() ? static_cast<const uint8_t*>(mask.const_data_ptr()) : nullptr,
      y.mutable_data_ptr(),
      s.outer,
      s.size,
      s.inner,
      x.scalar_type()};
  if (x.numel() > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(masked_softmax_kernel, p) }();
  }
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
