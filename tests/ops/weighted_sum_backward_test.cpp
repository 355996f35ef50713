// customop::weighted_sum_backward: its kernels against ATen's grad * w_k, bit for bit (every
// dtype; K from 1 to many; sizes around a vector, a block and a chunk; strides; 0-d and empty),
// errors; weighted_sum's backward running through it. Its
// own backward and JVP by finite differences on its samples: as every registered op's,
// registered_ops_gradcheck_test.cpp.

#include <customop/ops/weighted_sum.h>
#include <customop/ops/weighted_sum_backward.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/op_calls.h"
#include "support/tensor_assertions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using customop::ops::WeightedSumArgs;
using customop::ops::WeightedSumBackwardArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::OpCalls;
using customop::testing::tensors_equal;
using ::testing::HasSubstr;

// The op's K outputs, stacked (to compare in one assertion).
at::Tensor sum_backward(const at::Tensor& g, const std::vector<double>& w) {
  const std::vector<at::Tensor> out =
      customop::ops::weighted_sum_backward_op()(WeightedSumBackwardArgs{.grad = g, .weights = w});
  EXPECT_EQ(out.size(), w.size());
  for (const auto& t : out) {
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.sizes(), g.sizes());
  }
  return at::stack(out);
}

// ATen's grad * w_k, stacked: what weighted_sum's backward gave before the op.
at::Tensor reference(const at::Tensor& g, const std::vector<double>& w) {
  std::vector<at::Tensor> grads;
  for (double wk : w) grads.push_back(g * wk);
  return at::stack(grads);
}

class WeightedSumBackwardDevice : public DeviceTest {};

TEST_P(WeightedSumBackwardDevice, EqualsGradTimesEachWeight) {
  torch::manual_seed(101);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> weights = {
      {0.1}, {0.5, -2.0}, {1.0 / 3.0, 0.0, -7.25, 1e-3, 3.0}};
  for (int64_t n : {1, 7, 16, 33, 4095, 4097, 100003}) {
    for (const auto& w : weights) {
      SCOPED_TRACE("numel " + std::to_string(n) + ", K " + std::to_string(w.size()));
      auto g = at::randn({n}, p().options());
      if (n >= 7) g.slice(0, 0, 4).copy_(at::tensor({inf, -inf, std::nan(""), -0.0}, at::kDouble));
      const auto got = sum_backward(g, w);
      EXPECT_EQ(got.scalar_type(), p().dtype);
      EXPECT_TRUE(tensors_equal(got, reference(g, w)));
    }
  }
}

TEST_P(WeightedSumBackwardDevice, ManyWeights) {
  torch::manual_seed(102);
  std::vector<double> w(300);
  for (size_t k = 0; k < w.size(); ++k) w[k] = 0.01 * static_cast<double>(k) - 1.0;
  const auto g = at::randn({3, 1000}, p().options());
  EXPECT_TRUE(tensors_equal(sum_backward(g, w), reference(g, w)));
}

TEST_P(WeightedSumBackwardDevice, StridedZeroDimAndEmptyGrads) {
  torch::manual_seed(103);
  const auto g = at::randn({60, 40}, p().options()).t().slice(0, 0, 40, 2);
  EXPECT_TRUE(tensors_equal(sum_backward(g, {0.5, 1.5}), reference(g.contiguous(), {0.5, 1.5})));
  const auto zero_d = sum_backward(at::full({}, 2.0, p().options()), {3.0, -1.0});
  EXPECT_EQ(zero_d.sizes(), at::IntArrayRef({2}));
  EXPECT_TRUE(tensors_equal(zero_d, at::tensor({6.0, -2.0}, at::kDouble).to(p().options())));
  EXPECT_EQ(sum_backward(at::empty({0, 3}, p().options()), {1.0, 2.0}).sizes(),
            at::IntArrayRef({2, 0, 3}));
}

TEST_P(WeightedSumBackwardDevice, BadArgumentsAreRefusedByName) {
  const auto g = at::randn({4}, p().options());
  EXPECT_THAT(error_message([&] { sum_backward(g, {}); }),
              HasSubstr("weighted_sum_backward: weights must hold at least one weight"));
  EXPECT_THAT(error_message([&] { sum_backward(at::ones({4}, at::kInt), {1.0}); }),
              HasSubstr("weighted_sum_backward"));
}

INSTANTIATE_TEST_SUITE_P(Cpu, WeightedSumBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, WeightedSumBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

// weighted_sum's backward is this op, once per backward.
TEST(WeightedSumBackward, WeightedSumBackwardRunsThroughTheOp) {
  const OpCalls calls("customop::weighted_sum_backward");
  std::vector<at::Tensor> xs;
  for (int k = 0; k < 3; ++k) xs.push_back(at::randn({5, 6}).requires_grad_());
  const std::vector<double> w{0.5, -1.0, 2.0};
  const auto y = customop::ops::weighted_sum_op()(WeightedSumArgs{.inputs = xs, .weights = w});
  const auto g = at::randn({5, 6});
  const auto grads = torch::autograd::grad({y}, xs, {g});
  EXPECT_EQ(calls.count(), 1);
  for (size_t k = 0; k < xs.size(); ++k) {
    EXPECT_TRUE(tensors_equal(grads[k], g * w[k]));
    EXPECT_TRUE(grads[k].is_contiguous());
  }
}

// Second order through the op: the grads of the grads (the op's own backward, weighted_sum of
// the K cotangents) equal ATen's.
TEST(WeightedSumBackward, DoubleBackwardMatchesATen) {
  const auto g = at::randn({4, 3}, at::kDouble).requires_grad_();
  const std::vector<double> w{0.25, -3.0};
  const std::vector<at::Tensor> c{at::randn({4, 3}, at::kDouble), at::randn({4, 3}, at::kDouble)};
  const std::vector<at::Tensor> out =
      customop::ops::weighted_sum_backward_op()(WeightedSumBackwardArgs{.grad = g, .weights = w});
  const auto ours = torch::autograd::grad(out, {g}, c)[0];
  const auto want = torch::autograd::grad({g * w[0], g * w[1]}, {g}, c)[0];
  EXPECT_TRUE(at::allclose(ours, want, 1e-12, 1e-12));
  // Only the second output in the graph (the first one's cotangent a zero): its term alone.
  const std::vector<at::Tensor> out2 =
      customop::ops::weighted_sum_backward_op()(WeightedSumBackwardArgs{.grad = g, .weights = w});
  const auto one = torch::autograd::grad({out2[1]}, {g}, {c[1]})[0];
  EXPECT_TRUE(at::allclose(one, c[1] * w[1], 1e-12, 1e-12));
}

}  // namespace
