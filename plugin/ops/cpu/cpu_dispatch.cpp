#include "cpu/cpu_dispatch.h"

#include <ATen/Version.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <string>

namespace customop::ops::cpu {

namespace {
Capability compute_capability() {
  // NB: ATen has already checked the CPU (cpuinfo) and the ATEN_CPU_CAPABILITY override.
  const std::string aten = at::get_cpu_capability();
  Capability best = Capability::kDefault;
  if (aten == "AVX512") {
    best = Capability::kAvx512;
  } else if (aten == "AVX2") {
    best = Capability::kAvx2;
  }
#if !defined(CUSTOMOP_CPU_HAVE_AVX512)
  if (best == Capability::kAvx512) best = Capability::kAvx2;
#endif
#if !defined(CUSTOMOP_CPU_HAVE_AVX2)
  if (best == Capability::kAvx2) best = Capability::kDefault;
#endif
  return best;
}
}  // namespace

bool avx512_bf16() {
  static const bool yes = [] {
    if (const char* env = std::getenv("CUSTOMOP_CPU_AVX512_BF16");
        env != nullptr && std::string(env) == "0") {
      return false;
    }
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && ((eax >> 5) & 1U) != 0;
#else
    return false;
#endif
  }();
  return yes;
}

Capability capability() {
  static const Capability cap = compute_capability();
  return cap;
}

}  // namespace customop::ops::cpu
