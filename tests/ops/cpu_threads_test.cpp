// The built-in CPU kernels run on ATen's intra-op threads. Their at::parallel_for is a header
// template that, in a torch built with OpenMP, splits work only where the calling file is
// compiled with OpenMP (cmake/torch.cmake: customop::torch_parallel); without it every kernel
// ran on the calling thread, at half the speed of the ATen composites on two cores.
// Observable: OpenMP starts its worker threads at the first parallel region. Each case sets
// ATen's thread count (which may start torch's other pool), then counts the process's threads,
// runs one op on inputs made without any ATen kernel (from_blob) and counts again: a kernel on
// ATen's threads adds some. The count needs a process with no OpenMP pool yet, so each case
// runs in a fresh copy of this test binary (posix_spawn of /proc/self/exe with a gtest filter
// for that case alone), whatever ran before it in this process (ctest batches several cases per
// process). The control: the same op on an input below one grain starts none first.

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
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

extern char** environ;  // NOLINT: POSIX

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

constexpr const char* kChildEnv = "CUSTOMOP_THREADS_TEST_CHILD";

/// Runs this test binary again with `filter` as its gtest filter and kChildEnv set; returns its
/// exit status (-1 when it could not run or died of a signal).
int run_in_fresh_process(const std::string& filter) {
  std::string exe(4096, '\0');
  const ssize_t len = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (len <= 0) return -1;
  exe.resize(static_cast<size_t>(len));
  std::string filter_arg = "--gtest_filter=" + filter;
  std::vector<char*> argv{exe.data(), filter_arg.data(), nullptr};
  std::vector<std::string> env_strings{std::string(kChildEnv) + "=1"};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_P(CpuKernelThreads, RunsOnAtenIntraOpThreads) {
#if !defined(CUSTOMOP_INTRA_OP_PARALLEL)
  GTEST_SKIP() << "this build's CPU kernels run on one thread (cmake/torch.cmake: "
                  "CUSTOMOP_TORCH_PARALLEL=serial)";
#endif
  if (threads_of_process() < 0) GTEST_SKIP() << "/proc/self/task is not readable here";
  if (std::getenv(kChildEnv) == nullptr) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string self = std::string(info->test_suite_name()) + "." + info->name();
    EXPECT_EQ(run_in_fresh_process(self), 0)
        << "the case failed in a fresh process (its output is above)";
    return;
  }
  at::set_num_threads(2);
  const ThreadedOp c = threaded_ops().at(GetParam());
  SCOPED_TRACE(c.name);
  c10::InferenceMode guard;
  std::vector<float> xs, ws, small, small_w;
  const at::Tensor x = filled_blob(xs, kThreadRows, kThreadCols);
  const at::Tensor w = filled_blob(ws, 1, kThreadCols).view({kThreadCols});
  const at::Tensor x_small = filled_blob(small, 2, 64);
  const at::Tensor w_small = filled_blob(small_w, 1, 64).view({64});
  const int64_t before = threads_of_process();
  c.run(x_small, w_small);
  ASSERT_EQ(threads_of_process(), before)
      << "the thread count rose without a parallel region: the count cannot tell";
  c.run(x, w);
  EXPECT_GT(threads_of_process(), before)
      << c.name << "'s CPU kernel started no intra-op thread: at::parallel_for ran serially";
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuKernelThreads, ::testing::Range<size_t>(0, 6),
                         [](const auto& info) { return threaded_ops().at(info.param).name; });

}  // namespace
