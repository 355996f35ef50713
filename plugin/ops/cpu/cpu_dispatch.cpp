#include "cpu/cpu_dispatch.h"

#include <ATen/Version.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
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

namespace {

/// "32768K" / "1M" / "65536" (bytes) as bytes; 0 if it is none of these.
int64_t parse_cache_size(const std::string& text) {
  std::size_t i = 0;
  int64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0 &&
         v < (int64_t{1} << 40)) {
    v = v * 10 + (text[i++] - '0');
  }
  if (i == 0) return 0;
  const char unit = i < text.size() ? text[i] : ' ';
  if (unit == 'K') return v << 10;
  if (unit == 'M') return v << 20;
  if (unit == 'G') return v << 30;
  return v;
}

/// The size of cpu0's highest cache level, from sysfs; 0 when unknown.
int64_t sysfs_last_level_cache() {
  int best_level = 0;
  int64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    const int64_t bytes = parse_cache_size(size);
    if (bytes > 0 && level >= best_level) {
      best_level = level;
      best = bytes;
    }
  }
  return best;
}

int64_t compute_stream_threshold() {
  if (const char* env = std::getenv("CUSTOMOP_CPU_STREAM_BYTES"); env != nullptr && *env != 0) {
    const std::string text(env);
    int64_t v = 0;
    bool ok = text.size() <= 18;
    for (const char c : text) ok = ok && std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (ok) {
      for (const char c : text) v = v * 10 + (c - '0');
      return v;
    }
    TORCH_WARN("customop: CUSTOMOP_CPU_STREAM_BYTES='", text,
               "' is not a byte count (digits only, below 10^18): ignored");
  }
  // Half the last-level cache: the other core's data and the rest of the process share it, so
  // a call's lines are mostly evicted before the next call well below its full size.
  if (const int64_t sysfs = sysfs_last_level_cache(); sysfs > 0) return sysfs / 2;
  if (const long conf = sysconf(_SC_LEVEL3_CACHE_SIZE); conf > 0) return conf / 2;
  return int64_t{16} << 20;
}
}  // namespace

bool stream_stores(int64_t footprint) {
  static const int64_t threshold = compute_stream_threshold();
  return footprint > threshold;
}

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
