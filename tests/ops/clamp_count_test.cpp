#include <customop/ops/clamp_count.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

namespace {

using customop::ops::ClampCountArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_equal;
using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The op, with the 0-dim count read back as an int.
std::tuple<at::Tensor, int64_t> clamp_count(const at::Tensor& x, double lo, double hi) {
  auto [y, count] =
      customop::ops::clamp_count_op()(ClampCountArgs{.input = x, .min = lo, .max = hi});
  return {y, count.item<int64_t>()};
}

// torch.clamp(x, min, max) and ((x < min) | (x > max)).sum(), on the same data.
::testing::AssertionResult matches_reference(const at::Tensor& x, double lo, double hi) {
  const auto [y, count] = clamp_count(x, lo, hi);
  if (!y.is_contiguous()) return ::testing::AssertionFailure() << "output is not contiguous";
  const auto xc = x.cpu();
  auto r = tensors_equal(y.cpu(), at::clamp(xc, lo, hi));
  if (!r) return r << " (output)";
  const int64_t expected = ((xc < lo) | (xc > hi)).sum().item<int64_t>();
  if (count != expected) {
    return ::testing::AssertionFailure() << "clamped " << count << ", expected " << expected;
  }
  return ::testing::AssertionSuccess();
}

class ClampCountDevice : public DeviceTest {};

TEST_P(ClampCountDevice, ForwardMatchesTorchClamp) {
  const uint64_t seed = 61;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 1023, 1024, 1025, 100003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = at::randn({n}, p().options());
    EXPECT_TRUE(matches_reference(x, -0.5, 0.7));
    EXPECT_TRUE(matches_reference(x, 0.0, 0.0));
    EXPECT_TRUE(matches_reference(x.view({1, n}), -10.0, 10.0));
  }
}

TEST_P(ClampCountDevice, BoundsNaNAndInfinities) {
  const double inf = std::numeric_limits<double>::infinity();
  // 0.1 is not a float32: the bounds round to the dtype as in torch.clamp.
  const auto x = at::tensor({kNaN, -inf, inf, 0.1, -0.1, 0.2, 1.0}, at::kDouble).to(p().options());
  EXPECT_TRUE(matches_reference(x, -0.1, 0.1));
  const auto [y, count] = clamp_count(x, -0.1, 0.1);
  EXPECT_TRUE(std::isnan(y[0].item<double>()));
  EXPECT_EQ(count, 4);  // -inf, inf, 0.2, 1.0
  EXPECT_TRUE(matches_reference(x, -inf, inf));
}

TEST_P(ClampCountDevice, StridedInputsMatchContiguous) {
  torch::manual_seed(62);
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", at::randn({33, 6}, p().options()).t()},
      {"sliced", at::randn({4, 66}, p().options()).slice(1, 0, 66, 2)},
      {"expanded (stride 0)", at::randn({1, 33}, p().options()).expand({5, 33})},
  };
  for (const auto& [label, x] : inputs) {
    SCOPED_TRACE(label);
    const auto [y, count] = clamp_count(x, -0.3, 0.4);
    const auto [yc, countc] = clamp_count(x.contiguous(), -0.3, 0.4);
    EXPECT_TRUE(tensors_equal(y, yc));
    EXPECT_EQ(count, countc);
    EXPECT_TRUE(matches_reference(x, -0.3, 0.4));
  }
}

TEST_P(ClampCountDevice, ZeroDimAndEmptyInputs) {
  EXPECT_TRUE(matches_reference(at::scalar_tensor(3.0, p().options()), -1.0, 1.0));
  EXPECT_TRUE(matches_reference(at::scalar_tensor(0.5, p().options()), -1.0, 1.0));
  const auto [y, count] = clamp_count(at::empty({0, 3}, p().options()), -1.0, 1.0);
  EXPECT_EQ(y.sizes(), at::IntArrayRef({0, 3}));
  EXPECT_EQ(count, 0);
}

TEST_P(ClampCountDevice, BackwardPassesTheGradInsideTheBoundsIncluded) {
  torch::manual_seed(63);
  // Include the bounds themselves: the gradient passes there (torch.clamp's convention up to
  // torch 2.14; 2.15 gives 0 at a scalar bound, so the reference is the mask, not at::clamp).
  const auto base = at::randn({6, 9}, p().options());
  base[0][0].fill_(-0.5);
  base[1][1].fill_(0.75);
  base[2][2].fill_(kNaN);
  const auto x = base.t();
  const auto g = at::randn({9, 6}, p().options());
  const auto ours = customop::testing::vjp(
      [](const auto& in) { return std::get<0>(clamp_count(in[0], -0.5, 0.75)); }, {x}, g);
  const auto inside = (x >= -0.5).logical_and(x <= 0.75);  // NaN: false
  EXPECT_TRUE(tensors_equal(ours[0], at::where(inside, g, at::zeros_like(g))));
  EXPECT_EQ(ours[0][0][0].item<double>(), g[0][0].item<double>());
}

TEST_P(ClampCountDevice, CountIsANonDifferentiable0DimInt64TensorOnInputsDevice) {
  const auto x = at::randn({10}, p().options()).requires_grad_();
  const auto [y, count] =
      customop::ops::clamp_count_op()(ClampCountArgs{.input = x, .min = -0.5, .max = 0.5});
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(count.dim(), 0);
  EXPECT_EQ(count.scalar_type(), at::kLong);
  EXPECT_EQ(count.device(), x.device());
  EXPECT_FALSE(count.requires_grad());
  EXPECT_EQ(count.item<int64_t>(), ((x < -0.5) | (x > 0.5)).sum().item<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(Cpu, ClampCountDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, ClampCountDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(ClampCount, SchemaReturnsTheOutputAndTheCountAsTensors) {
  const auto& op = customop::ops::clamp_count_op();
  ASSERT_EQ(op.schema().returns().size(), 2u);
  EXPECT_EQ(op.schema().returns()[1].name(), "clamped");
  EXPECT_EQ(op.schema().returns()[1].type()->kind(), c10::TypeKind::TensorType);
  ASSERT_TRUE(op.output_differentiability().has_value());
  EXPECT_EQ(*op.output_differentiability(), (std::vector<bool>{true, false}));
}

TEST(ClampCount, SamplesStayAwayFromTheBounds) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::clamp_count_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto x = s.args[0].toTensor();
      const double lo = s.args[1].toDouble();
      const double hi = s.args[2].toDouble();
      EXPECT_GT((x - lo).abs().min().item<double>(), 0.05);
      EXPECT_GT((x - hi).abs().min().item<double>(), 0.05);
      EXPECT_TRUE(matches_reference(x, lo, hi));
    }
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(ClampCountErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] { clamp_count(at::ones({3}, at::kLong), 0.0, 1.0); }),
      HasSubstr("clamp_count: input must be float16, bfloat16, float32 or float64, but got int64"));
}

TEST(ClampCountErrors, MinAboveMax) {
  EXPECT_THAT(
      error_message([] { clamp_count(at::ones({3}), 2.0, 1.0); }),
      HasSubstr("clamp_count: min must be <= max (and neither NaN), but got min = 2 and max = 1"));
  EXPECT_THAT(
      error_message([] { clamp_count(at::ones({3}), kNaN, 1.0); }),
      HasSubstr(
          "clamp_count: min must be <= max (and neither NaN), but got min = nan and max = 1"));
}

}  // namespace
