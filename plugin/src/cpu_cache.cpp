// The CPU output cache (customop/cpu_cache.h): a c10::Allocator that keeps freed blocks of
// kMinBytes or more mapped for the next request of about their size, and the dispatcher ops
// that let Python read and empty it (customop_registry::cpu_cache_stats, ::cpu_cache_release).

#include <customop/cpu_cache.h>

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

// GCC says so by macro, clang by __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CUSTOMOP_CPU_CACHE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CUSTOMOP_CPU_CACHE_SANITIZED 1
#endif
#endif
#ifndef CUSTOMOP_CPU_CACHE_SANITIZED
#define CUSTOMOP_CPU_CACHE_SANITIZED 0
#endif

namespace customop::cpu_cache {
namespace {

constexpr std::size_t kDefaultLimitCap = std::size_t{1} << 30;

struct Block {
  void* base;
  std::size_t bytes;  // the mapping's length, a multiple of the page size
};

std::size_t page_size() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// The most a limit can be: what stats() reports as a non-negative int64.
constexpr std::size_t kMaxLimit = static_cast<std::size_t>(INT64_MAX);

// CUSTOMOP_CPU_CACHE_BYTES, else min(1 GiB, physical memory / 16) (0 in sanitizer builds). A value
// that is not a whole number of bytes up to 2^63 - 1 (digits only: no sign, no spaces) is refused
// with a warning (the default stays) rather than guessed at.
std::size_t initial_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  std::size_t limit = kDefaultLimitCap;
#if CUSTOMOP_CPU_CACHE_SANITIZED
  // NB: a reused block can be larger than its tensor, where ASan would not see a write past the
  // end; sanitizer builds start with the cache off (the cache's own tests turn it on).
  limit = 0;
#endif
  if (pages > 0) {
    limit = std::min(limit, static_cast<std::size_t>(pages) * page_size() / 16);
  }
  const char* env = std::getenv("CUSTOMOP_CPU_CACHE_BYTES");
  if (env == nullptr || *env == '\0') return limit;
  bool digits = true;
  for (const char* c = env; *c != '\0'; ++c) digits = digits && *c >= '0' && *c <= '9';
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(env, &end, 10) : 0;
  if (!digits || errno != 0 || v > kMaxLimit) {
    TORCH_WARN("customop: CUSTOMOP_CPU_CACHE_BYTES must be a whole number of bytes, at most ",
               kMaxLimit, " (digits only; 0 turns the CPU output cache off), but got '", env,
               "'; using the default, ", limit, " bytes");
    return limit;
  }
  return static_cast<std::size_t>(v);
}

class BlockCache final : public c10::Allocator {
 public:
  BlockCache() : limit_(initial_limit()) {
    // A fork while another thread holds the lock would leave the child's copy locked forever.
    pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                   [] { instance().mutex_.unlock(); });
  }

  // Never destroyed: tensors freed during static destruction still give their blocks back.
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache();
    return *cache;
  }

  c10::DataPtr allocate(std::size_t n) override {
    // NB: no lock on this path: small outputs from every thread go straight through.
    if (n < kMinBytes || limit_.load(std::memory_order_relaxed) == 0) {
      return c10::GetCPUAllocator()->allocate(n);
    }
    Block* block = take(round_up(n));
    report(block, static_cast<int64_t>(block->bytes));
    return {block->base, block, &give_back, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {limit_, idle_bytes_, idle_.size(), live_bytes_, hits_, misses_};
  }

  std::size_t release() {
    std::vector<Block*> freed;
    std::size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes = idle_bytes_;
      evict_locked(0, freed);
    }
    unmap(freed);
    return bytes;
  }

  std::size_t set_limit(std::size_t bytes) {
    std::vector<Block*> freed;
    std::size_t previous = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      previous = limit_;
      limit_ = std::min(bytes, kMaxLimit);
      evict_locked(limit_, freed);
    }
    unmap(freed);
    return previous;
  }

 private:
  static std::size_t round_up(std::size_t n) {
    const std::size_t page = page_size();
    TORCH_CHECK_WITH(OutOfMemoryError, n <= SIZE_MAX - page,
                     "customop: CPU out of memory: cannot allocate ", n, " bytes");
    return (n + page - 1) / page * page;
  }

  // An idle block of [bytes, bytes + bytes / 8] (the smallest; of those, the last freed), else
  // a new mapping.
  Block* take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = idle_.lower_bound(bytes);
      if (it != idle_.end() && it->first - bytes <= bytes / 8) {
        Block* block = it->second;
        idle_.erase(it);
        idle_bytes_ -= block->bytes;
        live_bytes_ += block->bytes;
        ++hits_;
        return block;
      }
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      release();  // what the other sizes hold may be what this one needs
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, base != MAP_FAILED, "customop: CPU out of memory: mmap of ",
                     bytes, " bytes for an op output failed (", std::strerror(errno), ")");
    std::lock_guard<std::mutex> lock(mutex_);
    live_bytes_ += bytes;
    ++misses_;
    return new Block{base, bytes};
  }

  // torch.profiler's memory view (profile_memory=True): a block is allocated while a tensor
  // owns it, as c10's CPU allocator reports its memory.
  void report(const Block* block, int64_t delta) {
    if (!c10::memoryProfilingEnabled()) return;
    std::size_t live = 0, held = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live = live_bytes_;
      held = live_bytes_ + idle_bytes_;
    }
    c10::reportMemoryUsageToProfiler(block->base, delta, live, held,
                                     c10::Device(c10::DeviceType::CPU));
  }

  static void give_back(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    BlockCache& cache = instance();
    cache.report(block, -static_cast<int64_t>(block->bytes));
    std::vector<Block*> freed;
    {
      std::lock_guard<std::mutex> lock(cache.mutex_);
      cache.live_bytes_ -= block->bytes;
      if (block->bytes > cache.limit_) {
        freed.push_back(block);
      } else {
        cache.evict_locked(cache.limit_ - block->bytes, freed);
        // NB: first among the blocks of its size, so take() hands out the most recently freed
        // one (last in, first out): its lines are the likeliest to be in cache still. First in,
        // first out would cycle a loop's outputs through every idle block of their size (two
        // 16 MiB blocks for one 16 MiB output: a 32 MiB working set, the whole L3 here).
        cache.idle_.emplace_hint(cache.idle_.lower_bound(block->bytes), block->bytes, block);
        cache.idle_bytes_ += block->bytes;
      }
    }
    unmap(freed);
  }

  // Takes the largest idle blocks out (of one size, the longest idle first) until at most `keep`
  // bytes stay idle.
  void evict_locked(std::size_t keep, std::vector<Block*>& freed) {
    while (idle_bytes_ > keep && !idle_.empty()) {
      auto last = std::prev(idle_.end());
      idle_bytes_ -= last->second->bytes;
      freed.push_back(last->second);
      idle_.erase(last);
    }
  }

  // Outside the lock: munmap of a large block takes milliseconds.
  static void unmap(const std::vector<Block*>& blocks) {
    for (Block* b : blocks) {
      munmap(b->base, b->bytes);
      delete b;
    }
  }

  std::mutex mutex_;
  std::atomic<std::size_t> limit_;           // written under mutex_; read without it by allocate()
  std::multimap<std::size_t, Block*> idle_;  // by size
  std::size_t idle_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  std::int64_t hits_ = 0;
  std::int64_t misses_ = 0;
};

constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

std::vector<int64_t> stats_list() {
  const Stats s = stats();
  return {static_cast<int64_t>(s.limit_bytes),
          static_cast<int64_t>(s.idle_bytes),
          static_cast<int64_t>(s.idle_blocks),
          static_cast<int64_t>(s.live_bytes),
          s.hits,
          s.misses};
}

int64_t release_op() { return static_cast<int64_t>(release()); }

int64_t set_limit_op(int64_t bytes) {
  TORCH_CHECK_VALUE(bytes >= 0,
                    "customop_registry::cpu_cache_set_limit: bytes must be >= 0 (0 "
                    "turns the CPU output cache off), but got ",
                    bytes);
  return static_cast<int64_t>(set_limit(static_cast<std::size_t>(bytes)));
}

TORCH_LIBRARY_FRAGMENT(customop_registry, m) {
  m.def("cpu_cache_stats() -> int[]", &stats_list);
  m.def("cpu_cache_release() -> int", &release_op);
  m.def("cpu_cache_set_limit(int bytes) -> int", &set_limit_op);
}

// torch.use_deterministic_algorithms(True) with fill_uninitialized_memory: at::empty fills new
// tensors with NaN (or the integer maximum); there the cache steps aside so that stays true.
bool deterministic_fill() {
  const auto& ctx = at::globalContext();
  return ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

}  // namespace

at::Tensor empty(c10::IntArrayRef sizes, at::ScalarType dtype) {
  if (deterministic_fill()) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  return at::detail::empty_generic(sizes, &BlockCache::instance(), kCpuKeys, dtype,
                                   c10::MemoryFormat::Contiguous);
}

at::Tensor empty_strided(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype) {
  if (deterministic_fill()) {
    return at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype));
  }
  return at::detail::empty_strided_generic(sizes, strides, &BlockCache::instance(), kCpuKeys,
                                           dtype);
}

Stats stats() { return BlockCache::instance().stats(); }

std::size_t release() { return BlockCache::instance().release(); }

std::size_t set_limit(std::size_t bytes) { return BlockCache::instance().set_limit(bytes); }

}  // namespace customop::cpu_cache
