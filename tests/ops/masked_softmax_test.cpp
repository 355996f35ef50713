#include <customop/ops/masked_softmax.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

namespace {

using customop::ops::MaskedSoftmaxArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();

at::Tensor masked_softmax(const at::Tensor& x, const std::optional<at::Tensor>& mask, int64_t dim) {
  return customop::ops::masked_softmax_op()(
      MaskedSoftmaxArgs{.input = x, .mask = mask, .dim = dim});
}

// torch.softmax(x.masked_fill(~mask, -inf), dim), then 0 wherever masked (which also clears
// the NaN of fully masked slices).
at::Tensor reference(const at::Tensor& x, const std::optional<at::Tensor>& mask, int64_t dim) {
  if (!mask) return at::softmax(x, dim);
  const auto keep = mask->to(x.device()).expand(x.sizes());
  const auto y = at::softmax(x.masked_fill(keep.logical_not(), -kInf), dim);
  return at::where(keep, y, at::zeros_like(y));
}

class MaskedSoftmaxDevice : public DeviceTest {
 protected:
  at::Tensor bool_scalar(bool value) const {
    return at::scalar_tensor(value, at::TensorOptions().dtype(at::kBool).device(p().device));
  }
  at::Tensor random_mask(at::IntArrayRef sizes, double keep = 0.7) const {
    return (at::rand(sizes) < keep).to(p().device);
  }
};

TEST_P(MaskedSoftmaxDevice, ForwardMatchesFloat64Reference) {
  const uint64_t seed = 51;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 1023, 1024, 1025, 5000}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = at::randn({3, n}, p().options()) * 4;
    const auto xd = x.to(at::kDouble);
    const auto tol = tolerance_for(p().dtype);
    for (const std::optional<at::Tensor>& mask :
         {std::optional<at::Tensor>{}, std::optional<at::Tensor>{random_mask({3, n})},
          std::optional<at::Tensor>{random_mask({1, n})},
          std::optional<at::Tensor>{random_mask({3, 1}, 0.9)}}) {
      SCOPED_TRACE(mask ? "mask " + c10::str(mask->sizes()) : "no mask");
      EXPECT_TRUE(tensors_close(masked_softmax(x, mask, -1), reference(xd, mask, -1), tol));
      EXPECT_TRUE(tensors_close(masked_softmax(x, mask, 0), reference(xd, mask, 0), tol));
    }
    const auto x3 = at::randn({2, n, 5}, p().options());
    const auto m3 = random_mask({2, n, 5});
    EXPECT_TRUE(
        tensors_close(masked_softmax(x3, m3, 1), reference(x3.to(at::kDouble), m3, 1), tol));
    EXPECT_TRUE(tensors_close(masked_softmax(x3, std::nullopt, 1),
                              reference(x3.to(at::kDouble), std::nullopt, 1), tol));
  }
}

TEST_P(MaskedSoftmaxDevice, FullyMaskedSlicesGiveZeros) {
  torch::manual_seed(52);
  for (int64_t n : {1, 5, 33, 1025}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = at::randn({4, n}, p().options());
    auto mask = at::ones({4, n}, at::kBool);
    mask[1].fill_(false);
    mask[3].fill_(false);
    mask = mask.to(p().device);
    for (int64_t dim : {1, 0}) {
      const auto xx = dim == 1 ? x : x.t().contiguous();
      const auto mm = dim == 1 ? mask : mask.t().contiguous();
      const auto y = masked_softmax(xx, mm, dim);
      EXPECT_FALSE(y.isnan().any().item<bool>());
      EXPECT_TRUE(
          tensors_close(y, reference(xx.to(at::kDouble), mm, dim), tolerance_for(p().dtype)));
    }
    const auto y = masked_softmax(x, mask, 1);
    EXPECT_EQ(y[1].abs().sum().item<double>(), 0.0);
    EXPECT_EQ(y[3].abs().sum().item<double>(), 0.0);
  }
  // A 0-d False mask masks everything.
  const auto y = masked_softmax(at::randn({3, 4}, p().options()), bool_scalar(false), 1);
  EXPECT_EQ(y.abs().sum().item<double>(), 0.0);
}

TEST_P(MaskedSoftmaxDevice, NonFiniteInputsFollowTorchSoftmax) {
  const auto x = at::tensor({1.0, kQuietNaN, 3.0, 0.5,    // kept NaN: the row is NaN
                             1.0, kQuietNaN, 3.0, 0.5,    // masked NaN: ignored
                             -kInf, -kInf, -kInf, -kInf,  // all -inf kept: NaN, as torch
                             1e4, -1e4, 1e4, 0.0},        // large values stay finite
                            at::kDouble)
                     .view({4, 4});
  auto mask = at::ones({4, 4}, at::kBool);
  mask[1][1] = false;
  const auto xd = x.to(p().options());
  const auto y = masked_softmax(xd, mask.to(p().device), 1);
  EXPECT_TRUE(tensors_close(y, reference(x.to(p().dtype).to(at::kDouble), mask, 1),
                            tolerance_for(p().dtype)));
  EXPECT_TRUE(y[0].isnan().all().item<bool>());
  EXPECT_FALSE(y[1].isnan().any().item<bool>());
  EXPECT_TRUE(y[2].isnan().all().item<bool>());
  EXPECT_FALSE(y[3].isnan().any().item<bool>());
}

TEST_P(MaskedSoftmaxDevice, StridedAndBroadcastInputsMatchContiguous) {
  torch::manual_seed(53);
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", at::randn({33, 6}, p().options()).t()},
      {"sliced", at::randn({6, 66}, p().options()).slice(1, 0, 66, 2)},
      {"expanded (stride 0)", at::randn({1, 33}, p().options()).expand({6, 33})},
  };
  const auto mask = random_mask({33}).as_strided({6, 33}, {0, 1});  // broadcast view
  for (const auto& [label, x] : inputs) {
    SCOPED_TRACE(label);
    for (int64_t dim : {0, 1}) {
      const auto y = masked_softmax(x, mask, dim);
      EXPECT_TRUE(y.is_contiguous());
      EXPECT_TRUE(tensors_equal(y, masked_softmax(x.contiguous(), mask.contiguous(), dim)));
    }
  }
}

TEST_P(MaskedSoftmaxDevice, ZeroDimAndEmptyInputs) {
  const auto scalar = at::scalar_tensor(0.3, p().options());
  EXPECT_EQ(masked_softmax(scalar, std::nullopt, 0).item<double>(), 1.0);
  EXPECT_EQ(masked_softmax(scalar, bool_scalar(true), -1).item<double>(), 1.0);
  EXPECT_EQ(masked_softmax(scalar, bool_scalar(false), 0).item<double>(), 0.0);
  EXPECT_EQ(masked_softmax(at::empty({0, 4}, p().options()), std::nullopt, 1).sizes(),
            at::IntArrayRef({0, 4}));
  EXPECT_EQ(masked_softmax(at::empty({3, 0}, p().options()), random_mask({3, 0}), 1).sizes(),
            at::IntArrayRef({3, 0}));
}

TEST_P(MaskedSoftmaxDevice, BackwardMatchesAutogradOfReference) {
  torch::manual_seed(54);
  auto mask = at::rand({5, 7}) < 0.6;
  mask[2].fill_(false);  // a fully masked row
  mask.select(1, 0).index_put_({at::indexing::Slice(3, 5)}, true);
  mask = mask.to(p().device);
  for (const std::optional<at::Tensor>& m :
       {std::optional<at::Tensor>{}, std::optional<at::Tensor>{mask}}) {
    for (int64_t dim : {1, 0}) {
      SCOPED_TRACE(std::string(m ? "mask" : "no mask") + ", dim " + std::to_string(dim));
      const auto x = at::randn({7, 5}, p().options()).t();
      const auto g = at::randn({5, 7}, p().options());
      const auto ours = customop::testing::vjp(
          [&](const auto& in) { return masked_softmax(in[0], m, dim); }, {x}, g);
      const auto ref =
          customop::testing::vjp([&](const auto& in) { return reference(in[0], m, dim); },
                                 {x.to(at::kDouble)}, g.to(at::kDouble));
      EXPECT_EQ(ours[0].scalar_type(), p().dtype);
      auto tol = tolerance_for(p().dtype);
      tol.atol *= 10;
      tol.rtol *= 10;
      EXPECT_TRUE(tensors_close(ours[0], ref[0], tol));
      EXPECT_FALSE(ours[0].isnan().any().item<bool>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaskedSoftmaxDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, MaskedSoftmaxDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

class MaskedSoftmaxCuda : public DeviceTest {};

TEST_P(MaskedSoftmaxCuda, MatchesCpu) {
  torch::manual_seed(55);
  const auto cpu_dtype = p().reduced() ? at::kFloat : p().dtype;
  const auto x = at::randn({6, 2049}, p().dtype);
  const auto mask = at::rand({6, 2049}) < 0.5;
  for (int64_t dim : {1, 0}) {
    const auto cpu = masked_softmax(x.to(cpu_dtype), mask, dim);
    const auto cuda = masked_softmax(x.to(p().options()), mask.to(p().device), dim);
    EXPECT_TRUE(tensors_close(cuda, cpu, tolerance_for(p().dtype)));
  }
}

TEST_P(MaskedSoftmaxCuda, MaskOnAnotherDeviceIsRejected) {
  const auto x = at::randn({2, 4}, p().options());
  EXPECT_THAT(
      error_message([&] {
        masked_softmax(x, at::ones({2, 4}, at::kBool), 1);
      }),
      HasSubstr("masked_softmax: mask must be on the same device as input (cuda:0), but got cpu"));
}

INSTANTIATE_TEST_SUITE_P(Cuda, MaskedSoftmaxCuda,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(MaskedSoftmax, SamplesIncludeAFullyMaskedRow) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::masked_softmax_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    bool fully_masked_row = false;
    bool no_mask = false;
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto x = s.args[0].toTensor();
      const auto mask = s.args[1].toOptional<at::Tensor>();
      const int64_t dim = s.args[2].toInt();
      if (mask) {
        EXPECT_EQ(mask->scalar_type(), at::kBool);
        fully_masked_row =
            fully_masked_row || mask->expand(x.sizes()).logical_not().all(dim).any().item<bool>();
      } else {
        no_mask = true;
      }
      EXPECT_TRUE(tensors_close(masked_softmax(x, mask, dim),
                                reference(x.to(at::kDouble), mask, dim), tolerance_for(dtype)));
    }
    EXPECT_TRUE(fully_masked_row);
    EXPECT_TRUE(no_mask);
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(MaskedSoftmaxErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] {
        masked_softmax(at::ones({2, 3}, at::kInt), std::nullopt, 1);
      }),
      HasSubstr(
          "masked_softmax: input must be float16, bfloat16, float32 or float64, but got int32"));
}

TEST(MaskedSoftmaxErrors, MaskDtype) {
  EXPECT_THAT(error_message([] {
                masked_softmax(at::ones({2, 3}), at::ones({2, 3}), 1);
              }),
              HasSubstr("masked_softmax: mask must be a bool tensor, but got float32"));
}

TEST(MaskedSoftmaxErrors, MaskShape) {
  EXPECT_THAT(error_message([] {
                masked_softmax(at::ones({2, 3}), at::ones({4}, at::kBool), 1);
              }),
              HasSubstr("masked_softmax: mask must have input's shape [2, 3] or one broadcastable "
                        "to it, but got [4]"));
  EXPECT_THAT(error_message([] {
                masked_softmax(at::ones({3}), at::ones({2, 3}, at::kBool), 0);
              }),
              HasSubstr("masked_softmax: mask must have input's shape [3] or one broadcastable "
                        "to it, but got [2, 3]"));
}

TEST(MaskedSoftmaxErrors, DimOutOfRange) {
  EXPECT_THAT(error_message([] {
                masked_softmax(at::ones({2, 3}), std::nullopt, -3);
              }),
              HasSubstr("masked_softmax: dim must be in [-2, 1] for a 2-d input, but got -3"));
}

}  // namespace
