#include <customop/ops/weighted_sum.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using customop::ops::WeightedSumArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

at::Tensor weighted_sum(const std::vector<at::Tensor>& xs, const std::vector<double>& w) {
  return customop::ops::weighted_sum_op()(WeightedSumArgs{.inputs = xs, .weights = w});
}

// torch.stack(inputs).mul(w.view(-1, 1, ...)).sum(0).
at::Tensor reference(const std::vector<at::Tensor>& xs, const std::vector<double>& w) {
  const auto stacked = at::stack(xs);
  std::vector<int64_t> shape(static_cast<size_t>(stacked.dim()), 1);
  shape[0] = static_cast<int64_t>(w.size());
  const auto wt = at::tensor(w, stacked.options()).view(shape);
  return (stacked * wt).sum(0);
}

std::vector<at::Tensor> to_double(const std::vector<at::Tensor>& xs) {
  std::vector<at::Tensor> out;
  for (const auto& x : xs) out.push_back(x.to(at::kDouble));
  return out;
}

std::vector<at::Tensor> contiguous(const std::vector<at::Tensor>& xs) {
  std::vector<at::Tensor> out;
  for (const auto& x : xs) out.push_back(x.contiguous());
  return out;
}

std::vector<double> some_weights(size_t k) {
  std::vector<double> w;
  for (size_t i = 0; i < k; ++i)
    w.push_back(0.25 + 0.5 * static_cast<double>(i) * (i % 2 ? -1 : 1));
  return w;
}

class WeightedSumDevice : public DeviceTest {};

TEST_P(WeightedSumDevice, ForwardMatchesFloat64Reference) {
  const uint64_t seed = 31;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (size_t k : {1, 2, 3, 8, 17}) {
    for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 4095, 4096, 4097, 65537}) {
      SCOPED_TRACE("K = " + std::to_string(k) + ", numel = " + std::to_string(n));
      std::vector<at::Tensor> xs;
      for (size_t i = 0; i < k; ++i) xs.push_back(at::randn({n}, p().options()));
      const auto w = some_weights(k);
      const auto y = weighted_sum(xs, w);
      EXPECT_EQ(y.scalar_type(), p().dtype);
      EXPECT_TRUE(tensors_close(y, reference(to_double(xs), w), tolerance_for(p().dtype)));
    }
  }
}

TEST_P(WeightedSumDevice, StridedBroadcastAndZeroDimInputsMatchContiguous) {
  torch::manual_seed(32);
  const std::vector<std::pair<std::string, std::vector<at::Tensor>>> cases = {
      {"transposed + sliced + contiguous",
       {at::randn({9, 5}, p().options()).t(), at::randn({5, 18}, p().options()).slice(1, 0, 18, 2),
        at::randn({5, 9}, p().options())}},
      {"expanded (stride 0)",
       {at::randn({1, 9}, p().options()).expand({5, 9}), at::randn({5, 9}, p().options())}},
      {"0-d", {at::randn({}, p().options()), at::randn({}, p().options())}},
  };
  for (const auto& [label, xs] : cases) {
    SCOPED_TRACE(label);
    const auto w = some_weights(xs.size());
    const auto y = weighted_sum(xs, w);
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_EQ(y.sizes(), xs[0].sizes());
    EXPECT_TRUE(tensors_equal(y, weighted_sum(contiguous(xs), w)));
    EXPECT_TRUE(tensors_close(y, reference(to_double(xs), w), tolerance_for(p().dtype)));
  }
}

TEST_P(WeightedSumDevice, EmptyInputs) {
  const auto y = weighted_sum({at::empty({0, 3}, p().options()), at::empty({0, 3}, p().options())},
                              {1.0, 2.0});
  EXPECT_EQ(y.sizes(), at::IntArrayRef({0, 3}));
}

TEST_P(WeightedSumDevice, BackwardMatchesAutogradOfReference) {
  torch::manual_seed(33);
  const std::vector<at::Tensor> xs = {at::randn({4, 3}, p().options()).t(),
                                      at::randn({3, 4}, p().options()),
                                      at::randn({3, 8}, p().options()).slice(1, 0, 8, 2)};
  const std::vector<double> w = {0.5, -2.0, 3.0};
  const auto g = at::randn({3, 4}, p().options());
  const auto ours =
      customop::testing::vjp([&](const auto& in) { return weighted_sum(in, w); }, xs, g);
  const auto ref = customop::testing::vjp([&](const auto& in) { return reference(in, w); },
                                          to_double(xs), g.to(at::kDouble));
  for (size_t k = 0; k < xs.size(); ++k) {
    SCOPED_TRACE("inputs[" + std::to_string(k) + "]");
    EXPECT_EQ(ours[k].scalar_type(), p().dtype);
    EXPECT_TRUE(tensors_close(ours[k], ref[k], tolerance_for(p().dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, WeightedSumDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, WeightedSumDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

class WeightedSumCuda : public DeviceTest {};

TEST_P(WeightedSumCuda, MatchesCpu) {
  torch::manual_seed(34);
  const auto cpu_dtype = p().reduced() ? at::kFloat : p().dtype;
  std::vector<at::Tensor> cpu, cuda;
  for (int i = 0; i < 5; ++i) {
    const auto x = at::randn({1000003}, p().dtype);
    cpu.push_back(x.to(cpu_dtype));
    cuda.push_back(x.to(p().options()));
  }
  const auto w = some_weights(5);
  EXPECT_TRUE(tensors_close(weighted_sum(cuda, w), weighted_sum(cpu, w), tolerance_for(p().dtype)));
}

TEST_P(WeightedSumCuda, InputOnAnotherDeviceIsRejected) {
  const auto x = at::randn({4}, p().options());
  EXPECT_THAT(error_message([&] {
                weighted_sum({x, at::ones({4}, p().dtype)}, {1.0, 1.0});
              }),
              HasSubstr("weighted_sum: inputs[1] must be on the same device as inputs[0] "
                        "(cuda:0), but got cpu"));
}

INSTANTIATE_TEST_SUITE_P(Cuda, WeightedSumCuda,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(WeightedSum, SamplesMatchTheFloat64Reference) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::weighted_sum_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto xs = s.args[0].toTensorVector();
      const auto w = s.args[1].toDoubleVector();
      EXPECT_TRUE(
          tensors_close(weighted_sum(xs, w), reference(to_double(xs), w), tolerance_for(dtype)));
    }
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(WeightedSumErrors, EmptyList) {
  // NB: with no tensor argument the dispatcher has no device to dispatch on; calling the
  // CPU kernel's checks directly is what a CPU call would hit.
  const std::string msg = error_message([] { weighted_sum({}, {}); });
  EXPECT_THAT(msg, ::testing::AnyOf(HasSubstr("weighted_sum: inputs must hold at least one tensor, "
                                              "but got an empty list"),
                                    HasSubstr("customop::weighted_sum")));
}

TEST(WeightedSumErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] { weighted_sum({at::ones({2}, at::kInt)}, {1.0}); }),
      HasSubstr(
          "weighted_sum: inputs[0] must be float16, bfloat16, float32 or float64, but got int32"));
}

TEST(WeightedSumErrors, MixedDtypes) {
  EXPECT_THAT(
      error_message([] {
        weighted_sum({at::ones({2}), at::ones({2}, at::kDouble)}, {1.0, 1.0});
      }),
      HasSubstr(
          "weighted_sum: inputs[1] must have the dtype of inputs[0] (float32), but got float64"));
}

TEST(WeightedSumErrors, MixedShapes) {
  EXPECT_THAT(
      error_message([] {
        weighted_sum({at::ones({4, 5}), at::ones({4, 5}), at::ones({4, 6})}, {1.0, 1.0, 1.0});
      }),
      HasSubstr(
          "weighted_sum: inputs[2] must have the shape of inputs[0] = [4, 5], but got [4, 6]"));
}

TEST(WeightedSumErrors, WeightsLength) {
  EXPECT_THAT(
      error_message([] {
        weighted_sum({at::ones({2}), at::ones({2}), at::ones({2})}, {1.0, 2.0});
      }),
      HasSubstr("weighted_sum: weights must have one entry per tensor in inputs (3), but got 2"));
}

}  // namespace
