// CPU kernel of customop::bias_gelu: y = gelu(x + b) in one pass over x, vectorized
// (at::vec::Vectorized; float erf inline, cpu/vec_math.h), chunks of the flattened [N, D] spread
// with at::parallel_for (a chunk may start and end mid-row, so one long row still splits). Built
// once per instruction set (cpu/cpu_dispatch.h); the default build holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"
#include "cpu/vec_math.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

namespace customop::ops::cpu {

/// One kernel call: contiguous input/output [rows, cols], bias [cols], of `dtype`.
struct BiasGeluCpuParams {
  const void* input;      // [rows, cols]
  const void* bias;       // [cols]
  void* output;           // [rows, cols], freshly allocated
  int64_t rows;           // N, every leading dim folded in
  int64_t cols;           // D
  bool tanh;              // false: exact erf form; true: tanh approximation
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (computes in acc_t)
};

CUSTOMOP_CPU_DECLARE(void bias_gelu_kernel(const BiasGeluCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

template <class T, bool kTanh>
inline at::vec::Vectorized<T> gelu(at::vec::Vectorized<T> s) {
  using Vec = at::vec::Vectorized<T>;
  const Vec half(T(0.5)), one(T(1));
  if constexpr (kTanh) {
    const Vec beta(static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5));  // sqrt(2 / pi)
    const Vec kappa(T(0.044715));
    const Vec inner = beta * (s + kappa * s * s * s);
    return half * s * (one + inner.tanh());
  } else {
    const Vec alpha(static_cast<T>(M_SQRT1_2));
    if constexpr (std::is_same_v<T, float>) {
      return gelu_erf_f32(s);  // inline: cpu/vec_math.h says why
    } else {
      // s = -inf: the limit 0, as gelu_erf_f32 gives (this order gives -inf * 0 = NaN there).
      const Vec y = half * s * (one + (s * alpha).erf());
      return Vec::blendv(y, Vec(T(0)), s == Vec(-std::numeric_limits<T>::infinity()));
    }
  }
}

// y[0, n) = gelu(x[0, n) + b[0, n)): a piece of one row, computed in acc_t<T> (float16 and
// bfloat16 are widened as read; s = x + b is rounded to T, as the ATen composite's add and the
// CUDA kernel round it, and y once). Two vectors per step, in VecIO's unordered lane order
// (map_unordered: bfloat16 widens and narrows without shuffles; for float16 one conversion
// serves both vectors, where a one-vector load or store converts a whole Vectorized<T> and keeps
// half of it).
template <class T, bool kTanh>
void bias_gelu_segment(const T* x, const T* b, T* y, int64_t n) {
  using A = acc_t<T>;
  using Pair = std::pair<typename VecIO<T>::Vec, typename VecIO<T>::Vec>;
  map_unordered(
      n,
      [](const Pair& xv, const Pair& bv) {
        const auto [s0, s1] = VecIO<T>::round2(xv.first + bv.first, xv.second + bv.second);
        return Pair{gelu<A, kTanh>(s0), gelu<A, kTanh>(s1)};
      },
      y, x, b);
}

#if defined(CPU_CAPABILITY_AVX512)
// bfloat16 on a CPU with AVX512_BF16 (cpu::avx512_bf16()): bias_gelu_segment's computation,
// with each rounding to bfloat16 one vcvtne2ps2bf16 for two vectors, where VecIO's integer
// rounding takes 7 instructions per vector. One thread, 64 Ki elements in L2, AMD EPYC
// (2026-12-06): 40-47 us -> 29 us, against 23 us for the float32 kernel (bench/RESULTS.md).
// The instruction rounds to nearest even as c10::BFloat16 does, but flushes float32 denormals
// to zero and keeps a NaN's sign and payload: a step in which s or y has a denormal lane, or y
// a NaN lane (s NaN gives y NaN), is done again by bias_gelu_segment, so every result is
// bias_gelu_segment's, bit for bit (a step of ordinary values never takes that branch).
// Lanes in VecIO's unordered order (x and b widened as 32-bit words: even elements by a shift,
// odd ones by a mask); a masked vpermw widens the rounded s back to float32 lanes, and one
// vpermw puts the rounded results back in element order.
template <bool kTanh>
__attribute__((target("avx512bf16"))) void bias_gelu_bf16_segment_cvtne(const c10::BFloat16* x,
                                                                        const c10::BFloat16* b,
                                                                        c10::BFloat16* y,
                                                                        int64_t n) {
  using Vec = at::vec::Vectorized<float>;
  constexpr int64_t kStep = 32;
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000U));
  // vpermw index vectors, compile-time constants (not rebuilt per row segment).
  // interleave: rounded word i < 16 is the even element 2 i's, word 16 + i the odd element
  // 2 i + 1's. widen0 / widen1: word i (i < 16: the even element 2 i's s, else the odd
  // element's) to the high half of 32-bit lane i % 16, the low half zeroed (kHighHalves): that
  // lane's float32 value.
  static constexpr auto kIndex = [](int first, bool both) {
    struct alignas(64) Words {
      int16_t w[kStep];
    } words{};
    for (int i = 0; i < kStep / 2; ++i) {
      if (both) words.w[2 * i] = static_cast<int16_t>(i);
      words.w[2 * i + 1] = static_cast<int16_t>(first + i);
    }
    return words;
  };
  static constexpr auto kInterleave = kIndex(kStep / 2, true);
  static constexpr auto kWiden0 = kIndex(0, false);
  static constexpr auto kWiden1 = kIndex(kStep / 2, false);
  const __m512i interleave = _mm512_load_si512(kInterleave.w);
  const __m512i widen0 = _mm512_load_si512(kWiden0.w), widen1 = _mm512_load_si512(kWiden1.w);
  constexpr __mmask32 kHighHalves = 0xAAAAAAAAU;
  constexpr int kDenormal = 0x20, kNan = 0x81;  // vfpclassps: denormal; quiet | signalling NaN
  int64_t j = 0;
  for (; j + kStep <= n; j += kStep) {
    const __m512i xw = _mm512_loadu_si512(x + j);
    const __m512i bw = _mm512_loadu_si512(b + j);
    const __m512 s0 = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(xw, 16)),
                                    _mm512_castsi512_ps(_mm512_slli_epi32(bw, 16)));
    const __m512 s1 = _mm512_add_ps(_mm512_castsi512_ps(_mm512_and_si512(xw, high)),
                                    _mm512_castsi512_ps(_mm512_and_si512(bw, high)));
    const __m512i s = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(s1, s0));
    const Vec r0(_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighHalves, widen0, s)));
    const Vec r1(_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighHalves, widen1, s)));
    const __m512 y0 = gelu<float, kTanh>(r0);
    const __m512 y1 = gelu<float, kTanh>(r1);
    const __mmask16 odd =
        _mm512_fpclass_ps_mask(s0, kDenormal) | _mm512_fpclass_ps_mask(s1, kDenormal) |
        _mm512_fpclass_ps_mask(y0, kDenormal | kNan) | _mm512_fpclass_ps_mask(y1, kDenormal | kNan);
    if (odd != 0) [[unlikely]] {
      bias_gelu_segment<c10::BFloat16, kTanh>(x + j, b + j, y + j, kStep);
      continue;
    }
    const __m512i out = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y1, y0));
    _mm512_storeu_si512(y + j, _mm512_permutexvar_epi16(interleave, out));
  }
  if (j < n) bias_gelu_segment<c10::BFloat16, kTanh>(x + j, b + j, y + j, n - j);
}
#endif

// bfloat16: s = x + b rounded to bfloat16 takes one of 2^16 values, so y = gelu(s) rounded is
// a table lookup. The table is this build's own bias_gelu_segment run once over every bit
// pattern (with b = -0, so s = x exactly, -0 and NaN included): a lookup gives bit for bit what
// the computation gives, for a gather and a few integer ops instead of the erf (or tanh)
// polynomial. 2^16 + 1 entries (128 KiB, in L2): a 32-bit gather at entry i reads i + 1 too.
// Where it pays (one thread, 64 Ki elements in L2, AMD EPYC): the AVX2 build 0.56 ns per
// element against 0.77 computed, the default build 7.7 against 20.9; the AVX-512 build
// computes (0.66 ns, against 0.69 with the table: its wider gelu is cheaper, the gathers not;
// with AVX512_BF16's rounding, a table lookup in place of gelu was no faster in L2, 35 us per
// 64 Ki elements against 34 computed, and slower at 16 MiB in bench/kernels_cpu, 1.50-1.64 ms
// against 1.34-1.45 for the plain AVX-512 path in the same run; 2026-12-06).
#if defined(CPU_CAPABILITY_AVX512)
constexpr bool kBf16Table = false;
#else
constexpr bool kBf16Table = true;
#endif
constexpr int64_t kBf16Patterns = int64_t{1} << 16;

template <bool kTanh>
const c10::BFloat16* bf16_gelu_table() {
  static const std::vector<c10::BFloat16> table = [] {
    std::vector<c10::BFloat16> x(kBf16Patterns + 1), b(kBf16Patterns + 1, c10::BFloat16(-0.0f));
    std::vector<c10::BFloat16> y(kBf16Patterns + 1, c10::BFloat16(0.0f));
    for (int64_t i = 0; i < kBf16Patterns; ++i) {
      x[i] = c10::BFloat16(static_cast<uint16_t>(i), c10::BFloat16::from_bits());
    }
    bias_gelu_segment<c10::BFloat16, kTanh>(x.data(), b.data(), y.data(), kBf16Patterns);
    return y;
  }();
  return table.data();
}

// table[bits of s] per lane, as float32 lanes holding the bfloat16 result in their high half
// (what store2_unordered rounds back to itself). s is already rounded to bfloat16.
inline at::vec::Vectorized<float> bf16_lookup(const c10::BFloat16* table,
                                              const at::vec::Vectorized<float>& s) {
  using IVec = at::vec::Vectorized<int32_t>;
  const IVec index = (at::vec::cast<int32_t>(s) >> IVec(16)) & IVec(0xFFFF);
#if defined(CPU_CAPABILITY_AVX2)
  // 32 bits at byte 2 i: entry i in the low half (x86 is little-endian).
  const IVec words =
      at::vec::cast<int32_t>(at::vec::gather<2>(reinterpret_cast<const float*>(table), index));
#else
  alignas(64) int32_t lanes[IVec::size()];
  index.store(lanes);
  for (auto& l : lanes) l = table[l].x;
  const IVec words = IVec::loadu(lanes);
#endif
  return at::vec::cast<float>(words << IVec(16));
}

template <bool kTanh>
void bias_gelu_bf16_segment(const c10::BFloat16* x, const c10::BFloat16* b, c10::BFloat16* y,
                            int64_t n, const c10::BFloat16* table) {
  using IO = VecIO<c10::BFloat16>;
  using Pair = std::pair<IO::Vec, IO::Vec>;
  map_unordered(
      n,
      [table](const Pair& xv, const Pair& bv) {
        const auto [s0, s1] = IO::round2(xv.first + bv.first, xv.second + bv.second);
        return Pair{bf16_lookup(table, s0), bf16_lookup(table, s1)};
      },
      y, x, b);
}

template <class T, bool kTanh>
void run(const BiasGeluCpuParams& p) {
  const T* x = static_cast<const T*>(p.input);
  const T* b = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.output);
  const int64_t d = p.cols;
  const c10::BFloat16* table = nullptr;
  if constexpr (kBf16Table && std::is_same_v<T, c10::BFloat16>) table = bf16_gelu_table<kTanh>();
#if defined(CPU_CAPABILITY_AVX512)
  [[maybe_unused]] const bool cvtne = std::is_same_v<T, c10::BFloat16> && avx512_bf16();
#endif
  at::parallel_for(0, p.rows * d, kGrainSize, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    while (i < end) {
      const int64_t col = i % d;
      const int64_t n = std::min(d - col, end - i);
      if constexpr (kBf16Table && std::is_same_v<T, c10::BFloat16>) {
        bias_gelu_bf16_segment<kTanh>(x + i, b + col, y + i, n, table);
      } else {
#if defined(CPU_CAPABILITY_AVX512)
        if constexpr (std::is_same_v<T, c10::BFloat16>) {
          if (cvtne) {
            bias_gelu_bf16_segment_cvtne<kTanh>(x + i, b + col, y + i, n);
            i += n;
            continue;
          }
        }
#endif
        bias_gelu_segment<T, kTanh>(x + i, b + col, y + i, n);
      }
      i += n;
    }
  });
}

template <class T>
void run(const BiasGeluCpuParams& p) {
  if (p.tanh) {
    run<T, true>(p);
  } else {
    run<T, false>(p);
  }
}

}  // namespace

void bias_gelu_kernel(const BiasGeluCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/bias_gelu.h"

#include <ATen/ops/empty.h>

namespace customop::ops::detail {

void bias_gelu_cpu(const BiasGeluArgs& a, const at::Tensor& y) {
  const at::Tensor x = a.input.contiguous();
  const at::Tensor b = a.bias.contiguous();
  const int64_t d = x.size(-1);
  const cpu::BiasGeluCpuParams p{x.const_data_ptr(),
                                 b.const_data_ptr(),
                                 y.mutable_data_ptr(),
                                 d == 0 ? 0 : x.numel() / d,
                                 d,
                                 a.approximate == "tanh",
                                 x.scalar_type()};
  if (x.numel() > 0) {
    [&] { CUSTOMOP_CPU_DISPATCH(bias_gelu_kernel, p) }();
  }
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
