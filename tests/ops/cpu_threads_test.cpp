// The built-in CPU kernels run on ATen's intra-op threads. Their at::parallel_for is a header
// template that, in a torch built with OpenMP, splits work only where the calling file is
// compiled with OpenMP (cmake/torch.cmake: customop::torch_parallel); without it every kernel
// ran on the calling thread, at half the speed of the ATen composites on two cores.
// Observable: OpenMP starts its worker threads at the first parallel region. Each case runs
// one op, on inputs made without any ATen kernel (from_blob), in a process that has no other
// thread yet (ctest runs each case alone), and asserts that the process has more threads
// afterwards.

#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace ops = customop::ops;

constexpr int64_t kThreadRows = 256, kThreadCols = 4096;  // 1 Mi elements: 32 of ATen's grain sizes

/// Threads of this process (Linux: /proc/self/task), or -1 where that is not readable.
int64_t threads_of_process() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  if (ec) return -1;
  int64_t n = 0;
  for (const auto& entry : it) {
    (void)entry;
    ++n;
  }
  return n;
}

/// A [rows, cols] float32 tensor over `storage`, filled without an ATen kernel.
at::Tensor filled_blob(std::vector<float>& storage, int64_t rows, int64_t cols) {
  storage.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < storage.size(); ++i) {
    storage[i] = static_cast<float>(static_cast<int64_t>(i % 97) - 48) / 16.0F;
  }
  return at::from_blob(storage.data(), {rows, cols}, at::kFloat);
}

struct ThreadedOp {
  std::string name;
  std::function<void(const at::Tensor& x, const at::Tensor& row)> run;
};

std::vector<ThreadedOp> threaded_ops() {
  return {
      {"rms_norm",
       [](const at::Tensor& x, const at::Tensor& w) {
         ops::rms_norm_op()(ops::RmsNormArgs{x, w, 1e-6});
       }},
      {"bias_gelu",
       [](const at::Tensor& x, const at::Tensor& b) {
         ops::bias_gelu_op()(ops::BiasGeluArgs{x, b, "none"});
       }},
      {"clamp_count",
       [](const at::Tensor& x, const at::Tensor&) {
         ops::clamp_count_op()(ops::ClampCountArgs{x, -0.5, 0.5});
       }},
      {"masked_softmax",
       [](const at::Tensor& x, const at::Tensor&) {
         ops::masked_softmax_op()(ops::MaskedSoftmaxArgs{x, std::nullopt, -1});
       }},
      {"max_along",
       [](const at::Tensor& x, const at::Tensor&) {
         ops::max_along_op()(ops::MaxAlongArgs{x, -1, false});
       }},
      {"weighted_sum",
       [](const at::Tensor& x, const at::Tensor&) {
         ops::weighted_sum_op()(ops::WeightedSumArgs{{x, x}, {0.5, 2.0}});
       }},
  };
}

class CpuKernelThreads : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuKernelThreads, RunsOnAtenIntraOpThreads) {
#if !defined(CUSTOMOP_INTRA_OP_PARALLEL)
  GTEST_SKIP() << "this build's CPU kernels run on one thread (cmake/torch.cmake: "
                  "CUSTOMOP_TORCH_PARALLEL=serial)";
#endif
  const int64_t before = threads_of_process();
  if (before < 0) GTEST_SKIP() << "/proc/self/task is not readable here";
  if (before > 1) {
    GTEST_SKIP() << "the process has " << before
                 << " threads already: run this case alone (ctest does)";
  }
  at::set_num_threads(2);
  const ThreadedOp c = threaded_ops().at(GetParam());
  SCOPED_TRACE(c.name);
  c10::InferenceMode guard;
  std::vector<float> xs, ws;
  const at::Tensor x = filled_blob(xs, kThreadRows, kThreadCols);
  const at::Tensor w = filled_blob(ws, 1, kThreadCols).view({kThreadCols});
  c.run(x, w);
  EXPECT_GT(threads_of_process(), before)
      << c.name << "'s CPU kernel started no intra-op thread: at::parallel_for ran serially";
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuKernelThreads, ::testing::Range<size_t>(0, 6),
                         [](const auto& info) { return threaded_ops().at(info.param).name; });

}  // namespace
