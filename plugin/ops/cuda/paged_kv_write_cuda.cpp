// CUDA glue of customop::paged_kv_write: checks (the slot checks read slot_mapping, so they
// synchronize with the device), launch of cuda_kernels::launch_paged_kv_write on the current
// stream of key's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/paged_kv_write_params.h"
#include "detail/paged_kv_write.h"

#include <ATen/TensorOperators.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/any.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/sort.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void paged_kv_write_cuda(const PagedKvWriteArgs& a) {
  const c10::cuda::CUDAGuard guard(a.key.device());
  const int64_t tokens = a.key.size(0);
  if (tokens == 0) return;
  const int64_t slots = a.key_cache.size(0) * a.key_cache.size(1);
  const at::Tensor slot = a.slot_mapping.contiguous();
  const at::Tensor outside = slot >= slots;
  if (outside.any().item<bool>()) {
    const int64_t t = outside.to(at::kInt).argmax().item<int64_t>();
    TORCH_CHECK(false, "paged_kv_write: slot_mapping[", t, "] = ", slot[t].item<int64_t>(),
                " is outside the cache, which has ", slots, " slots (", a.key_cache.size(0),
                " blocks of ", a.key_cache.size(1), "); nothing was written");
  }
  if (tokens > 1) {
    const auto [sorted, order] = slot.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
    const at::Tensor lo = sorted.slice(0, 0, tokens - 1);
    const at::Tensor hi = sorted.slice(0, 1, tokens);
    const at::Tensor twice = (lo == hi) & (lo >= 0);
    if (twice.any().item<bool>()) {
      const int64_t i = twice.to(at::kInt).argmax().item<int64_t>();
      TORCH_CHECK(false, "paged_kv_write: tokens ", order[i].item<int64_t>(), " and ",
                  order[i + 1].item<int64_t>(), " both map to slot ", sorted[i].item<int64_t>(),
                  " (slot_mapping); each slot holds one token. Nothing was written");
    }
  }
  if (slots == 0) return;  // every slot was negative (checked above): nothing to write
  const at::Tensor k = a.key.contiguous();
  const at::Tensor v = a.value.contiguous();
  cuda_kernels::PagedKvWriteParams p;
  p.key = k.const_data_ptr();
  p.value = v.const_data_ptr();
  p.key_cache = a.key_cache.mutable_data_ptr();
  p.value_cache = a.value_cache.mutable_data_ptr();
  p.slot_mapping = slot.const_data_ptr<int64_t>();
  p.tokens = tokens;
  p.row_bytes = a.key.size(1) * a.key.size(2) * static_cast<int64_t>(a.key.element_size());
  check_launch("paged_kv_write",
               cuda_kernels::launch_paged_kv_write(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
