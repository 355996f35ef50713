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
#include <utility>
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

// Lengths of the runs of equal decisions, in order.
std::vector<std::pair<bool, int>> runs_of(const std::vector<bool>& d) {
  std::vector<std::pair<bool, int>> runs;
  for (const bool v : d) {
    if (runs.empty() || runs.back().first != v) runs.emplace_back(v, 0);
    ++runs.back().second;
  }
  return runs;
}

TEST(StreamChoice, KeepsTheCheaperChoiceAndExploresTheOtherLessOftenWhileItStays) {
  StreamChoice choice({kT, true});
  const int64_t fp = 3 * kT;
  run_calls(choice, fp, 2 * StreamChoice::kBurst, 1.0, 2.0);  // warm-up
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.0);
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.0);
  std::vector<bool> d;
  run_calls(choice, fp, 16000, 1.0, 2.0, &d);
  // Periods of 256, 512, ..., 4096 calls, each ending with a burst of 16 plain-store calls.
  const auto burst = static_cast<int>(StreamChoice::kBurst);
  const std::vector<std::pair<bool, int>> expected = {
      {true, 256 - burst},  {false, burst}, {true, 512 - burst},  {false, burst},
      {true, 1024 - burst}, {false, burst}, {true, 2048 - burst}, {false, burst},
      {true, 4096 - burst}, {false, burst}, {true, 4096 - burst}, {false, burst}};
  const auto runs = runs_of(d);
  ASSERT_GE(runs.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(runs[i], expected[i]) << "run " << i;
  }
}

TEST(StreamChoice, SwitchesWithinALongPeriodWhenTheMachineChangesAndExploresSoonAfter) {
  StreamChoice choice({kT, true});
  const int64_t fp = 5 * kT;
  run_calls(choice, fp, 20000, 1.0, 2.0);  // periods at their longest
  // Now plain stores are the cheaper: the faster choice's next window sees it.
  std::vector<bool> d;
  run_calls(choice, fp, 3 * StreamChoice::kMaxPeriod, 4.0, 2.0, &d);
  const auto runs = runs_of(d);
  size_t i = 0;
  int at = 0;
  while (i < runs.size() && (runs[i].first || runs[i].second < 64)) at += runs[i++].second;
  ASSERT_LT(i, runs.size()) << "never settled on plain stores";
  EXPECT_LE(at, static_cast<int>(StreamChoice::kMaxPeriod + StreamChoice::kBurst));
  // A change resets the period: the next burst of streaming comes within kPeriod calls.
  EXPECT_LE(runs[i].second, static_cast<int>(StreamChoice::kPeriod));
  ASSERT_LT(i + 1, runs.size());
  EXPECT_EQ(runs[i + 1], std::make_pair(true, static_cast<int>(StreamChoice::kBurst)));
  EXPECT_LT(choice.cost(2, false), choice.cost(2, true));
}

TEST(StreamChoice, AWindowSamplesItsLeastCallSoSpikesDoNotCount) {
  StreamChoice choice({kT, true});
  const int64_t fp = 3 * kT;
  int measured = 0;
  for (uint32_t i = 0; i < 2 * StreamChoice::kBurst; ++i) {
    const auto call = choice.choose(fp);
    // The other tenants' spikes: every measured call of a window but its fourth takes 10x
    // (the first and the closing one included).
    double per_byte = 1.0;
    if (call.record) per_byte = measured++ % StreamChoice::kWindow == 3 ? 1.0 : 10.0;
    choice.record(call, fp, static_cast<double>(fp) * per_byte * (call.stream ? 1.0 : 2.0));
  }
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.0);
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.0);
}

TEST(StreamChoice, MeasuresTheWindowBeforeABurstAndTheBurstsSettledCallsOnly) {
  StreamChoice choice({kT, true});
  const int64_t fp = 3 * kT;
  run_calls(choice, fp, 2 * StreamChoice::kBurst, 1.0, 2.0);  // warm-up: streaming is faster
  // The first period: its burst (plain stores) starts at call kPeriod - kBurst.
  const uint64_t burst = StreamChoice::kPeriod - StreamChoice::kBurst;
  for (uint64_t i = 0; i < StreamChoice::kPeriod; ++i) {
    const auto call = choice.choose(fp);
    const bool in_burst = i >= burst;
    const uint64_t at = in_burst ? i - burst : 0;
    EXPECT_EQ(call.stream, !in_burst) << "call " << i;
    const bool before = !in_burst && i + StreamChoice::kWindow >= burst;
    const bool settled = in_burst && at >= StreamChoice::kSettle;
    EXPECT_EQ(call.record, before || settled) << "call " << i;
    EXPECT_EQ(call.closes, i == burst - 1 || i == StreamChoice::kPeriod - 1) << "call " << i;
    // The burst's first kSettle calls meet the cache as streaming left it: 10x dearer here,
    // and not counted. Streaming now costs 1.5: its window before the burst sees it.
    double per_byte = call.stream ? 1.5 : 3.0;
    if (in_burst && !settled) per_byte = 30.0;
    choice.record(call, fp, static_cast<double>(fp) * per_byte);
  }
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.25);  // 1.0 and 1.5, weighted by kWeight = 0.5
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.5);  // 2.0 and 3.0
}

TEST(StreamChoice, BucketsKeepTheirOwnStatistics) {
  StreamChoice choice({kT, true});
  const int calls = 2 * StreamChoice::kBurst + StreamChoice::kPeriod;  // warm-up + one period
  run_calls(choice, kT + 1, calls, 2.0, 1.0);                          // bucket 0: plain stores win
  run_calls(choice, 7 * kT, calls, 1.0, 2.0);                          // bucket 2: streaming wins
  // The next periods (512 calls): a burst of the other choice at their end.
  EXPECT_EQ(run_calls(choice, kT + 1, 2 * StreamChoice::kPeriod, 2.0, 1.0),
            static_cast<int>(StreamChoice::kBurst));
  EXPECT_EQ(run_calls(choice, 7 * kT, 2 * StreamChoice::kPeriod, 1.0, 2.0),
            static_cast<int>(2 * StreamChoice::kPeriod - StreamChoice::kBurst));
}

TEST(StreamChoice, ConcurrentCallsKeepTheFasterChoiceAndStillExplore) {
  StreamChoice choice({kT, true});
  constexpr int kThreads = 4, kCalls = 2000;
  std::vector<int> streamed(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { streamed[t] = run_calls(choice, 3 * kT, kCalls, 1.0, 2.0); });
  }
  for (auto& t : threads) t.join();
  int total = 0;
  for (const int s : streamed) total += s;
  // Plain stores: the warm-up's 16 and a burst per period (256, 512, ...): about 100 of 8000.
  EXPECT_GT(total, kThreads * kCalls * 95 / 100);
  EXPECT_DOUBLE_EQ(choice.cost(1, true), 1.0);
  EXPECT_DOUBLE_EQ(choice.cost(1, false), 2.0);
  // Exploration goes on: a burst of plain stores within the longest period.
  std::vector<bool> d;
  run_calls(choice, 3 * kT, StreamChoice::kMaxPeriod + StreamChoice::kBurst, 1.0, 2.0, &d);
  bool burst_seen = false;
  for (const auto& run : runs_of(d)) {
    burst_seen = burst_seen || (!run.first && run.second == static_cast<int>(StreamChoice::kBurst));
  }
  EXPECT_TRUE(burst_seen);
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
    // NB: torch::equal, not tensors_equal: millions of elements, 32 times.
    EXPECT_TRUE(torch::equal(op(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6}), first))
        << "call " << i + 1;
  }
}

}  // namespace
