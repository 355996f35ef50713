#include <customop/ops/max_along.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

namespace {

using customop::ops::MaxAlongArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using ::testing::HasSubstr;

std::tuple<at::Tensor, at::Tensor> max_along(const at::Tensor& x, int64_t dim,
                                             bool keepdim = false) {
  return customop::ops::max_along_op()(MaxAlongArgs{.input = x, .dim = dim, .keepdim = keepdim});
}

// Values and indices equal torch.max(x, dim, keepdim) on the same data, bit for bit.
::testing::AssertionResult matches_torch_max(const at::Tensor& x, int64_t dim, bool keepdim) {
  const auto [values, indices] = max_along(x, dim, keepdim);
  const auto ref = at::max(x.cpu(), dim, keepdim);
  if (!values.is_contiguous() || !indices.is_contiguous()) {
    return ::testing::AssertionFailure() << "returns are not contiguous";
  }
  if (indices.scalar_type() != at::kLong) {
    return ::testing::AssertionFailure() << "indices dtype " << indices.scalar_type();
  }
  auto v = tensors_equal(values.cpu(), std::get<0>(ref));
  if (!v) return v << " (values)";
  auto i = tensors_equal(indices.cpu(), std::get<1>(ref));
  if (!i) return i << " (indices)";
  return ::testing::AssertionSuccess();
}

class MaxAlongDevice : public DeviceTest {};

TEST_P(MaxAlongDevice, ForwardMatchesTorchMax) {
  const uint64_t seed = 41;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 1023, 1024, 1025, 40000}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (keepdim ? ", keepdim" : ""));
      // float64 data rounded to the dtype keeps the comparison exact.
      EXPECT_TRUE(matches_torch_max(at::randn({n}, p().options()), 0, keepdim));
      EXPECT_TRUE(matches_torch_max(at::randn({3, n}, p().options()), 1, keepdim));
      EXPECT_TRUE(matches_torch_max(at::randn({3, n}, p().options()), -2, keepdim));
      EXPECT_TRUE(matches_torch_max(at::randn({2, n, 5}, p().options()), 1, keepdim));
      EXPECT_TRUE(matches_torch_max(at::randn({2, 5, n}, p().options()), 0, keepdim));
    }
  }
}

TEST_P(MaxAlongDevice, TiesGiveTheFirstIndex) {
  const auto x =
      at::tensor({1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 5.0, 5.0, -1.0, -1.0, 0.0, 0.0}, at::kDouble)
          .view({3, 4})
          .to(p().options());
  const auto [v, i] = max_along(x, 1);
  EXPECT_TRUE(tensors_equal(i.cpu(), at::tensor({1, 0, 2}, at::kLong)));
  EXPECT_TRUE(matches_torch_max(x, 1, false));
  // The same along dim 0 (the strided-column path).
  const auto [v0, i0] = max_along(x.t().contiguous(), 0);
  EXPECT_TRUE(tensors_equal(i0.cpu(), at::tensor({1, 0, 2}, at::kLong)));
  EXPECT_TRUE(matches_torch_max(x.t().contiguous(), 0, false));
  // -0.0 and 0.0 tie: the first one wins, with its own sign.
  const auto zeros = at::tensor({-0.0, 0.0, 0.0, -0.0}, at::kDouble).view({2, 2}).to(p().options());
  const auto [vz, iz] = max_along(zeros, 1);
  EXPECT_TRUE(tensors_equal(iz.cpu(), at::tensor({0, 0}, at::kLong)));
  EXPECT_TRUE(std::signbit(vz[0].item<double>()));
  EXPECT_FALSE(std::signbit(vz[1].item<double>()));
}

TEST_P(MaxAlongDevice, NaNWinsAtItsFirstPosition) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const auto x =
      at::tensor({1.0, nan, 3.0, nan, -inf, -inf, -inf, -inf, inf, 2.0, nan, inf}, at::kDouble)
          .view({3, 4})
          .to(p().options());
  const auto [v, i] = max_along(x, 1);
  EXPECT_TRUE(tensors_equal(i.cpu(), at::tensor({1, 0, 2}, at::kLong)));
  EXPECT_TRUE(std::isnan(v[0].item<double>()));
  EXPECT_TRUE(matches_torch_max(x, 1, false));
  EXPECT_TRUE(matches_torch_max(x.t().contiguous(), 0, false));
  // A NaN in every long row, past the first vector and at the end.
  auto long_rows = at::randn({4, 1000}, p().options());
  long_rows.index_put_({0, 700}, nan);
  long_rows.index_put_({1, 999}, nan);
  EXPECT_TRUE(matches_torch_max(long_rows, 1, false));
  EXPECT_TRUE(matches_torch_max(long_rows.t().contiguous(), 0, false));
}

TEST_P(MaxAlongDevice, StridedInputsMatchContiguous) {
  torch::manual_seed(42);
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", at::randn({33, 6}, p().options()).t()},
      {"sliced", at::randn({4, 66}, p().options()).slice(1, 0, 66, 2)},
      {"expanded (stride 0)", at::randn({1, 33}, p().options()).expand({5, 33})},
      {"permuted 3-d", at::randn({33, 2, 3}, p().options()).permute({1, 2, 0})},
  };
  for (const auto& [label, x] : inputs) {
    SCOPED_TRACE(label);
    for (int64_t dim : {0, 1}) {
      const auto [v, i] = max_along(x, dim);
      const auto [vc, ic] = max_along(x.contiguous(), dim);
      EXPECT_TRUE(tensors_equal(v, vc));
      EXPECT_TRUE(tensors_equal(i, ic));
      EXPECT_TRUE(matches_torch_max(x, dim, false));
    }
  }
}

TEST_P(MaxAlongDevice, ZeroDimAndEmptyInputs) {
  const auto scalar = at::scalar_tensor(2.5, p().options());
  for (int64_t dim : {0, -1}) {
    for (bool keepdim : {false, true}) {
      const auto [v, i] = max_along(scalar, dim, keepdim);
      EXPECT_EQ(v.dim(), 0);
      EXPECT_EQ(v.item<double>(), 2.5);
      EXPECT_EQ(i.item<int64_t>(), 0);
    }
  }
  const auto [v, i] = max_along(at::empty({0, 3}, p().options()), 1);
  EXPECT_EQ(v.sizes(), at::IntArrayRef({0}));
  const auto [vk, ik] = max_along(at::empty({3, 0}, p().options()), 0, true);
  EXPECT_EQ(vk.sizes(), at::IntArrayRef({1, 0}));
  EXPECT_EQ(ik.sizes(), at::IntArrayRef({1, 0}));
}

TEST_P(MaxAlongDevice, BackwardScattersIntoTheArgmax) {
  torch::manual_seed(43);
  for (bool keepdim : {false, true}) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? ", keepdim" : ""));
      const auto x = at::randn({4, 5, 6}, p().options()).transpose(0, 2);
      const auto g = at::randn_like(std::get<0>(at::max(x, dim, keepdim)));
      const auto ours = customop::testing::vjp(
          [&](const auto& in) { return std::get<0>(max_along(in[0], dim, keepdim)); }, {x}, g);
      const auto ref = customop::testing::vjp(
          [&](const auto& in) { return std::get<0>(at::max(in[0], dim, keepdim)); }, {x}, g);
      EXPECT_TRUE(tensors_equal(ours[0], ref[0]));
    }
  }
  const auto scalar = at::scalar_tensor(1.5, p().options()).requires_grad_();
  std::get<0>(max_along(scalar, 0)).backward(at::scalar_tensor(3.0, p().options()));
  EXPECT_EQ(scalar.grad().item<double>(), 3.0);
}

TEST_P(MaxAlongDevice, IndicesAreNotDifferentiable) {
  const auto x = at::randn({3, 4}, p().options()).requires_grad_();
  const auto [v, i] = max_along(x, 1);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(i.requires_grad());
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaxAlongDevice, ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, MaxAlongDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(MaxAlong, SchemaHasTwoReturnsAndDefaultKeepdim) {
  const auto& op = customop::ops::max_along_op();
  EXPECT_EQ(op.schema().returns().size(), 2u);
  EXPECT_EQ(op.schema().returns()[1].name(), "indices");
  ASSERT_TRUE(op.schema().arguments()[2].default_value().has_value());
  EXPECT_FALSE(op.schema().arguments()[2].default_value()->toBool());
  ASSERT_TRUE(op.output_differentiability().has_value());
  EXPECT_EQ(*op.output_differentiability(), (std::vector<bool>{true, false}));
}

TEST(MaxAlong, SamplesHaveNoTies) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::max_along_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto x = s.args[0].toTensor();
      EXPECT_EQ(std::get<0>(at::_unique(x.flatten())).numel(), x.numel()) << "ties";
      EXPECT_TRUE(matches_torch_max(x, s.args[1].toInt(), s.args[2].toBool()));
    }
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(MaxAlongErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] {
        max_along(at::ones({2, 3}, at::kInt), 1);
      }),
      HasSubstr("max_along: input must be float16, bfloat16, float32 or float64, but got int32"));
}

TEST(MaxAlongErrors, DimOutOfRange) {
  EXPECT_THAT(error_message([] {
                max_along(at::ones({2, 3}), 2);
              }),
              HasSubstr("max_along: dim must be in [-2, 1] for a 2-d input, but got 2"));
  EXPECT_THAT(error_message([] { max_along(at::ones({}), -2); }),
              HasSubstr("max_along: dim must be in [-1, 0] for a 0-d input, but got -2"));
}

TEST(MaxAlongErrors, EmptyReducedDim) {
  EXPECT_THAT(
      error_message([] {
        max_along(at::ones({3, 0}), -1);
      }),
      HasSubstr("max_along: input must have a non-empty dim -1 to reduce, but got shape [3, 0]"));
}

}  // namespace
