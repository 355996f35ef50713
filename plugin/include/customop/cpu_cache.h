#pragma once
// The CPU output cache: where an op's large CPU outputs get their memory, so that an op called
// again and again on tensors of one size writes into pages it has written before.
//
// Why: glibc serves an allocation of 32 MiB or more (less, by its sliding threshold) with a
// fresh mmap and unmaps it on free. Every call then pays one page fault per 4 KiB of output
// (the kernel zero-fills each page) before a byte of the result is written: a 256 MiB float32
// output costs about 65,000 faults, several times the kernel's own time (bench/RESULTS.md,
// part 3c). PyTorch's CUDA caching allocator keeps freed blocks for the same reason; this is
// its CPU counterpart for customop's outputs only (ATen's own allocations are untouched).
//
// What it does: a request of at least `kMinBytes` takes an idle block of at least its size and
// at most 1/8 larger (the smallest such; of equal ones, the most recently freed, whose lines are
// the likeliest to be cached), or maps a new one. When the tensor's storage is freed, its block
// goes back to the idle list, if it fits under the limit; to make room, the largest other idle
// blocks are unmapped first (a block larger than the limit is unmapped at once). Smaller requests,
// and every request while the limit is 0, go to c10's CPU allocator as before. Blocks are 64-byte
// aligned (mmap gives pages). torch.profiler's memory view sees a block while a tensor owns it.
//
// The limit bounds idle memory only (memory held for reuse, not owned by any tensor), per
// process (each forked DataLoader worker has its own). It is `CUSTOMOP_CPU_CACHE_BYTES` from the
// environment as the cache is first used (bytes, digits only, at most 2^63 - 1; 0 turns the
// cache off; anything else: a warning and the default), else 1 GiB or 1/16 of physical memory
// (sysconf's, not a container's limit), whichever is smaller; in ASan and TSan builds it is 0
// unless set (a reused block can be larger than its tensor, where ASan would not see a write
// past the tensor's end). ATen's own allocations do not draw on idle blocks: when one fails for
// lack of memory, release() is the caller's to call.
//
// Every function here is thread-safe. Storage from the cache can be resized (resize_ asks the
// cache again), shared (share_memory_ copies it) and freed from any thread, also after fork.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <cstdint>

namespace customop::cpu_cache {

/// Requests below this many bytes bypass the cache (glibc serves most of them from its heap,
/// whose freed memory it keeps; its mmap threshold starts at 128 KiB and rises as mapped blocks
/// are freed).
inline constexpr std::size_t kMinBytes = std::size_t{1} << 20;

/// A snapshot of the cache's counters.
struct Stats {
  std::size_t limit_bytes;  ///< the most idle memory the cache keeps, bytes (0: cache off)
  std::size_t idle_bytes;   ///< memory held for reuse, owned by no tensor, bytes
  std::size_t idle_blocks;  ///< blocks held for reuse
  std::size_t live_bytes;   ///< memory of cache blocks that tensors own now, bytes
  std::int64_t hits;        ///< requests served from an idle block since load
  std::int64_t misses;      ///< requests of kMinBytes or more that mapped a new block
};

/// An uninitialised contiguous CPU tensor whose storage comes from the cache.
/// @param sizes  the shape, each dim >= 0
/// @param dtype  any dtype
/// @returns a CPU tensor of `sizes` and `dtype`, contiguous, contents undefined
/// @throws c10::Error for a negative size; c10::OutOfMemoryError when no memory is left (after
///         unmapping every idle block)
/// Example:
///   at::Tensor y = customop::cpu_cache::empty({4096, 4096}, at::kFloat);  // 64 MiB
///   y = at::Tensor();                                // its block waits for the next call
///   at::Tensor z = customop::cpu_cache::empty({4096, 4096}, at::kFloat);  // same pages
at::Tensor empty(c10::IntArrayRef sizes, at::ScalarType dtype);

/// As empty(), with the given strides (elements); the storage spans what they address.
/// @throws c10::Error when strides and sizes differ in length or a stride is negative
at::Tensor empty_strided(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype);

/// The counters now.
Stats stats();

/// Unmaps every idle block; returns the bytes given back to the OS. Tensors keep their memory.
std::size_t release();

/// Sets the idle limit (bytes; 0 turns the cache off and releases every idle block; values
/// above 2^63 - 1 are taken as 2^63 - 1), and returns the previous one. Idle blocks over the new
/// limit are unmapped now.
std::size_t set_limit(std::size_t bytes);

}  // namespace customop::cpu_cache
