// Memory: what a long training job relies on. The saved state of an op (tensor and non-tensor
// fields) lives exactly as long as its autograd graph: freed when the graph is, whether or not
// backward ran, and after a graph the user kept alive is dropped. Resident memory stays flat
// over 100k forward + backward iterations, and over the gradcheck library looping on cases.
// Liveness is counted (a counter in the saved state, weak references to saved tensors), not
// timed. The RSS bounds need an allocator that returns memory (skipped under ASan, whose
// quarantine holds freed blocks on purpose; LeakSanitizer checks that build instead).

#include "support/gradcheck_samples.h"

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>
#include <customop/ops/rms_norm.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CUSTOMOP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUSTOMOP_TEST_ASAN 1
#endif
#endif

namespace {

/// Counts the live instances; one sits in every saved state.
struct LiveToken {
  static std::atomic<int> live;
  LiveToken() { ++live; }
  ~LiveToken() { --live; }
  LiveToken(const LiveToken&) = delete;
  LiveToken& operator=(const LiveToken&) = delete;
};
std::atomic<int> LiveToken::live{0};

struct ScaleArgs {
  at::Tensor x;
  at::Tensor w;
  double alpha;
};

// Tensor fields (an input, and a tensor made in save_for_backward that nothing else holds)
// and non-tensor fields (a number, a vector, a shared object).
struct ScaleSaved {
  at::Tensor w;
  at::Tensor x_times_two;
  double alpha;
  std::vector<int64_t> sizes;
  std::shared_ptr<LiveToken> token;
};

struct ScaleGrads {
  at::Tensor x;
  at::Tensor w;
};

// The last tensor made in save_for_backward, weakly: expired once the saved state drops it.
using WeakTensorImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
std::optional<WeakTensorImpl> last_saved_tensor;

bool saved_tensor_alive() { return last_saved_tensor.has_value() && !last_saved_tensor->expired(); }

// y = alpha * x * w; grads: alpha * g * w, alpha * g * x (x recovered from x_times_two).
customop::Op<ScaleArgs>& scale_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o =
        customop::define<ScaleArgs>("robust_mem::scale(Tensor x, Tensor w, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.w * a.alpha; });
    o.impl_autograd(
        [](const ScaleArgs& a, const at::Tensor&) {
          at::Tensor x2 = a.x * 2;
          last_saved_tensor.emplace(x2.getIntrusivePtr());
          return ScaleSaved{a.w, x2, a.alpha, a.x.sizes().vec(), std::make_shared<LiveToken>()};
        },
        [](const ScaleSaved& s, const at::Tensor& g) {
          return ScaleGrads{g * s.w * s.alpha, g * (s.x_times_two / 2) * s.alpha};
        });
    return o;
  }();
  return op;
}

at::Tensor call_scale(const at::Tensor& x, const at::Tensor& w) {
  return scale_op()(ScaleArgs{x, w, 0.5});
}

/// Resident set size of this process in bytes (/proc/self/statm), 0 where unavailable.
int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

TEST(SavedState, IsFreedWhenBackwardHasRunAndTheGraphIsDropped) {
  const at::Tensor x = at::randn({3, 4}, at::kDouble).requires_grad_();
  const at::Tensor w = at::randn({3, 4}, at::kDouble).requires_grad_();
  ASSERT_EQ(LiveToken::live, 0);
  {
    at::Tensor y = call_scale(x, w);
    EXPECT_EQ(LiveToken::live, 1);
    EXPECT_TRUE(saved_tensor_alive());
    y.sum().backward();
    // NB: backward without retain_graph frees the saved tensors at once; the non-tensor
    // state lives with the graph node until the graph is dropped.
    EXPECT_FALSE(saved_tensor_alive());
  }
  EXPECT_EQ(LiveToken::live, 0);
  EXPECT_TRUE(x.grad().defined());
}

TEST(SavedState, IsFreedWhenAGraphWithoutBackwardIsDropped) {
  const at::Tensor x = at::randn({5}, at::kDouble).requires_grad_();
  const at::Tensor w = at::randn({5}, at::kDouble);
  std::vector<at::Tensor> kept;
  for (int i = 0; i < 10; ++i) kept.push_back(call_scale(x, w));  // graphs the user holds
  EXPECT_EQ(LiveToken::live, 10);
  EXPECT_TRUE(saved_tensor_alive());
  kept.clear();
  EXPECT_EQ(LiveToken::live, 0);
  EXPECT_FALSE(saved_tensor_alive());
}

TEST(SavedState, IsFreedAfterBackwardWithRetainGraphAndADeepGraph) {
  const at::Tensor x = at::randn({4}, at::kDouble).requires_grad_();
  const at::Tensor w = at::randn({4}, at::kDouble);
  {
    at::Tensor h = x;
    for (int i = 0; i < 50; ++i) h = call_scale(h, w);  // a chain of 50 nodes
    EXPECT_EQ(LiveToken::live, 50);
    auto g1 = torch::autograd::grad({h.sum()}, {x}, {}, /*retain_graph=*/true);
    auto g2 = torch::autograd::grad({h.sum()}, {x}, {}, /*retain_graph=*/false);
    EXPECT_TRUE(at::allclose(g1[0], g2[0]));
    EXPECT_EQ(LiveToken::live, 50);  // the graph is still referenced by h
  }
  EXPECT_EQ(LiveToken::live, 0);
}

TEST(SavedState, IsNeverMadeWithoutGrad) {
  const at::Tensor x = at::randn({4}, at::kDouble);
  const at::Tensor w = at::randn({4}, at::kDouble);
  at::Tensor y = call_scale(x, w);  // nothing requires grad
  EXPECT_EQ(LiveToken::live, 0);
  {
    at::NoGradGuard no_grad;
    y = call_scale(x.clone().requires_grad_(), w);
  }
  EXPECT_EQ(LiveToken::live, 0);
}

constexpr int64_t kRssBoundBytes = int64_t{8} << 20;  // 8 MiB

TEST(Rss, StaysFlatOver100kForwardBackwardIterations) {
#ifdef CUSTOMOP_TEST_ASAN
  constexpr int kIterations = 2'000;  // ASan: liveness only (LSan reports leaks at exit)
#else
  constexpr int kIterations = 100'000;
#endif
  const at::Tensor w = at::randn({16, 16}, at::kDouble);
  auto step = [&] {
    at::Tensor x = at::randn({16, 16}, at::kDouble).requires_grad_();
    call_scale(x, w).sum().backward();
    return x.grad().defined();
  };
  for (int i = 0; i < 1'000; ++i) ASSERT_TRUE(step());  // warm-up: caches, allocator arenas
  const int64_t before = rss_bytes();
  for (int i = 0; i < kIterations; ++i) ASSERT_TRUE(step());
  const int64_t after = rss_bytes();
  EXPECT_EQ(LiveToken::live, 0);
  std::printf(
      "rss: %d forward+backward iterations: %.1f MiB -> %.1f MiB (%+.2f MiB; bound %.0f MiB)\n",
      kIterations, before / 1048576.0, after / 1048576.0, (after - before) / 1048576.0,
      kRssBoundBytes / 1048576.0);
#ifdef CUSTOMOP_TEST_ASAN
  GTEST_SKIP() << "RSS bound not checked under ASan (its quarantine keeps freed memory)";
#else
  ASSERT_GT(before, 0) << "/proc/self/statm unreadable";
  EXPECT_LT(after - before, kRssBoundBytes);
#endif
}

TEST(Rss, StaysFlatWhileTheGradcheckLibraryLoopsOverCases) {
#ifdef CUSTOMOP_TEST_ASAN
  constexpr int kRuns = 20;
#else
  constexpr int kRuns = 2'000;
#endif
  const auto& op = customop::ops::rms_norm_op();
  auto samples = op.samples(c10::Device(c10::kCPU), at::kDouble);
  ASSERT_FALSE(samples.empty());
  auto run = [&](int i) {
    const auto& s = samples[static_cast<size_t>(i) % samples.size()];
    const auto r = customop::gradcheck::gradcheck(static_cast<const customop::OpCore&>(op),
                                                  customop::testing::requiring_grad(s.args));
    return r.passed;
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(run(i));
  const int64_t before = rss_bytes();
  for (int i = 0; i < kRuns; ++i) ASSERT_TRUE(run(i)) << "run " << i;
  const int64_t after = rss_bytes();
  std::printf(
      "rss: %d gradcheck runs of customop::rms_norm: %.1f MiB -> %.1f MiB (%+.2f MiB; bound %.0f "
      "MiB)\n",
      kRuns, before / 1048576.0, after / 1048576.0, (after - before) / 1048576.0,
      kRssBoundBytes / 1048576.0);
#ifdef CUSTOMOP_TEST_ASAN
  GTEST_SKIP() << "RSS bound not checked under ASan (its quarantine keeps freed memory)";
#else
  EXPECT_LT(after - before, kRssBoundBytes);
#endif
}

}  // namespace
