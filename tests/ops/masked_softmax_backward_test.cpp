// customop::masked_softmax_backward: its kernels against the float64 formula (last, middle and
// first dims; masked zeros), thread splits, strides, empty and 0-d inputs, errors; and
// masked_softmax's backward running through it, to the second and third order. Its own
// backward and JVP by finite differences on its samples: registered_ops_gradcheck_test.cpp.

#include <customop/ops/masked_softmax.h>
#include <customop/ops/masked_softmax_backward.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/op_calls.h"
#include "support/tensor_assertions.h"

#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using customop::ops::MaskedSoftmaxBackwardArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::OpCalls;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

at::Tensor softmax_backward(const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  return customop::ops::masked_softmax_backward_op()(
      MaskedSoftmaxBackwardArgs{.grad = g, .output = y, .dim = dim});
}

/// y * (g - sum(g * y, dim)) in float64 on the CPU.
at::Tensor expected_softmax_grad(const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  const auto gd = g.to(at::kDouble).cpu(), yd = y.to(at::kDouble).cpu();
  return yd * (gd - (gd * yd).sum(dim, /*keepdim=*/true));
}

/// A masked softmax output of `shape` along dim (about a third of the elements masked to 0).
at::Tensor masked_softmax_output(at::IntArrayRef shape, int64_t dim, const at::TensorOptions& o) {
  const auto keep = at::rand(shape) > 0.3;
  return at::softmax(at::randn(shape, at::kDouble).masked_fill(~keep, -INFINITY), dim)
      .nan_to_num(0.0)
      .to(o);
}

class MaskedSoftmaxBackwardDevice : public DeviceTest {};

// Rows (inner == 1) short and long, and slices along a middle or first dim (inner > 1) with
// inner below and above a column tile.
TEST_P(MaskedSoftmaxBackwardDevice, MatchesTheFloat64Formula) {
  torch::manual_seed(81);
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{4099, 37}, -1}, {{3, 100003}, 1}, {{2, 5, 64}, 1},    {{64, 33}, 0},
      {{17}, 0},        {{7, 1025}, -1},  {{2, 700, 333}, 1}, {{3, 9, 40000}, 1}};
  for (const auto& [shape, dim] : cases) {
    SCOPED_TRACE("shape " + c10::str(at::IntArrayRef(shape)) + " dim " + std::to_string(dim));
    const auto y = masked_softmax_output(shape, dim, p().options());
    const auto g = at::randn(shape, p().options());
    const auto gi = softmax_backward(g, y, dim);
    EXPECT_EQ(gi.scalar_type(), p().dtype);
    auto tol = tolerance_for(p().dtype);
    tol.atol *= 4;  // y (g - s): s a dot product weighted by y (sum 1), a few roundings
    EXPECT_TRUE(tensors_close(gi, expected_softmax_grad(g, y, dim), tol));
    EXPECT_TRUE(
        tensors_equal(gi.masked_select(y == 0),
                      at::zeros({}, p().options()).expand({(y == 0).sum().item<int64_t>()})))
        << "masked (y = 0) elements get 0";
  }
}

// The bits do not depend on the call, the strides or the thread count.
TEST_P(MaskedSoftmaxBackwardDevice, DeterministicAndStrideIndependent) {
  torch::manual_seed(82);
  for (const int64_t dim : {0, 1}) {
    const auto y = masked_softmax_output({300, 65}, dim, p().options()).t();
    const auto g = at::randn({130, 300}, p().options()).slice(0, 0, 130, 2);
    const auto gi = softmax_backward(g, y, 1 - dim);
    EXPECT_TRUE(tensors_equal(gi, softmax_backward(g, y, 1 - dim)));
    EXPECT_TRUE(tensors_equal(gi, softmax_backward(g.contiguous(), y.contiguous(), 1 - dim)));
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    const auto one = softmax_backward(g, y, 1 - dim);
    at::set_num_threads(threads);
    EXPECT_TRUE(tensors_equal(gi, one)) << "one thread against " << threads;
  }
}

TEST_P(MaskedSoftmaxBackwardDevice, EmptyAndZeroDimInputs) {
  const auto e = at::empty({0, 16}, p().options());
  EXPECT_EQ(softmax_backward(e, e, -1).sizes(), at::IntArrayRef({0, 16}));
  const auto z = at::empty({4, 0}, p().options());
  EXPECT_EQ(softmax_backward(z, z, 1).sizes(), at::IntArrayRef({4, 0}));
  // 0-d: y = 1 (softmax of one element), so grad_input = g - g = 0.
  const auto one = at::ones({}, p().options());
  EXPECT_EQ(softmax_backward(one * 3, one, 0).item<double>(), 0.0);
}

TEST_P(MaskedSoftmaxBackwardDevice, BadArgumentsAreRefusedByName) {
  const auto y = at::randn({2, 4}, p().options());
  EXPECT_THAT(
      error_message([&] {
        softmax_backward(at::randn({4, 2}, p().options()), y, -1);
      }),
      HasSubstr("masked_softmax_backward: grad must have output's shape [2, 4], but got [4, 2]"));
  EXPECT_THAT(error_message([&] { softmax_backward(y, y, 2); }),
              HasSubstr("masked_softmax_backward: dim must be in [-2, 1]"));
  EXPECT_THAT(error_message([&] {
                softmax_backward(y.to(p().dtype == at::kDouble ? at::kFloat : at::kDouble), y, 0);
              }),
              HasSubstr("masked_softmax_backward: grad must have the dtype of output"));
}

// A float32 sum over millions of terms that do not shrink with the row (y need not be a softmax
// output) stays within 1e-5 of the largest |grad_input|, along the last dim and a middle one.
// Measured with blocked sums: 3e-7 to 5e-6 over three draws; summed straight, as before, one
// draw gave 7.5e-6 (rows) and 3.6e-5 (columns).
TEST_P(MaskedSoftmaxBackwardDevice, LongSumsStayAccurate) {
  if (p().dtype != at::kFloat) GTEST_SKIP() << "float32 only";
  torch::manual_seed(84);
  for (const auto& [shape, dim] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
           {{2, 3000000}, -1}, {{2, 1000000, 2}, 1}}) {
    const auto g = at::randn(shape, p().options()), y = at::rand(shape, p().options());
    const auto want = expected_softmax_grad(g, y, dim);
    const double err =
        (softmax_backward(g, y, dim).to(at::kDouble).cpu() - want).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * want.abs().max().item<double>()) << "dim " << dim;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaskedSoftmaxBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, MaskedSoftmaxBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

at::Tensor masked_softmax_fwd(const at::Tensor& x, const at::Tensor& keep, int64_t dim) {
  return customop::ops::masked_softmax_op()(
      customop::ops::MaskedSoftmaxArgs{.input = x, .mask = keep, .dim = dim});
}

/// The ATen composite of masked_softmax (a fully masked slice gives zeros).
at::Tensor masked_softmax_composite(const at::Tensor& x, const at::Tensor& keep, int64_t dim) {
  return at::softmax(x.masked_fill(~keep, -INFINITY), dim).masked_fill(~keep, 0.0);
}

// masked_softmax's backward is this op, once per backward, and with create_graph its own
// backward gives the second and third derivatives of the ATen composite (float64).
TEST(MaskedSoftmaxBackward, MaskedSoftmaxBackwardRunsThroughTheOpToTheThirdOrder) {
  torch::manual_seed(83);
  const auto x = at::randn({4, 6}, at::kDouble).requires_grad_();
  auto keep = at::rand({4, 6}) > 0.3;
  keep.select(1, 0).fill_(true);
  const auto g = at::randn({4, 6}, at::kDouble).requires_grad_();
  const auto c = at::randn({4, 6}, at::kDouble);
  {
    const OpCalls calls("customop::masked_softmax_backward");
    const auto grad = torch::autograd::grad({masked_softmax_fwd(x, keep, 1)}, {x}, {g})[0];
    EXPECT_EQ(calls.count(), 1);
    const auto want = torch::autograd::grad({masked_softmax_composite(x, keep, 1)}, {x}, {g})[0];
    EXPECT_TRUE(tensors_close(grad, want, tolerance_for(at::kDouble)));
  }
  const auto third = [&](bool ours) {
    const auto y = ours ? masked_softmax_fwd(x, keep, 1) : masked_softmax_composite(x, keep, 1);
    const auto gi = torch::autograd::grad({y}, {x}, {g}, true, true)[0];
    const auto d2 = torch::autograd::grad({gi}, {x, g}, {c}, true, true);  // second order
    return torch::autograd::grad({d2[0].square().sum() + d2[1].square().sum()}, {x, g});
  };
  const auto ours = third(true), want = third(false);
  EXPECT_TRUE(tensors_close(ours[0], want[0], tolerance_for(at::kDouble))) << "d/dx";
  EXPECT_TRUE(tensors_close(ours[1], want[1], tolerance_for(at::kDouble))) << "d/dg";
}

}  // namespace
