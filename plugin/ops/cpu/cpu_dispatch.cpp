#include "cpu/cpu_dispatch.h"

#include <ATen/Version.h>

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

Capability capability() {
  static const Capability cap = compute_capability();
  return cap;
}

}  // namespace customop::ops::cpu
