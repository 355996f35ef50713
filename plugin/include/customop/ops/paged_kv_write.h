#pragma once
/// \file
/// `customop::paged_kv_write`: writes one step's keys and values into a paged KV cache, with
/// vLLM's layout (reshape_and_cache): the cache is split into blocks of `block_size` token
/// slots, and token t goes to slot slot_mapping[t] = block * block_size + offset.

#include <customop/op.h>

#include <ATen/core/Tensor.h>

namespace customop::ops {

/// Arguments of `customop::paged_kv_write(Tensor key, Tensor value, Tensor(a!) key_cache,
/// Tensor(b!) value_cache, Tensor slot_mapping) -> ()`.
struct PagedKvWriteArgs {
  /// Keys of this step, [tokens, heads, head_size] (any strides), any dtype the cache has.
  at::Tensor key;
  /// Values, key's shape, dtype and device.
  at::Tensor value;
  /// [blocks, block_size, heads, head_size], contiguous, key's dtype and device. Written at
  /// the slots slot_mapping names; every other slot keeps its contents.
  MutableTensor key_cache;
  /// key_cache's shape, dtype and device. Written as key_cache.
  MutableTensor value_cache;
  /// [tokens], int64, key's device: the cache slot of each token, in [0, blocks *
  /// block_size); a negative slot skips the token (padding).
  at::Tensor slot_mapping;
};

/// key_cache[s / block_size, s % block_size] = key[t] and the same for value, for every
/// token t with s = slot_mapping[t] >= 0. On CUDA the slot checks synchronize with the
/// device (they read slot_mapping), so a CUDA call cannot be captured in a CUDA graph (nor
/// run under torch.compile(mode="reduce-overhead")); the copies are enqueued on the current
/// stream.
/// \returns the op `customop::paged_kv_write`, registered when libcustomop_ops loads
/// \throws c10::Error naming `paged_kv_write` and the argument when shapes, dtypes or devices
///         disagree, a cache is not contiguous, a slot is >= blocks * block_size, or two tokens
///         name one slot (naming the tokens and the slot; checked before anything is
///         written: a refused call leaves both caches unchanged); c10::TypeError when slot_mapping is not int64.
/// Example:
///   using customop::ops::PagedKvWriteArgs;
///   at::Tensor kc = at::zeros({16, 8, 2, 64}), vc = at::zeros({16, 8, 2, 64});
///   at::Tensor k = at::randn({3, 2, 64}), v = at::randn({3, 2, 64});
///   customop::ops::paged_kv_write_op()(PagedKvWriteArgs{k, v, kc, vc, at::tensor({0, 9, -1})});
Op<PagedKvWriteArgs, void>& paged_kv_write_op();

}  // namespace customop::ops
