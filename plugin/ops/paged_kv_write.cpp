// customop::paged_kv_write: schema, shape function (its checks), samples, registration. An op
// that writes two of its arguments (the caches) and returns nothing.

#include "detail/paged_kv_write.h"
#include "detail/checks.h"
#include "detail/samples.h"

#include <ATen/ops/tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace customop::ops {

namespace detail {

void check_paged_kv_write(const PagedKvWriteArgs& a) {
  constexpr const char* kOp = "paged_kv_write";
  check_same_device(kOp, "value", a.value, "key", a.key);
  check_same_device(kOp, "key_cache", a.key_cache, "key", a.key);
  check_same_device(kOp, "value_cache", a.value_cache, "key", a.key);
  check_same_device(kOp, "slot_mapping", a.slot_mapping, "key", a.key);
  check_same_dtype(kOp, "value", a.value, "key", a.key);
  check_same_dtype(kOp, "key_cache", a.key_cache, "key", a.key);
  check_same_dtype(kOp, "value_cache", a.value_cache, "key", a.key);
  TORCH_CHECK_TYPE(a.slot_mapping.scalar_type() == at::kLong, kOp,
                   ": slot_mapping must be int64, but got ",
                   dtype_name(a.slot_mapping.scalar_type()));
  TORCH_CHECK(a.key.dim() == 3, kOp, ": key must be [tokens, heads, head_size], but got ",
              a.key.sym_sizes());
  TORCH_CHECK(a.value.sym_sizes() == a.key.sym_sizes(), kOp, ": value must have key's shape ",
              a.key.sym_sizes(), ", but got ", a.value.sym_sizes());
  TORCH_CHECK(a.key_cache.dim() == 4, kOp,
              ": key_cache must be [blocks, block_size, heads, head_size], but got ",
              a.key_cache.sym_sizes());
  TORCH_CHECK(a.value_cache.sym_sizes() == a.key_cache.sym_sizes(), kOp,
              ": value_cache must have key_cache's shape ", a.key_cache.sym_sizes(), ", but got ",
              a.value_cache.sym_sizes());
  TORCH_SYM_CHECK(a.key_cache.sym_size(2)
                      .sym_eq(a.key.sym_size(1))
                      .sym_and(a.key_cache.sym_size(3).sym_eq(a.key.sym_size(2))),
                  "paged_kv_write: key_cache must be [blocks, block_size, heads, head_size] with "
                  "key's heads and head_size (",
                  a.key.sym_size(1), ", ", a.key.sym_size(2), "), but got ",
                  a.key_cache.sym_sizes());
  TORCH_CHECK(a.slot_mapping.dim() == 1, kOp, ": slot_mapping must be [tokens], but got ",
              a.slot_mapping.sym_sizes());
  TORCH_SYM_CHECK(a.slot_mapping.sym_size(0).sym_eq(a.key.sym_size(0)),
                  "paged_kv_write: slot_mapping must be [tokens] = [", a.key.sym_size(0),
                  "], but got ", a.slot_mapping.sym_sizes());
  TORCH_CHECK(a.key_cache.is_contiguous() && a.value_cache.is_contiguous(), kOp,
              ": key_cache and value_cache must be contiguous (the paged layout), but got strides ",
              a.key_cache.sym_strides(), " and ", a.value_cache.sym_strides());
}

}  // namespace detail

namespace {

// Caches of 3 blocks x 4 slots, 2 heads x 5; the slots skip one token (-1) and leave most of
// the cache unwritten, so the mutation audit sees a write confined to the named slots.
std::vector<std::pair<std::string, PagedKvWriteArgs>> paged_kv_write_samples(c10::Device dev,
                                                                             c10::ScalarType dt) {
  using detail::sample_randn;
  const auto slots = [&](std::vector<int64_t> s) {
    return at::tensor(s, at::TensorOptions().dtype(at::kLong)).to(dev);
  };
  return {
      {"4 tokens into [3, 4, 2, 5] caches, one skipped",
       {sample_randn({4, 2, 5}, 1, dev, dt), sample_randn({4, 2, 5}, 2, dev, dt),
        sample_randn({3, 4, 2, 5}, 3, dev, dt), sample_randn({3, 4, 2, 5}, 4, dev, dt),
        slots({7, -1, 0, 11})}},
      {"transposed key and value [3, 2, 5]",
       {sample_randn({5, 2, 3}, 5, dev, dt).permute({2, 1, 0}),
        sample_randn({5, 2, 3}, 6, dev, dt).permute({2, 1, 0}),
        sample_randn({3, 4, 2, 5}, 7, dev, dt), sample_randn({3, 4, 2, 5}, 8, dev, dt),
        slots({2, 5, 9})}},
  };
}

}  // namespace

Op<PagedKvWriteArgs, void>& paged_kv_write_op() {
  static Op<PagedKvWriteArgs, void>& op = []() -> Op<PagedKvWriteArgs, void>& {
    auto& o = define<PagedKvWriteArgs, void>(
        "customop::paged_kv_write(Tensor key, Tensor value, Tensor(a!) key_cache, "
        "Tensor(b!) value_cache, Tensor slot_mapping) -> ()");
    o.impl(c10::DeviceType::CPU, &detail::paged_kv_write_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::paged_kv_write_cuda);
#endif
    // The shape function of an op that returns nothing: its checks, run by the fake kernel and
    // before every device's kernel (not the slot range: it reads data; the kernels check it).
    o.shape(&detail::check_paged_kv_write);
    // Under vmap: one call per example into its own caches (a cache shared by the batch is
    // refused: the examples' writes would collide).
    o.vmap(customop::BatchRule::loop());
    o.samples(&paged_kv_write_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& paged_kv_write_registered = paged_kv_write_op();
}  // namespace

}  // namespace customop::ops
