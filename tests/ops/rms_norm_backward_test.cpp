// customop::rms_norm_backward: its kernels against the float64 grads, strides, determinism,
// errors; rms_norm's backward running through it (and the ATen formula under grad mode); its
// double backward to third order. Finite differences on its samples: as every registered op's,
// registered_ops_gradcheck_test.cpp.

#include <customop/ops/rms_norm.h>
#include <customop/ops/rms_norm_backward.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/op_calls.h"
#include "support/tensor_assertions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using customop::ops::RmsNormArgs;
using customop::ops::RmsNormBackwardArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::OpCalls;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

constexpr double kRmsEps = 1e-6;

std::tuple<at::Tensor, at::Tensor> rms_backward(const at::Tensor& g, const at::Tensor& x,
                                                const at::Tensor& w, double eps = kRmsEps) {
  return customop::ops::rms_norm_backward_op()(
      RmsNormBackwardArgs{.grad = g, .input = x, .weight = w, .eps = eps});
}

at::Tensor rms_norm_fwd(const at::Tensor& x, const at::Tensor& w) {
  return customop::ops::rms_norm_op()(RmsNormArgs{.input = x, .weight = w, .eps = kRmsEps});
}

/// The grads of x * rsqrt(mean(x^2) + eps) * w in float64, by autograd.
std::tuple<at::Tensor, at::Tensor> expected_rms_grads(const at::Tensor& g, const at::Tensor& x,
                                                      const at::Tensor& w) {
  const auto xd = x.to(at::kDouble).cpu().requires_grad_();
  const auto wd = w.to(at::kDouble).cpu().requires_grad_();
  const auto y = xd * at::rsqrt(xd.square().mean(-1, true) + kRmsEps) * wd;
  const auto grads = torch::autograd::grad({y}, {xd, wd}, {g.to(at::kDouble).cpu()});
  return {grads[0], grads[1]};
}

class RmsNormBackwardDevice : public DeviceTest {};

// Rows over threads: many short rows, a few long ones, 3-d, 1-d; D not a multiple of a vector.
TEST_P(RmsNormBackwardDevice, MatchesTheFloat64Grads) {
  torch::manual_seed(71);
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{4099, 37}, {3, 20001}, {2, 5, 64}, {17}, {7, 1025}}) {
    SCOPED_TRACE("shape " + c10::str(at::IntArrayRef(shape)));
    const auto x = at::randn(shape, p().options()) * 3;
    const auto w = at::randn({shape.back()}, p().options());
    const auto g = at::randn(shape, p().options());
    const auto [gi, gw] = rms_backward(g, x, w);
    const auto [ei, ew] = expected_rms_grads(g, x, w);
    EXPECT_EQ(gi.scalar_type(), p().dtype);
    EXPECT_EQ(gw.scalar_type(), p().dtype);
    auto tol = tolerance_for(p().dtype);
    tol.atol *= 4;  // r^3 mean(g w x) x: a few roundings more than one element's
    EXPECT_TRUE(tensors_close(gi, ei, tol)) << "grad_input";
    tol.atol *= std::sqrt(static_cast<double>(x.numel() / shape.back()));  // a sum of rows
    EXPECT_TRUE(tensors_close(gw, ew, tol)) << "grad_weight";
  }
}

TEST_P(RmsNormBackwardDevice, DeterministicAndStrideIndependent) {
  torch::manual_seed(72);
  const auto x = at::randn({65, 300}, p().options()).t();
  const auto g = at::randn({300, 65}, p().options());
  const auto w = at::randn({130}, p().options()).slice(0, 0, 130, 2);
  const auto [gi, gw] = rms_backward(g, x, w);
  const auto [gi2, gw2] = rms_backward(g, x, w);
  EXPECT_TRUE(tensors_equal(gi, gi2));
  EXPECT_TRUE(tensors_equal(gw, gw2));
  const auto [gic, gwc] = rms_backward(g.contiguous(), x.contiguous(), w.contiguous());
  EXPECT_TRUE(tensors_equal(gi, gic));
  EXPECT_TRUE(tensors_equal(gw, gwc));
}

TEST_P(RmsNormBackwardDevice, EmptyInputs) {
  const auto w = at::randn({16}, p().options());
  const auto e = at::empty({0, 16}, p().options());
  const auto [gi, gw] = rms_backward(e, e, w);
  EXPECT_EQ(gi.sizes(), at::IntArrayRef({0, 16}));
  EXPECT_TRUE(tensors_equal(gw, at::zeros({16}, p().options())));  // a sum over no rows
}

TEST_P(RmsNormBackwardDevice, BadArgumentsAreRefusedByName) {
  const auto x = at::randn({2, 4}, p().options());
  const auto w = at::randn({4}, p().options());
  EXPECT_THAT(error_message([&] {
                rms_backward(at::randn({4, 2}, p().options()), x, w);
              }),
              HasSubstr("rms_norm_backward: grad must have input's shape [2, 4], but got [4, 2]"));
  EXPECT_THAT(error_message([&] { rms_backward(x, x, at::randn({3}, p().options())); }),
              HasSubstr("rms_norm_backward: weight must have shape [D] = [4], but got [3]"));
  EXPECT_THAT(error_message([&] { rms_backward(x, x, w, -1.0); }),
              HasSubstr("rms_norm_backward: eps must be >= 0, but got -1"));
}

INSTANTIATE_TEST_SUITE_P(Cpu, RmsNormBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, RmsNormBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

// The ordinary backward runs the op once; create_graph=True runs the ATen formula, whose graph
// gives the second derivatives (checked against float64).
TEST(RmsNormBackward, RmsNormBackwardRunsThroughTheOpWithoutGradMode) {
  const auto x = at::randn({8, 16}, at::kDouble).requires_grad_();
  const auto w = at::randn({16}, at::kDouble).requires_grad_();
  const auto g = at::randn({8, 16}, at::kDouble);
  {
    const OpCalls calls("customop::rms_norm_backward");
    const auto grads = torch::autograd::grad({rms_norm_fwd(x, w)}, {x, w}, {g});
    EXPECT_EQ(calls.count(), 1);
    const auto [ei, ew] = expected_rms_grads(g, x.detach(), w.detach());
    EXPECT_TRUE(tensors_close(grads[0], ei, tolerance_for(at::kDouble)));
    EXPECT_TRUE(tensors_close(grads[1], ew, tolerance_for(at::kDouble)));
  }
  {
    const OpCalls calls("customop::rms_norm_backward");
    const auto grads = torch::autograd::grad({rms_norm_fwd(x, w)}, {x, w}, {g},
                                             /*retain_graph=*/true, /*create_graph=*/true);
    EXPECT_EQ(calls.count(), 0);
    EXPECT_TRUE(grads[0].requires_grad());
  }
}

// Double backward through the op differentiates the ATen formula; a graph upstream of the op's
// inputs is kept, so the third order is right too (against autograd of the plain formula).
TEST(RmsNormBackward, DoubleBackwardKeepsTheGraphForTheThirdOrder) {
  torch::manual_seed(73);
  const auto x = at::randn({3, 5}, at::kDouble).requires_grad_();
  const auto w = at::randn({5}, at::kDouble).requires_grad_();
  const auto g = at::randn({3, 5}, at::kDouble).requires_grad_();
  const auto c = at::randn({3, 5}, at::kDouble);
  const auto third = [&](bool ours) {
    at::Tensor gi;
    if (ours) {
      gi = std::get<0>(rms_backward(g, x, w));
    } else {
      const auto y = x * at::rsqrt(x.square().mean(-1, true) + kRmsEps) * w;
      gi = torch::autograd::grad({y}, {x}, {g}, true, true)[0];
    }
    const auto d2 = torch::autograd::grad({gi}, {x}, {c}, true, true)[0];  // second order
    return torch::autograd::grad({d2.square().sum()}, {x, w, g})[0];       // third order
  };
  EXPECT_TRUE(tensors_close(third(true), third(false), tolerance_for(at::kDouble)));
}

}  // namespace
