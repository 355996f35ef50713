#pragma once
// Run-time choice among the builds of a CPU kernel file. Every cpu/<op>_cpu.cpp is compiled
// once per instruction set (CMakeLists.txt), each build in its own namespace:
//   customop::ops::cpu::cap_default   baseline x86-64 / any other CPU
//   customop::ops::cpu::cap_avx2      AVX2 + FMA
//   customop::ops::cpu::cap_avx512    AVX-512 (F, BW, VL, DQ)
// The default build also holds the op's entry point (CUSTOMOP_CPU_ENTRY), which calls the
// best build through CUSTOMOP_CPU_DISPATCH. NB: include nothing with static initializers in
// the part of a kernel file the AVX builds see: they would run on CPUs without AVX.

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace customop::ops::cpu {

/// Elements per at::parallel_for task below which splitting further does not pay (ATen's
/// internal GRAIN_SIZE).
inline constexpr int64_t kGrainSize = 32768;

/// Instruction sets a kernel file is built for, lowest first.
enum class Capability { kDefault, kAvx2, kAvx512 };

/// The best build this machine runs: ATen's choice (at::get_cpu_capability(), which honours
/// ATEN_CPU_CAPABILITY=default|avx2|avx512), capped at the builds compiled in. Cached.
Capability capability();

/// The footprint a kernel call passes to its StreamChoice (cpu/stream_choice.h), in bytes:
/// `tensors` tensors (read + written) of `numel` elements of `dtype`, or 0 where none of its
/// stores would stream: float16/bfloat16 outputs (VecIO::store_stream stores them as usual)
/// and the default build (no vector stream instruction). A 0 keeps such calls out of the
/// streamed calls' timing statistics.
inline int64_t stream_footprint(int64_t tensors, int64_t numel, c10::ScalarType dtype) {
  const bool reduced = dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
  if (reduced || capability() == Capability::kDefault) return 0;
  return tensors * numel * static_cast<int64_t>(c10::elementSize(dtype));
}

/// True when this CPU has AVX512_BF16 (cpuid leaf 7, subleaf 1, EAX bit 5: one-instruction
/// float32 -> bfloat16 rounding, vcvtne2ps2bf16) and CUSTOMOP_CPU_AVX512_BF16 is not "0" (the
/// override that lets a test run the plain AVX-512 path on such a CPU). Only the AVX-512 build
/// asks: ATen choosing AVX-512 implies the OS saves the registers. Read once; thread-safe.
bool avx512_bf16();

/// The dtype switch of every CPU kernel, written once: returns
/// fn(std::type_identity<T>{}) with T = double, float, c10::Half or c10::BFloat16 for kDouble,
/// kFloat, kHalf and kBFloat16 (the ops' checks let only these reach a CPU kernel; any other
/// dtype is taken as float). A kernel computes in acc_t<T> (cpu/vec_io.h).
///   dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
template <class Fn>
decltype(auto) dispatch_floating(c10::ScalarType dtype, Fn&& fn) {
  switch (dtype) {
    case c10::ScalarType::Double: return std::forward<Fn>(fn)(std::type_identity<double>{});
    case c10::ScalarType::Half: return std::forward<Fn>(fn)(std::type_identity<c10::Half>{});
    case c10::ScalarType::BFloat16:
      return std::forward<Fn>(fn)(std::type_identity<c10::BFloat16>{});
    default: return std::forward<Fn>(fn)(std::type_identity<float>{});
  }
}

}  // namespace customop::ops::cpu

/// Declares a kernel function in the namespace of every build.
#define CUSTOMOP_CPU_DECLARE(...) \
  namespace cap_default {         \
  __VA_ARGS__;                    \
  }                               \
  namespace cap_avx2 {            \
  __VA_ARGS__;                    \
  }                               \
  namespace cap_avx512 {          \
  __VA_ARGS__;                    \
  }

#if defined(CUSTOMOP_CPU_HAVE_AVX2)
#define CUSTOMOP_CPU_CASE_AVX2(fn, ...)         \
  case ::customop::ops::cpu::Capability::kAvx2: \
    return ::customop::ops::cpu::cap_avx2::fn(__VA_ARGS__);
#else
#define CUSTOMOP_CPU_CASE_AVX2(fn, ...)
#endif
#if defined(CUSTOMOP_CPU_HAVE_AVX512)
#define CUSTOMOP_CPU_CASE_AVX512(fn, ...)         \
  case ::customop::ops::cpu::Capability::kAvx512: \
    return ::customop::ops::cpu::cap_avx512::fn(__VA_ARGS__);
#else
#define CUSTOMOP_CPU_CASE_AVX512(fn, ...)
#endif

/// `return fn(args...)` from the best build of the calling kernel file.
#define CUSTOMOP_CPU_DISPATCH(fn, ...)                                  \
  switch (::customop::ops::cpu::capability()) {                         \
    CUSTOMOP_CPU_CASE_AVX512(fn, __VA_ARGS__)                           \
    CUSTOMOP_CPU_CASE_AVX2(fn, __VA_ARGS__)                             \
    default: return ::customop::ops::cpu::cap_default::fn(__VA_ARGS__); \
  }
