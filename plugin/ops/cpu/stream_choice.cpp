// The process's non-temporal store rule (cpu/stream_choice.h): the threshold from the
// environment or the last-level cache's size.

#include "cpu/stream_choice.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

namespace customop::ops::cpu {

namespace {

/// "32768K" / "1M" / "65536" (bytes) as bytes; 0 if it is none of these.
int64_t parse_cache_size(const std::string& text) {
  std::size_t i = 0;
  int64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0 &&
         v < (int64_t{1} << 40)) {
    v = v * 10 + (text[i++] - '0');
  }
  if (i == 0 || v >= (int64_t{1} << 30)) return 0;  // no cache of a billion units: unknown
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

StreamChoice::Rule compute_stream_rule() {
  if (const char* env = std::getenv("CUSTOMOP_CPU_STREAM_BYTES"); env != nullptr && *env != 0) {
    const std::string text(env);
    int64_t v = 0;
    bool ok = text.size() <= 18;
    for (const char c : text) ok = ok && std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (ok) {
      for (const char c : text) v = v * 10 + (c - '0');
      return {v, false};
    }
    TORCH_WARN("customop: CUSTOMOP_CPU_STREAM_BYTES='", text,
               "' is not a byte count (digits only, below 10^18): ignored");
  }
  // Half the last-level cache: the other cores' data and the rest of the process share it, so
  // below that a call's outputs mostly survive until the next op reads them.
  int64_t half = int64_t{16} << 20;
  if (const int64_t sysfs = sysfs_last_level_cache(); sysfs > 0) {
    half = sysfs / 2;
  } else if (const long conf = sysconf(_SC_LEVEL3_CACHE_SIZE); conf > 0) {
    half = conf / 2;
  }
  return {half, true};
}
}  // namespace

StreamChoice::Rule stream_rule() {
  static const StreamChoice::Rule rule = compute_stream_rule();
  return rule;
}

}  // namespace customop::ops::cpu
