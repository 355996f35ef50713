// The non-temporal store choice of the CPU kernels (plugin/ops/cpu/stream_choice.h): the fixed
// rule, the adaptive band's warm-up, exploration bursts, windows and switch when the costs
// change, and an op whose outputs stay the same whichever store a call gets.

#include "cpu/stream_choice.h"

#include <customop/ops/rms_norm.h>

#include "support/tensor_assertions.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace {

using customop::ops::RmsNormArgs;
using customop::ops::cpu::StreamChoice;
using customop::testing::tensors_close;

constexpr int64_t kT = int64_t{16} << 20;

// Runs `calls` calls of `footprint` bytes; a streamed call costs stream_cost ns per byte, a
// plain one store_cost. Returns how many streamed.
int run_calls(StreamChoice& choice, int64_t footprint, int calls, double stream_cost,
              double store_cost, std::vector<bool>* decisions = nullptr) {
  int streamed = 0;
  for (int i = 0; i < calls; ++i) {
    const StreamChoice::Call call = choice.choose(footprint);
    streamed += call.stream ? 1 : 0;
    if (decisions != nullptr) decisions->push_back(call.stream);
    choice.record(call, footprint,
                  static_cast<double>(footprint) * (call.stream ? stream_cost : store_cost));
  }
  return streamed;
}

TEST(StreamChoice, FixedRuleStreamsPastTheThresholdOnly) {
  StreamChoice fixed({kT, false});
  EXPECT_FALSE(fixed.choose(kT).stream);
  EXPECT_TRUE(fixed.choose(kT + 1).stream);
  EXPECT_TRUE(fixed.choose(100 * kT).stream);
  EXPECT_FALSE(fixed.choose(100 * kT).record);
  StreamChoice always({0, false});
  EXPECT_TRUE(always.choose(1).stream);
  EXPECT_FALSE(always.choose(0).stream);  // nothing to store (or in place)
}

TEST(StreamChoice, AdaptiveBandOnlyBetweenTheThresholdAndEightTimesIt) {
  StreamChoice choice({kT, true});
  EXPECT_FALSE(choice.choose(kT).stream);
  EXPECT_FALSE(choice.choose(kT).record);
  EXPECT_TRUE(choice.choose(8 * kT + 1).stream);
  EXPECT_FALSE(choice.choose(8 * kT + 1).record);
  EXPECT_EQ(choice.choose(kT + 1).bucket, 0);
  EXPECT_EQ(choice.choose(2 * kT).bucket, 0);
  EXPECT_EQ(choice.choose(2 * kT + 1).bucket, 1);
  EXPECT_EQ(choice.choose(8 * kT).bucket, 2);
  EXPECT_FALSE(choice.choose(-1).stream);
}

TEST(StreamChoice, WarmUpRunsABurstOfEachAndMeasuresItsLastCalls) {
  StreamChoice choice({kT, true});
  constexpr uint32_t kBurst = StreamChoice::kBurst;
  for (uint32_t i = 0; i < 2 * kBurst; ++i) {
    const auto call = choice.choose(3 * kT);
    const uint32_t position = i % kBurst;
    EXPECT_EQ(call.stream, i >= kBurst) << "call " << i;
    EXPECT_EQ(call.record, position >= StreamChoice::kSettle) << "call " << i;
    EXPECT_EQ(call.closes, position == kBurst - 1) << "call " << i;
  }
}

TEST(StreamChoice, KeepsTheCheaperChoiceAndExploresTheOtherOncePerPeriod) {
  StreamChoice choice({kT, true});
  const int64_t fp = 3 * kT;
  run_calls(choice, fp, 2 * StreamChoice::kBurst, 1.0, 2.0);  // warm-up
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.0);
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.0);
  std::vector<bool> d;
  const int periods = 3;
  const int streamed = run_calls(choice, fp, periods * StreamChoice::kPeriod, 1.0, 2.0, &d);
  EXPECT_EQ(streamed, periods * static_cast<int>(StreamChoice::kPeriod - StreamChoice::kBurst));
  for (uint32_t i = 0; i < d.size(); ++i) {
    ASSERT_EQ(d[i], i % StreamChoice::kPeriod < StreamChoice::kPeriod - StreamChoice::kBurst)
        << "call " << i;
  }
}

TEST(StreamChoice, SwitchesWithinTwoPeriodsWhenTheMachineChanges) {
  StreamChoice choice({kT, true});
  const int64_t fp = 5 * kT;
  run_calls(choice, fp, 2 * StreamChoice::kBurst + 4 * StreamChoice::kPeriod, 1.0, 2.0);
  // Now plain stores are the cheaper: after two periods every call but the bursts stores.
  run_calls(choice, fp, 2 * StreamChoice::kPeriod, 3.0, 2.0);
  const int streamed = run_calls(choice, fp, StreamChoice::kPeriod, 3.0, 2.0);
  EXPECT_EQ(streamed, static_cast<int>(StreamChoice::kBurst));  // the burst keeps measuring
  EXPECT_LT(choice.cost(2, false), choice.cost(2, true));
}

TEST(StreamChoice, AWindowSamplesItsLeastCallSoASpikeDoesNotCount) {
  StreamChoice choice({kT, true});
  const int64_t fp = 3 * kT;
  int recorded = 0;
  for (uint32_t i = 0; i < 2 * StreamChoice::kBurst; ++i) {
    const auto call = choice.choose(fp);
    // The other tenants' spike: the first measured call of each window takes 10x.
    const double per_byte = (call.record && recorded++ % StreamChoice::kWindow == 0) ? 10.0 : 1.0;
    choice.record(call, fp, static_cast<double>(fp) * per_byte * (call.stream ? 1.0 : 2.0));
  }
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.0);
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.0);
}

TEST(StreamChoice, BucketsKeepTheirOwnStatistics) {
  StreamChoice choice({kT, true});
  const int calls = 2 * StreamChoice::kBurst + 2 * StreamChoice::kPeriod;
  run_calls(choice, kT + 1, calls, 2.0, 1.0);  // bucket 0: plain stores win
  run_calls(choice, 7 * kT, calls, 1.0, 2.0);  // bucket 2: streaming wins
  EXPECT_EQ(run_calls(choice, kT + 1, StreamChoice::kPeriod, 2.0, 1.0),
            static_cast<int>(StreamChoice::kBurst));
  EXPECT_EQ(run_calls(choice, 7 * kT, StreamChoice::kPeriod, 1.0, 2.0),
            static_cast<int>(StreamChoice::kPeriod - StreamChoice::kBurst));
}

TEST(StreamChoice, ConcurrentCallsKeepFiniteCosts) {
  StreamChoice choice({kT, true});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] { run_calls(choice, 3 * kT, 2000, 1.0, 2.0); });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(choice.cost(1, true), 0.99);
  EXPECT_LT(choice.cost(1, true), 1.01);
  EXPECT_GT(choice.cost(1, false), 1.99);
  EXPECT_LT(choice.cost(1, false), 2.01);
}

// rms_norm in the adaptive band: its warm-up runs both stores (a burst each), and every call's
// output is the same, bit for bit.
TEST(StreamChoiceOps, RmsNormOutputsAreTheSameWhicheverStoreACallGets) {
  const StreamChoice::Rule rule = customop::ops::cpu::stream_rule();
  if (!rule.adaptive || rule.threshold > (int64_t{32} << 20)) {
    GTEST_SKIP() << "no adaptive band of a testable size (CUSTOMOP_CPU_STREAM_BYTES set, or a "
                    "last-level cache above 64 MiB)";
  }
  // A footprint (x read + y written) of 2.5 thresholds: bucket 1.
  const int64_t cols = 1024;
  const int64_t rows = (rule.threshold * 5 / 4) / (cols * 4);
  torch::manual_seed(7);
  const auto x = torch::randn({rows, cols});
  const auto w = torch::randn({cols});
  auto& op = customop::ops::rms_norm_op();
  const auto first = op(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6});
  const auto expected = x * torch::rsqrt(x.square().mean(-1, true) + 1e-6) * w;
  EXPECT_TRUE(tensors_close(first, expected, {1e-5, 1e-5}));
  for (uint32_t i = 0; i < 2 * StreamChoice::kBurst; ++i) {
    // NB: torch::equal, not tensors_equal: 2.6 M elements, 32 times.
    EXPECT_TRUE(torch::equal(op(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6}), first))
        << "call " << i + 1;
  }
}

}  // namespace
