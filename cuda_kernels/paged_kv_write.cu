// Paged KV-cache write: one block per token copies its key and value rows into the cache
// slot slot_mapping[t] names (a negative slot skips the token), in 16-byte words when the
// row length and the pointers allow.

#include "cuda_kernels/paged_kv_write_params.h"

namespace customop::cuda_kernels {
namespace {

template <typename Word>
__global__ void paged_kv_write_kernel(const Word* __restrict__ key, const Word* __restrict__ value,
                                      Word* __restrict__ key_cache, Word* __restrict__ value_cache,
                                      const std::int64_t* __restrict__ slot_mapping,
                                      std::int64_t row_words) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const Word* k = key + t * row_words;
  const Word* v = value + t * row_words;
  Word* kc = key_cache + slot * row_words;
  Word* vc = value_cache + slot * row_words;
  for (std::int64_t i = threadIdx.x; i < row_words; i += blockDim.x) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

template <typename Word>
cudaError_t launch_words(const PagedKvWriteParams& p, cudaStream_t stream) {
  const std::int64_t row_words = p.row_bytes / static_cast<std::int64_t>(sizeof(Word));
  const int threads = static_cast<int>(row_words < 256 ? ((row_words + 31) / 32) * 32 : 256);
  paged_kv_write_kernel<Word><<<static_cast<unsigned>(p.tokens), threads, 0, stream>>>(
      static_cast<const Word*>(p.key), static_cast<const Word*>(p.value),
      static_cast<Word*>(p.key_cache), static_cast<Word*>(p.value_cache), p.slot_mapping,
      row_words);
  return cudaGetLastError();
}

bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t launch_paged_kv_write(const PagedKvWriteParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.row_bytes < 0) return cudaErrorInvalidValue;
  if (p.tokens == 0 || p.row_bytes == 0) return cudaSuccess;
  if (p.key == nullptr || p.value == nullptr || p.key_cache == nullptr ||
      p.value_cache == nullptr || p.slot_mapping == nullptr)
    return cudaErrorInvalidValue;
  // NB: grid.x is at most 2^31 - 1 blocks; a decode step has far fewer tokens.
  if (p.tokens > 0x7fffffff) return cudaErrorInvalidValue;
  const bool wide = p.row_bytes % 16 == 0 && aligned16(p.key) && aligned16(p.value) &&
                    aligned16(p.key_cache) && aligned16(p.value_cache);
  return wide ? launch_words<uint4>(p, stream) : launch_words<unsigned char>(p, stream);
}

}  // namespace customop::cuda_kernels
