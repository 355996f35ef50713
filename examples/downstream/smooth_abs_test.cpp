#include "smooth_abs.h"

#include <customop/gradcheck/gtest.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using downstream::smooth_abs_op;
using downstream::SmoothAbsArgs;

at::Tensor reference(const at::Tensor& x, double eps) {
  const at::Tensor x64 = x.to(torch::kDouble);
  return torch::sqrt(x64 * x64 + eps * eps);
}

TEST(SmoothAbs, ForwardMatchesFloat64Reference) {
  torch::manual_seed(0);
  for (int64_t n : {0, 1, 255, 256, 257}) {
    const at::Tensor x = torch::randn({n});
    const at::Tensor y = smooth_abs_op()({.x = x, .eps = 0.25});
    EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), reference(x, 0.25), 1e-6, 1e-6)) << "n=" << n;
  }
}

TEST(SmoothAbs, RegisteredWithTheDispatcher) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("downstream::smooth_abs", "");
  const at::Tensor x = torch::tensor({-3.0, 0.0, 4.0}, torch::kDouble);
  const at::Tensor y = handle.typed<at::Tensor(const at::Tensor&, double)>().call(x, 0.0001);
  EXPECT_TRUE(torch::allclose(y, torch::tensor({3.0, 0.0001, 4.0}, torch::kDouble)));
}

TEST(SmoothAbs, RejectsNonPositiveEps) {
  try {
    smooth_abs_op()({.x = torch::ones({2}), .eps = 0.0});
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("smooth_abs: eps must be > 0, but got 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(SmoothAbs, GradcheckCpuFloat64) {
  torch::manual_seed(1);
  // Non-contiguous input: every other column.
  const at::Tensor x = torch::randn({4, 6}, torch::kDouble).slice(1, 0, 6, 2).requires_grad_();
  EXPECT_GRADCHECK(smooth_abs_op(), SmoothAbsArgs{.x = x, .eps = 0.5});
}

TEST(SmoothAbs, BackwardIsXOverY) {
  const at::Tensor x = torch::tensor({-2.0, 0.0, 1.5}, torch::kDouble).requires_grad_();
  smooth_abs_op()({.x = x, .eps = 1.0}).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), x.detach() / reference(x.detach(), 1.0)));
}

#ifdef DOWNSTREAM_WITH_CUDA
TEST(SmoothAbs, CudaMatchesCpuAndGradchecks) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({1025}, torch::kDouble);
  const at::Tensor y = smooth_abs_op()({.x = x.cuda(), .eps = 0.25});
  EXPECT_TRUE(torch::allclose(y.cpu(), reference(x, 0.25)));
  const at::Tensor xf = torch::randn({3, 5}, torch::kDouble).cuda().requires_grad_();
  EXPECT_GRADCHECK(smooth_abs_op(), SmoothAbsArgs{.x = xf, .eps = 0.5});
}
#else
TEST(SmoothAbs, CudaMatchesCpuAndGradchecks) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
