// customop::clamp_count_backward: its kernels against the ATen formula (the bounds included,
// rounded to the dtype; NaN gives 0), strides, errors; clamp_count's backward running through
// it. Its own backward and JVP by finite differences on its samples: as every registered op's,
// registered_ops_gradcheck_test.cpp.

#include <customop/ops/clamp_count.h>
#include <customop/ops/clamp_count_backward.h>

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

using customop::ops::ClampCountBackwardArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::OpCalls;
using customop::testing::tensors_equal;
using ::testing::HasSubstr;

at::Tensor clamp_backward(const at::Tensor& g, const at::Tensor& x, double lo, double hi) {
  return customop::ops::clamp_count_backward_op()(
      ClampCountBackwardArgs{.grad = g, .input = x, .min = lo, .max = hi});
}

class ClampCountBackwardDevice : public DeviceTest {};

// Exact: the grad itself or 0. Values at the bounds (in the dtype: 0.1 rounds differently in
// each), beyond them, NaN and infinities; sizes around a vector and a chunk.
TEST_P(ClampCountBackwardDevice, PassesTheGradWithinTheBoundsOnly) {
  torch::manual_seed(91);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t n : {1, 7, 16, 33, 100003}) {
    SCOPED_TRACE("numel " + std::to_string(n));
    auto x = (at::rand({n}, at::kDouble) * 4 - 2).to(p().options());
    if (n >= 7) {
      x.slice(0, 0, 7).copy_(
          at::tensor({-0.5, 0.1, std::nan(""), inf, -inf, -0.50001, 0.10001}, at::kDouble));
    }
    const auto g = at::randn({n}, p().options());
    const auto lo = at::scalar_tensor(-0.5, p().options()),
               hi = at::scalar_tensor(0.1, p().options());
    const auto want = at::where((x >= lo).logical_and(x <= hi), g, at::zeros_like(g));
    const auto got = clamp_backward(g, x, -0.5, 0.1);
    EXPECT_EQ(got.scalar_type(), p().dtype);
    EXPECT_TRUE(tensors_equal(got, want));
  }
}

TEST_P(ClampCountBackwardDevice, StridedInputsMatchContiguous) {
  torch::manual_seed(92);
  const auto x = at::randn({40, 30}, p().options()).t();
  const auto g = at::randn({60, 40}, p().options()).slice(0, 0, 60, 2);
  EXPECT_TRUE(tensors_equal(clamp_backward(g, x, -0.3, 0.4),
                            clamp_backward(g.contiguous(), x.contiguous(), -0.3, 0.4)));
  EXPECT_EQ(clamp_backward(at::ones({}, p().options()), at::zeros({}, p().options()), -1, 1)
                .item<double>(),
            1.0);  // 0-d
}

TEST_P(ClampCountBackwardDevice, BadArgumentsAreRefusedByName) {
  const auto x = at::randn({2, 4}, p().options());
  EXPECT_THAT(
      error_message([&] {
        clamp_backward(at::randn({4, 2}, p().options()), x, 0, 1);
      }),
      HasSubstr("clamp_count_backward: grad must have input's shape [2, 4], but got [4, 2]"));
  EXPECT_THAT(error_message([&] { clamp_backward(x, x, 1, 0); }),
              HasSubstr("clamp_count_backward: min must be <= max (and neither NaN), but got "
                        "min = 1 and max = 0"));
}

INSTANTIATE_TEST_SUITE_P(Cpu, ClampCountBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, ClampCountBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

// clamp_count's backward is this op, once per backward.
TEST(ClampCountBackward, ClampCountBackwardRunsThroughTheOp) {
  const OpCalls calls("customop::clamp_count_backward");
  const auto x = at::randn({64}).requires_grad_();
  const auto out = std::get<0>(customop::ops::clamp_count_op()(
      customop::ops::ClampCountArgs{.input = x, .min = -0.5, .max = 0.5}));
  const auto g = at::randn({64});
  const auto grad = torch::autograd::grad({out}, {x}, {g})[0];
  EXPECT_EQ(calls.count(), 1);
  const auto xd = x.detach();
  EXPECT_TRUE(
      tensors_equal(grad, at::where((xd >= -0.5).logical_and(xd <= 0.5), g, at::zeros_like(g))));
}

}  // namespace
