#pragma once
// Loads and stores between a kernel's storage dtype T and its compute dtype acc_t<T>, in
// vectors of acc_t<T> (at::vec::Vectorized). T = float or double computes in T itself, so a
// float32/float64 kernel written with these helpers is the plain Vectorized<T> code;
// T = c10::Half or c10::BFloat16 computes in float32 (at::opmath_type, as ATen's own CPU
// kernels): each load widens VecIO<T>::kLanes elements to float32, each store rounds float32
// back to T (round to nearest even). Included by the kernel files of every build
// (cpu/cpu_dispatch.h): no static data here.

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

namespace customop::ops::cpu {

/// The compute (accumulation) dtype of storage dtype T: float for Half and BFloat16, else T.
template <class T>
using acc_t = at::opmath_type<T>;

/// True for the 16-bit storage dtypes (Half, BFloat16).
template <class T>
inline constexpr bool kReduced = !std::is_same_v<acc_t<T>, T>;

// NB: VecIO names at::vec::Vectorized, whose type differs per build (ATen's inline namespace
// CPU_CAPABILITY): it lives in each build's own namespace, or the builds' instantiations
// would share one mangled name and the linker would keep one of them for all (an ODR
// violation that reads AVX-512 lanes through a baseline vector when not inlined).
namespace CUSTOMOP_CPU_CAPABILITY {

template <class T>
struct VecIO {
  using Acc = acc_t<T>;
  using Vec = at::vec::Vectorized<Acc>;
  /// Elements of T per load/store: the lanes of one Vectorized<Acc>.
  static constexpr int64_t kLanes = Vec::size();

  /// kLanes elements from p (unaligned), widened to Acc.
  static Vec load(const T* p) {
    if constexpr (kReduced<T>) {
      Vec out;
      at::vec::load_to_float<T>(p, out);
      return out;
    } else {
      return Vec::loadu(p);
    }
  }

  /// The first n (0 <= n <= kLanes) elements from p, widened to Acc; the other lanes are 0.
  /// Reads no element past p[n - 1].
  static Vec load(const T* p, int64_t n) {
    if (n == kLanes) return load(p);  // NB: callers pass a full vector here too (masked rows)
    if constexpr (kReduced<T>) {
      alignas(64) T tmp[kLanes] = {};
      for (int64_t l = 0; l < n; ++l) tmp[l] = p[l];
      return load(tmp);
    } else {
      return Vec::loadu(p, static_cast<int>(n));
    }
  }

  /// v rounded to T and widened back: what storing v and loading it again gives.
  static Vec round(const Vec& v) {
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      return at::vec::cast<float>(bf16_bits(v));  // integer ops only, no shuffle
    } else if constexpr (kReduced<T>) {
      return std::get<0>(at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(v, v)));
    } else {
      return v;
    }
  }

  /// Two vectors' worth: 2 kLanes elements from p (unaligned), widened to Acc. For float16 and
  /// bfloat16 one full Vectorized<T> load and conversion, where two load(p) convert twice the
  /// lanes they keep.
  static std::pair<Vec, Vec> load2(const T* p) {
    if constexpr (kReduced<T>) {
      auto [lo, hi] = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
      return {lo, hi};
    } else {
      return {Vec::loadu(p), Vec::loadu(p + kLanes)};
    }
  }

  /// a and b rounded to T and widened back (round, for two vectors at the cost of one).
  static std::pair<Vec, Vec> round2(const Vec& a, const Vec& b) {
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      return {round(a), round(b)};
    } else if constexpr (kReduced<T>) {
      auto [lo, hi] = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(a, b));
      return {lo, hi};
    } else {
      return {a, b};
    }
  }

  /// a then b, 2 kLanes elements, to p (unaligned), rounded to T (one conversion for both).
  static void store2(const Vec& a, const Vec& b, T* p) {
    if constexpr (kReduced<T>) {
      at::vec::convert_from_float<T>(a, b).store(p);
    } else {
      a.store(p);
      b.store(p + kLanes);
    }
  }

  /// As load2, in a lane order of its own: for bfloat16 the even elements of p[0, 2 kLanes),
  /// then the odd ones (a bfloat16 is the high half of its float32, so a shift and a mask of
  /// the 32-bit words widen both halves, where load2's in-order conversion needs four
  /// shuffles); other dtypes in order. For elementwise code only, whose every vector operand
  /// comes through load2_unordered and whose results go out through store2_unordered, which
  /// puts each lane back where it came from.
  static std::pair<Vec, Vec> load2_unordered(const T* p) {
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      using IVec = at::vec::Vectorized<int32_t>;
      static_assert(IVec::size() == Vec::size(), "a 32-bit word per float lane");
      const IVec words = IVec::loadu(p);  // word i: elements 2i and 2i + 1 (either endianness)
      return {at::vec::cast<float>(words << IVec(16)),
              at::vec::cast<float>(words & IVec(kHighHalf))};
    } else {
      return load2(p);
    }
  }

  /// Two vectors from load2_unordered's lane order, rounded to T, to p[0, 2 kLanes) in place.
  static void store2_unordered(const Vec& a, const Vec& b, T* p) {
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      using IVec = at::vec::Vectorized<int32_t>;
      // NB: >> is an arithmetic shift on Vectorized<int32_t>: mask the sign copies away.
      (bf16_bits(b) | ((bf16_bits(a) >> IVec(16)) & IVec(0xFFFF))).store(p);
    } else {
      store2(a, b, p);
    }
  }

  /// kLanes elements to p (unaligned), rounded to T.
  static void store(const Vec& v, T* p) {
    if constexpr (kReduced<T>) {
      at::vec::convert_from_float<T>(v, v).store(p, static_cast<int>(kLanes));
    } else {
      v.store(p);
    }
  }

  /// As store(v, p), as a non-temporal store (straight to memory: no read for ownership of the
  /// line, no cache line taken) where T is float or double and p is aligned to the vector
  /// (AVX2 and AVX-512 builds); else store(v, p). For outputs that would not stay in cache
  /// anyway (cpu/stream_choice.h). NB: a thread's streamed stores are
  /// weakly ordered: it calls stream_fence() before another thread may read them.
  static void store_stream(const Vec& v, T* p) {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
    if constexpr (!kReduced<T>) {
      if ((reinterpret_cast<std::uintptr_t>(p) & (sizeof(Vec) - 1)) == 0) {
#if defined(CPU_CAPABILITY_AVX512)
        if constexpr (std::is_same_v<T, float>) {
          _mm512_stream_ps(p, v);
        } else {
          _mm512_stream_pd(p, v);
        }
#else
        if constexpr (std::is_same_v<T, float>) {
          _mm256_stream_ps(p, v);
        } else {
          _mm256_stream_pd(p, v);
        }
#endif
        return;
      }
    }
#endif
    store(v, p);
  }

  /// The first n (0 <= n <= kLanes) lanes to p, rounded to T; writes no element past p[n - 1].
  static void store(const Vec& v, T* p, int64_t n) {
    if (n == kLanes) return store(v, p);
    if constexpr (kReduced<T>) {
      at::vec::convert_from_float<T>(v, v).store(p, static_cast<int>(n));
    } else {
      v.store(p, static_cast<int>(n));
    }
  }

 private:
  static constexpr int32_t kHighHalf = static_cast<int32_t>(0xFFFF0000U);

  /// float32 lanes rounded to bfloat16 (to nearest, ties to even, as c10::BFloat16 and
  /// convert_from_float round), as float32 bit patterns: the bfloat16 in the high half, the
  /// low half 0. NaN gives a quiet NaN. Adding 0x7FFF plus the kept part's lowest bit carries
  /// into the kept part exactly when the dropped half is above one half, or one half with
  /// that bit odd.
  static at::vec::Vectorized<int32_t> bf16_bits(const Vec& v) {
    using IVec = at::vec::Vectorized<int32_t>;
    const IVec w = at::vec::cast<int32_t>(v);
    const IVec r = (w + IVec(0x7FFF) + ((w >> IVec(16)) & IVec(1))) & IVec(kHighHalf);
    return at::vec::cast<int32_t>(
        Vec::blendv(at::vec::cast<float>(r), Vec(std::numeric_limits<float>::quiet_NaN()), v != v));
  }
};

/// Asks for the cache line holding p to be brought into L1 (a hint: no fault, no effect on
/// results). For a row kernel's second pass, which reads its row from L1, to fetch the next
/// row meanwhile: rms_norm_backward at 16 MiB float32, 17.8-29.0 -> 23.3-38.5 GB/s (5 alternated
/// runs of bench/backward_cpu, medians of 3; 2026-12-06); masked_softmax_backward showed no
/// clear change (21.7-40.7 -> 24.9-35.2).
template <class T>
inline void prefetch_line(const T* p) {
  __builtin_prefetch(p, /*rw=*/0, /*locality=*/3);
}

/// Orders this thread's streamed stores (VecIO::store_stream) before its later stores, so that
/// a thread that sees those (a parallel loop's join) sees the streamed data too. No-op in the
/// default build, which never streams.
inline void stream_fence() {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  _mm_sfence();
#endif
}

/// at::parallel_for over [0, n) in whole blocks of `block` elements, at least `grain` blocks per
/// task: body(b, len) for each block, b a multiple of `block` and len = min(block, n - b), so
/// every block of a contiguous tensor starts on a vector boundary whatever the thread count
/// (VecIO::store_stream streams aligned vectors only); then stream_fence() once per task when
/// `stream`.
template <class F>
void parallel_for_blocks(int64_t n, int64_t block, int64_t grain, bool stream, const F& body) {
  at::parallel_for(0, (n + block - 1) / block, grain, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      body(blk * block, std::min(block, n - blk * block));
    }
    if (stream) stream_fence();
  });
}

/// out[0, n) = f(in[0, n)...) elementwise, two vectors at a time in VecIO<T>'s unordered lane
/// order: f takes one std::pair<Vec, Vec> per input (load2_unordered's) and returns the pair
/// to store (store2_unordered rounds it to T). The rest of the range (fewer than 2 kLanes
/// elements) goes through f too, on zero-padded copies, so an element's result, NaN bits
/// included, does not depend on where it falls. out may be one of the inputs (each step reads
/// its elements before it writes them). kStream: float and double results go out through
/// store_stream (the caller fences).
template <bool kStream = false, class T, class F, class... In>
void map_unordered(int64_t n, F&& f, T* out, const In*... in) {
  static_assert((std::is_same_v<In, T> && ...), "every input has the output's dtype");
  using IO = VecIO<T>;
  constexpr int64_t kStep = 2 * IO::kLanes;
  int64_t j = 0;
  for (; j + kStep <= n; j += kStep) {
    const auto [a, b] = f(IO::load2_unordered(in + j)...);
    if constexpr (kStream && !kReduced<T>) {
      IO::store_stream(a, out + j);
      IO::store_stream(b, out + j + IO::kLanes);
    } else {
      IO::store2_unordered(a, b, out + j);
    }
  }
  if (j < n) {
    const auto padded = [&](const T* p) {
      std::array<T, kStep> t{};
      std::copy(p + j, p + n, t.begin());
      return t;
    };
    std::array<T, kStep> rest;
    const auto [a, b] = f(IO::load2_unordered(padded(in).data())...);
    IO::store2_unordered(a, b, rest.data());
    std::copy(rest.begin(), rest.begin() + (n - j), out + j);
  }
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu
