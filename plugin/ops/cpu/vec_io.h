#pragma once
// Loads and stores between a kernel's storage dtype T and its compute dtype acc_t<T>, in
// vectors of acc_t<T> (at::vec::Vectorized). T = float or double computes in T itself, so a
// float32/float64 kernel written with these helpers is the plain Vectorized<T> code;
// T = c10::Half or c10::BFloat16 computes in float32 (at::opmath_type, as ATen's own CPU
// kernels): each load widens VecIO<T>::kLanes elements to float32, each store rounds float32
// back to T (round to nearest even). Included by the kernel files of every build
// (cpu/cpu_dispatch.h): no static data here.

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
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
    if constexpr (kReduced<T>) {
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
    if constexpr (kReduced<T>) {
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

  /// kLanes elements to p (unaligned), rounded to T.
  static void store(const Vec& v, T* p) {
    if constexpr (kReduced<T>) {
      at::vec::convert_from_float<T>(v, v).store(p, static_cast<int>(kLanes));
    } else {
      v.store(p);
    }
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
};

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu
