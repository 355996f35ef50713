#include <customop/ops/rms_norm.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using customop::ops::RmsNormArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps = 1e-6) {
  return customop::ops::rms_norm_op()(RmsNormArgs{.input = x, .weight = w, .eps = eps});
}

// torch.nn.functional.rms_norm spelled with ATen ops.
at::Tensor reference(const at::Tensor& x, const at::Tensor& w, double eps = 1e-6) {
  return x * at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + eps) * w;
}

class RmsNormDevice : public DeviceTest {};

TEST_P(RmsNormDevice, ForwardMatchesFloat64Reference) {
  const uint64_t seed = 11;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (int64_t d :
       {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 4097}) {
    for (std::vector<int64_t> lead : {std::vector<int64_t>{}, {1}, {5}, {2, 3}}) {
      auto shape = lead;
      shape.push_back(d);
      SCOPED_TRACE("shape " + c10::str(at::IntArrayRef(shape)));
      const auto x = at::randn(shape, p().options());
      const auto w = at::randn({d}, p().options());
      const auto y = rms_norm(x, w);
      EXPECT_EQ(y.scalar_type(), p().dtype);
      EXPECT_EQ(y.device().type(), p().device);
      EXPECT_TRUE(tensors_close(y, reference(x.to(at::kDouble), w.to(at::kDouble)),
                                tolerance_for(p().dtype)));
    }
  }
}

TEST_P(RmsNormDevice, ManyRowsInParallel) {
  torch::manual_seed(12);
  const auto x = at::randn({257, 1031}, p().options());
  const auto w = at::randn({1031}, p().options());
  EXPECT_TRUE(tensors_close(rms_norm(x, w, 1e-5),
                            reference(x.to(at::kDouble), w.to(at::kDouble), 1e-5),
                            tolerance_for(p().dtype)));
}

TEST_P(RmsNormDevice, StridedAndBroadcastInputsMatchContiguous) {
  torch::manual_seed(13);
  const auto w_storage = at::randn({2 * 33}, p().options());
  const auto w = w_storage.slice(0, 0, 66, 2);  // stride 2
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", at::randn({33, 6}, p().options()).t()},
      {"sliced last dim", at::randn({4, 66}, p().options()).slice(1, 0, 66, 2)},
      {"every other row", at::randn({8, 33}, p().options()).slice(0, 0, 8, 2)},
      {"expanded rows (stride 0)", at::randn({1, 33}, p().options()).expand({5, 33})},
      {"permuted 3-d", at::randn({33, 2, 3}, p().options()).permute({1, 2, 0})},
  };
  for (const auto& [label, x] : inputs) {
    SCOPED_TRACE(label);
    const auto y = rms_norm(x, w);
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_TRUE(tensors_equal(y, rms_norm(x.contiguous(), w.contiguous())));
  }
}

TEST_P(RmsNormDevice, EmptyInputs) {
  const auto w = at::randn({16}, p().options());
  for (std::vector<int64_t> shape : {std::vector<int64_t>{0, 16}, {2, 0, 16}}) {
    const auto y = rms_norm(at::empty(shape, p().options()), w);
    EXPECT_EQ(y.sizes(), at::IntArrayRef(shape));
  }
  const auto y = rms_norm(at::empty({3, 0}, p().options()), at::empty({0}, p().options()));
  EXPECT_EQ(y.sizes(), at::IntArrayRef({3, 0}));
}

TEST_P(RmsNormDevice, BackwardMatchesAutogradOfReference) {
  torch::manual_seed(14);
  for (int64_t d : {1, 8, 33, 257}) {
    SCOPED_TRACE("D = " + std::to_string(d));
    const auto x = at::randn({2, 3, d}, p().options()).transpose(0, 1);
    const auto w = at::randn({d}, p().options());
    const auto g = at::randn({3, 2, d}, p().options());
    const auto ours = customop::testing::vjp(
        [](const auto& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w}, g);
    const auto ref =
        customop::testing::vjp([](const auto& in) { return reference(in[0], in[1], 1e-5); },
                               {x.to(at::kDouble), w.to(at::kDouble)}, g.to(at::kDouble));
    // A reduction of D products in the weight grad: loosen the float32 tolerance with D.
    auto tol = tolerance_for(p().dtype);
    tol.atol *= 10;
    tol.rtol *= 10;
    EXPECT_EQ(ours[0].scalar_type(), p().dtype);
    EXPECT_EQ(ours[1].scalar_type(), p().dtype);
    EXPECT_TRUE(tensors_close(ours[0], ref[0], tol)) << "grad input";
    EXPECT_TRUE(tensors_close(ours[1], ref[1], tol)) << "grad weight";
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, RmsNormDevice, ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, RmsNormDevice, ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

class RmsNormCuda : public DeviceTest {};

TEST_P(RmsNormCuda, MatchesCpu) {
  torch::manual_seed(15);
  // The CPU runs float16/bfloat16 inputs (rounded) in float32.
  const auto cpu_dtype = p().reduced() ? at::kFloat : p().dtype;
  const auto x = at::randn({7, 1025}, p().dtype);
  const auto w = at::randn({1025}, p().dtype);
  const auto cpu = rms_norm(x.to(cpu_dtype), w.to(cpu_dtype));
  const auto cuda = rms_norm(x.to(p().options()), w.to(p().options()));
  EXPECT_TRUE(tensors_close(cuda, cpu, tolerance_for(p().dtype)));
}

TEST_P(RmsNormCuda, WeightOnAnotherDeviceIsRejected) {
  const auto x = at::randn({2, 4}, p().options());
  EXPECT_THAT(
      error_message([&] { rms_norm(x, at::ones({4}, p().dtype)); }),
      HasSubstr("rms_norm: weight must be on the same device as input (cuda:0), but got cpu"));
}

INSTANTIATE_TEST_SUITE_P(Cuda, RmsNormCuda, ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(RmsNorm, SchemaDefaultEps) {
  const auto& schema = customop::ops::rms_norm_op().schema();
  EXPECT_EQ(schema.name(), "customop::rms_norm");
  ASSERT_TRUE(schema.arguments()[2].default_value().has_value());
  EXPECT_DOUBLE_EQ(schema.arguments()[2].default_value()->toDouble(), 1e-6);
}

TEST(RmsNorm, SamplesMatchTheFloat64Reference) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::rms_norm_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto x = s.args[0].toTensor();
      const auto w = s.args[1].toTensor();
      const double eps = s.args[2].toDouble();
      EXPECT_TRUE(tensors_close(rms_norm(x, w, eps),
                                reference(x.to(at::kDouble), w.to(at::kDouble), eps),
                                tolerance_for(dtype)));
    }
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(RmsNormErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] {
        rms_norm(at::ones({2, 4}, at::kInt), at::ones({4}, at::kInt));
      }),
      HasSubstr("rms_norm: input must be float16, bfloat16, float32 or float64, but got int32"));
  EXPECT_THAT(error_message([] {
                rms_norm(at::ones({2, 4}, at::kComplexFloat), at::ones({4}, at::kComplexFloat));
              }),
              HasSubstr("rms_norm: input must be float16, bfloat16, float32 or float64, but got "
                        "complex64"));
}

TEST(RmsNormErrors, WeightDtype) {
  EXPECT_THAT(
      error_message([] {
        rms_norm(at::ones({2, 4}), at::ones({4}, at::kDouble));
      }),
      HasSubstr("rms_norm: weight must have the dtype of input (float32), but got float64"));
}

TEST(RmsNormErrors, ZeroDimInput) {
  EXPECT_THAT(
      error_message([] { rms_norm(at::ones({}), at::ones({1})); }),
      HasSubstr("rms_norm: input must have shape [..., D] (at least 1 dim), but got a 0-d tensor"));
}

TEST(RmsNormErrors, WeightShape) {
  EXPECT_THAT(error_message([] {
                rms_norm(at::ones({2, 64}), at::ones({32}));
              }),
              HasSubstr("rms_norm: weight must have shape [D] = [64], but got [32]"));
  EXPECT_THAT(error_message([] {
                rms_norm(at::ones({2, 4}), at::ones({1, 4}));
              }),
              HasSubstr("rms_norm: weight must have shape [D] = [4], but got [1, 4]"));
}

TEST(RmsNormErrors, NegativeEps) {
  EXPECT_THAT(error_message([] {
                rms_norm(at::ones({2, 4}), at::ones({4}), -1.0);
              }),
              HasSubstr("rms_norm: eps must be >= 0, but got -1"));
}

}  // namespace
