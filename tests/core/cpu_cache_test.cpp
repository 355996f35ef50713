// The CPU output cache (customop/cpu_cache.h): a freed block serves the next request of about
// its size, the idle limit holds, small requests and a zero limit bypass it, storage from it
// resizes and frees from any thread, and deterministic fill still fills.

#include <customop/cpu_cache.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace {

namespace cache = customop::cpu_cache;

constexpr int64_t kMiB = int64_t{1} << 20;

// Each test starts from an empty cache with a known limit and puts the old limit back.
class CpuCache : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_limit_ = cache::set_limit(64 * kMiB);
    cache::release();
  }
  void TearDown() override {
    cache::release();
    cache::set_limit(previous_limit_);
  }

 private:
  std::size_t previous_limit_ = 0;
};

// `mib` MiB of float32.
at::Tensor mib_tensor(double mib) {
  return cache::empty({static_cast<int64_t>(mib * kMiB / 4)}, at::kFloat);
}

TEST_F(CpuCache, AFreedBlockServesTheNextRequestOfItsSize) {
  const cache::Stats before = cache::stats();
  at::Tensor a = mib_tensor(4);
  const void* first = a.const_data_ptr();
  EXPECT_EQ(cache::stats().live_bytes, before.live_bytes + 4 * kMiB);
  a = at::Tensor();
  EXPECT_EQ(cache::stats().idle_bytes, static_cast<std::size_t>(4 * kMiB));
  EXPECT_EQ(cache::stats().live_bytes, before.live_bytes);
  at::Tensor b = mib_tensor(4);
  EXPECT_EQ(b.const_data_ptr(), first);
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.idle_bytes, 0u);
  EXPECT_TRUE(b.is_cpu());
  EXPECT_TRUE(b.is_contiguous());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.const_data_ptr()) % 64, 0u);
  b.fill_(2.5f);  // the memory is writable to its end
  EXPECT_EQ(b[-1].item<float>(), 2.5f);
}

TEST_F(CpuCache, ABlockUpToAnEighthLargerIsReusedAndNoLarger) {
  at::Tensor a = mib_tensor(4);
  const void* block = a.const_data_ptr();
  a = at::Tensor();
  at::Tensor near = mib_tensor(3.75);  // the 4 MiB block is 1/15 larger: reused
  EXPECT_EQ(near.const_data_ptr(), block);
  near = at::Tensor();
  at::Tensor half = mib_tensor(2);  // it would be twice the request: a new block
  EXPECT_NE(half.const_data_ptr(), block);
  EXPECT_EQ(cache::stats().idle_bytes, static_cast<std::size_t>(4 * kMiB));
}

// A loop that frees its output before the next call's takes the same block each time, not the
// other idle blocks of its size in turn: the block it wrote last is the one most likely cached.
TEST_F(CpuCache, TheMostRecentlyFreedBlockOfASizeIsTakenFirst) {
  at::Tensor a = mib_tensor(4);
  at::Tensor b = mib_tensor(4);
  const void* pa = a.const_data_ptr();
  const void* pb = b.const_data_ptr();
  a = at::Tensor();
  b = at::Tensor();  // freed last
  for (int i = 0; i < 3; ++i) {
    at::Tensor c = mib_tensor(4);
    EXPECT_EQ(c.const_data_ptr(), pb) << "call " << i;
  }
  at::Tensor c = mib_tensor(4);
  at::Tensor d = mib_tensor(4);  // the other block, once the last freed is taken
  EXPECT_EQ(c.const_data_ptr(), pb);
  EXPECT_EQ(d.const_data_ptr(), pa);
}

TEST_F(CpuCache, SmallRequestsBypassTheCache) {
  const cache::Stats before = cache::stats();
  at::Tensor small = cache::empty({1024}, at::kFloat);
  small = at::Tensor();
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.idle_bytes, 0u);
}

TEST_F(CpuCache, IdleMemoryStaysUnderTheLimitLargestFirstOut) {
  cache::set_limit(6 * kMiB);
  at::Tensor a = mib_tensor(4);
  at::Tensor b = mib_tensor(2);
  at::Tensor c = mib_tensor(3);
  a = at::Tensor();
  b = at::Tensor();
  EXPECT_EQ(cache::stats().idle_bytes, static_cast<std::size_t>(6 * kMiB));
  c = at::Tensor();  // 9 MiB would be idle: the 4 MiB block goes
  const cache::Stats s = cache::stats();
  EXPECT_EQ(s.idle_bytes, static_cast<std::size_t>(5 * kMiB));
  EXPECT_EQ(s.idle_blocks, 2u);
  at::Tensor big = mib_tensor(8);  // larger than the limit: unmapped when freed
  big = at::Tensor();
  EXPECT_EQ(cache::stats().idle_bytes, static_cast<std::size_t>(5 * kMiB));
  EXPECT_EQ(cache::set_limit(2 * kMiB), static_cast<std::size_t>(6 * kMiB));
  EXPECT_EQ(cache::stats().idle_bytes, static_cast<std::size_t>(2 * kMiB));
}

TEST_F(CpuCache, ALimitAboveInt64IsTakenAsItsMaximum) {
  cache::set_limit(SIZE_MAX);
  EXPECT_EQ(cache::stats().limit_bytes, static_cast<std::size_t>(INT64_MAX));
  EXPECT_EQ(cache::set_limit(64 * kMiB), static_cast<std::size_t>(INT64_MAX));
}

TEST_F(CpuCache, ReleaseUnmapsEveryIdleBlockAndKeepsLiveOnes) {
  at::Tensor live = mib_tensor(2);
  live.fill_(1.0f);
  at::Tensor a = mib_tensor(4);
  a = at::Tensor();
  EXPECT_EQ(cache::release(), static_cast<std::size_t>(4 * kMiB));
  EXPECT_EQ(cache::stats().idle_bytes, 0u);
  EXPECT_EQ(cache::release(), 0u);
  EXPECT_EQ(live.sum().item<double>(), static_cast<double>(live.numel()));
}

TEST_F(CpuCache, ALimitOfZeroTurnsItOff) {
  cache::set_limit(0);
  const cache::Stats before = cache::stats();
  at::Tensor a = mib_tensor(4);
  a = at::Tensor();
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.limit_bytes, 0u);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.idle_bytes, 0u);
}

TEST_F(CpuCache, StorageFromTheCacheResizesKeepingItsValues) {
  at::Tensor a = cache::empty({kMiB / 2}, at::kFloat);  // 2 MiB
  a.copy_(at::arange(a.numel(), at::kFloat));
  a.resize_({4 * kMiB});  // 16 MiB: the storage's allocator (the cache) serves it
  EXPECT_EQ(a.numel(), 4 * kMiB);
  EXPECT_TRUE(at::equal(a.narrow(0, 0, kMiB / 2), at::arange(kMiB / 2, at::kFloat)));
  EXPECT_GE(cache::stats().live_bytes, static_cast<std::size_t>(16 * kMiB));
}

TEST_F(CpuCache, StridedOutputsSpanTheirStrides) {
  at::Tensor t = cache::empty_strided({512, 1024}, {1, 1024}, at::kFloat);  // column-major, 2 MiB
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{1, 1024}));
  t.fill_(3.0f);
  EXPECT_EQ(t.sum().item<double>(), 3.0 * 512 * 1024);
}

TEST_F(CpuCache, ThreadsAllocateAndFreeConcurrently) {
  const std::size_t live_before = cache::stats().live_bytes;
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([k] {
      std::vector<at::Tensor> held;
      for (int i = 0; i < 200; ++i) {
        held.push_back(mib_tensor(1 + (i + k) % 3));
        held.back().data_ptr<float>()[0] = static_cast<float>(i);
        if (held.size() > 2) held.erase(held.begin());
      }
    });
  }
  for (auto& t : threads) t.join();
  const cache::Stats s = cache::stats();
  EXPECT_EQ(s.live_bytes, live_before);
  EXPECT_LE(s.idle_bytes, s.limit_bytes);
  EXPECT_GT(s.hits, 0);
}

TEST_F(CpuCache, DeterministicFillStillFillsWithNaN) {
  auto& ctx = at::globalContext();
  const bool was_deterministic = ctx.deterministicAlgorithms();
  const bool was_warn_only = ctx.deterministicAlgorithmsWarnOnly();
  const bool was_fill = ctx.deterministicFillUninitializedMemory();
  ctx.setDeterministicAlgorithms(true, false);
  ctx.setDeterministicFillUninitializedMemory(true);
  at::Tensor a = mib_tensor(4);
  a.fill_(1.0f);
  a = at::Tensor();
  const at::Tensor b = mib_tensor(4);
  const at::Tensor c = cache::empty_strided({512, 1024}, {1, 1024}, at::kFloat);
  ctx.setDeterministicAlgorithms(was_deterministic, was_warn_only);
  ctx.setDeterministicFillUninitializedMemory(was_fill);
  EXPECT_TRUE(b.isnan().all().item<bool>());
  EXPECT_TRUE(c.isnan().all().item<bool>());
}

}  // namespace
