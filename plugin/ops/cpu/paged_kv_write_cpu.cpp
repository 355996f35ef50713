// CPU kernel of customop::paged_kv_write: every slot is checked first (in range, no slot
// named twice; a refused call writes nothing), then each token's [heads, head_size] row is copied
// into its cache slot, tokens spread with at::parallel_for. A plain copy: built once (no
// per-instruction-set builds).

#include "detail/paged_kv_write.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace customop::ops::detail {

void paged_kv_write_cpu(const PagedKvWriteArgs& a) {
  const int64_t tokens = a.key.size(0);
  const int64_t slots = a.key_cache.size(0) * a.key_cache.size(1);
  const at::Tensor slot = a.slot_mapping.contiguous();
  const auto* s = slot.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(s[t] < slots, "paged_kv_write: slot_mapping[", t, "] = ", s[t],
                " is outside the cache, which has ", slots, " slots (", a.key_cache.size(0),
                " blocks of ", a.key_cache.size(1), "); nothing was written");
  }
  const at::Tensor k = a.key.contiguous();
  const at::Tensor v = a.value.contiguous();
  const int64_t row_bytes =
      a.key.size(1) * a.key.size(2) * static_cast<int64_t>(a.key.element_size());
  const auto* kp = static_cast<const char*>(k.const_data_ptr());
  const auto* vp = static_cast<const char*>(v.const_data_ptr());
  auto* kc = static_cast<char*>(a.key_cache.mutable_data_ptr());
  auto* vc = static_cast<char*>(a.value_cache.mutable_data_ptr());
  // Two tokens with one slot would leave the slot's contents to the order of the copies: a
  // bug in the caller's slot_mapping, refused before anything is written.
  std::vector<std::pair<int64_t, int64_t>> by_slot;  // (slot, token), slot >= 0
  by_slot.reserve(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    if (s[t] >= 0) by_slot.emplace_back(s[t], t);
  }
  std::sort(by_slot.begin(), by_slot.end());
  for (size_t i = 1; i < by_slot.size(); ++i) {
    TORCH_CHECK(by_slot[i].first != by_slot[i - 1].first, "paged_kv_write: tokens ",
                by_slot[i - 1].second, " and ", by_slot[i].second, " both map to slot ",
                by_slot[i].first,
                " (slot_mapping); each slot holds one token. Nothing was written");
  }
  // One task per ~64 KiB of copies.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row_bytes, 1));
  at::parallel_for(0, tokens, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (s[t] < 0) continue;
      std::memcpy(kc + s[t] * row_bytes, kp + t * row_bytes, static_cast<size_t>(row_bytes));
      std::memcpy(vc + s[t] * row_bytes, vp + t * row_bytes, static_cast<size_t>(row_bytes));
    }
  });
}

}  // namespace customop::ops::detail
