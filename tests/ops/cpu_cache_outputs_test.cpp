// The built-in ops take their CPU outputs from the CPU output cache (customop/cpu_cache.h): an
// op's output, once freed, is the memory of the next call's (the shape-function path and
// weighted_sum_backward's own), the values stay right, and with the cache off nothing is kept.

#include <customop/cpu_cache.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum_backward.h>

#include "support/tensor_assertions.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace {

namespace cache = customop::cpu_cache;
using customop::ops::RmsNormArgs;
using customop::ops::WeightedSumBackwardArgs;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;

class CpuCacheOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_limit_ = cache::set_limit(std::size_t{256} << 20);
    cache::release();
  }
  void TearDown() override { cache::set_limit(previous_limit_); }

 private:
  std::size_t previous_limit_ = 0;
};

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) {
  return customop::ops::rms_norm_op()(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6});
}

TEST_F(CpuCacheOutputs, AShapeFunctionOpReusesItsFreedOutput) {
  const at::Tensor x = at::randn({1024, 1024});  // 4 MiB
  const at::Tensor w = at::randn({1024});
  const at::Tensor expected = x * at::rsqrt(x.square().mean(-1, true) + 1e-6) * w;
  at::Tensor y = rms_norm(x, w);
  const void* first = y.const_data_ptr();
  EXPECT_TRUE(tensors_close(y, expected, {1e-5, 1e-5}));
  const cache::Stats before = cache::stats();
  y = at::Tensor();
  EXPECT_EQ(cache::stats().idle_bytes, before.idle_bytes + (std::size_t{4} << 20));
  at::Tensor again = rms_norm(x, w);
  EXPECT_EQ(again.const_data_ptr(), first);
  EXPECT_EQ(cache::stats().hits, before.hits + 1);
  EXPECT_TRUE(tensors_close(again, expected, {1e-5, 1e-5}));
}

TEST_F(CpuCacheOutputs, WeightedSumBackwardTakesItsKOutputsFromTheCache) {
  const at::Tensor g = at::randn({512, 1024});  // 2 MiB
  const cache::Stats before = cache::stats();
  std::vector<at::Tensor> out = customop::ops::weighted_sum_backward_op()(
      WeightedSumBackwardArgs{.grad = g, .weights = {0.5, -2.0}});
  EXPECT_EQ(cache::stats().live_bytes, before.live_bytes + (std::size_t{4} << 20));
  EXPECT_TRUE(tensors_equal(out[0], g * 0.5));
  EXPECT_TRUE(tensors_equal(out[1], g * -2.0));
  out.clear();
  EXPECT_EQ(cache::stats().idle_bytes, before.idle_bytes + (std::size_t{4} << 20));
}

TEST_F(CpuCacheOutputs, WithTheCacheOffOutputsAreFreedAsBefore) {
  cache::set_limit(0);
  const at::Tensor x = at::randn({1024, 1024});
  const cache::Stats before = cache::stats();
  at::Tensor y = rms_norm(x, at::ones({1024}));
  y = at::Tensor();
  const cache::Stats after = cache::stats();
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.idle_bytes, 0u);
}

}  // namespace
