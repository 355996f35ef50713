#include <customop/ops/bias_gelu.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"
#include "support/vjp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace {

using customop::ops::BiasGeluArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::HasSubstr;

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& b, const std::string& approximate) {
  return customop::ops::bias_gelu_op()(
      BiasGeluArgs{.input = x, .bias = b, .approximate = approximate});
}

// torch.nn.functional.gelu(input + bias, approximate=...).
at::Tensor reference(const at::Tensor& x, const at::Tensor& b, const std::string& approximate) {
  return at::gelu(x + b, approximate);
}

class BiasGeluDevice : public DeviceTest {};

TEST_P(BiasGeluDevice, ForwardMatchesFloat64Reference) {
  const uint64_t seed = 21;
  SCOPED_TRACE("seed " + std::to_string(seed));
  torch::manual_seed(seed);
  for (const std::string approximate : {"none", "tanh"}) {
    for (int64_t d : {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025}) {
      for (std::vector<int64_t> lead : {std::vector<int64_t>{}, {3}, {2, 5}}) {
        auto shape = lead;
        shape.push_back(d);
        SCOPED_TRACE(approximate + " shape " + c10::str(at::IntArrayRef(shape)));
        const auto x = at::randn(shape, p().options()) * 3;
        const auto b = at::randn({d}, p().options());
        const auto y = bias_gelu(x, b, approximate);
        EXPECT_EQ(y.scalar_type(), p().dtype);
        // Compare with the reference on s rounded to the dtype, as the op defines it.
        const auto s = (x + b).to(at::kDouble);
        EXPECT_TRUE(tensors_close(y, at::gelu(s, approximate), tolerance_for(p().dtype)));
      }
    }
  }
}

TEST_P(BiasGeluDevice, LargeInputSplitsMidRow) {
  torch::manual_seed(22);
  // One row longer than a parallel_for chunk, and many short rows.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 100003}, {4099, 37}}) {
    const auto x = at::randn(shape, p().options());
    const auto b = at::randn({shape[1]}, p().options());
    EXPECT_TRUE(tensors_close(bias_gelu(x, b, "none"), at::gelu((x + b).to(at::kDouble)),
                              tolerance_for(p().dtype)));
  }
}

TEST_P(BiasGeluDevice, ExtremeValues) {
  const auto x = at::tensor({-1e4, -40.0, -10.0, -1e-8, 0.0, 1e-8, 10.0, 40.0, 1e4},
                            at::TensorOptions().dtype(at::kDouble))
                     .to(p().options());
  const auto b = at::zeros({9}, p().options());
  for (const std::string approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    EXPECT_TRUE(tensors_close(bias_gelu(x, b, approximate),
                              at::gelu(x.to(at::kDouble), approximate), tolerance_for(p().dtype)));
  }
}

// gelu(+inf) = inf and NaN stays NaN, in every dtype and form; the exact form gives the limit
// gelu(-inf) = 0 on every device and dtype (ATen's order of operations gives -inf * 0 = NaN).
TEST_P(BiasGeluDevice, InfinityAndNaN) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto x = at::tensor({inf, std::nan(""), 1.0, -inf}, at::TensorOptions().dtype(at::kDouble))
                     .to(p().options());
  const auto b = at::zeros({4}, p().options());
  for (const std::string approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const auto y = bias_gelu(x, b, approximate).to(at::kDouble);
    EXPECT_EQ(y[0].item<double>(), inf);
    EXPECT_TRUE(std::isnan(y[1].item<double>()));
    if (approximate == "none") {
      EXPECT_EQ(y[3].item<double>(), 0.0);
    }
  }
}

// For s < 0, gelu(s) = s Phi(s) is small; a kernel that computes s / 2 * (1 + erf(s / sqrt(2)))
// cancels there (float32 at::gelu(-5) = -1.19e-6, 17 % off -1.433e-6; at::gelu(-10) = -0).
// The float32 CPU kernel keeps the error relative to gelu(s): within 5 % (the erfc formula's
// own relative error in this range is <= 2.9 %) down to s = -12.
TEST_P(BiasGeluDevice, NegativeTailKeepsRelativeAccuracy) {
  if (p().dtype != at::kFloat || p().is_cuda()) GTEST_SKIP() << "float32 CPU kernel";
  const auto s = at::linspace(-12.0, -2.0, 4001, at::TensorOptions().dtype(at::kDouble));
  const auto y = bias_gelu(s.to(at::kFloat), at::zeros({4001}, p().options()), "none");
  const auto ref = s * 0.5 * at::erfc(-s * M_SQRT1_2);  // float64, no cancellation either
  const double worst = ((y.to(at::kDouble) - ref).abs() / ref.abs()).max().item<double>();
  EXPECT_LE(worst, 5e-2);
}

// The float32 CPU kernel's error bounds as cpu/vec_math.h's gelu_erf_f32 states them: absolute
// error <= 3.4e-7 over [-17, 17], and a denormal s gives s / 2 to within 1.5 of its ulps
// (2^-149), where the tail's w = |s| / (|s| + K) is itself denormal.
TEST_P(BiasGeluDevice, Float32AbsoluteErrorAndDenormals) {
  if (p().dtype != at::kFloat || p().is_cuda()) GTEST_SKIP() << "float32 CPU kernel";
  const auto dense = at::linspace(-17.0, 17.0, (1 << 20) + 1, at::kFloat);
  const auto exact = [](const at::Tensor& s32) {
    const auto s = s32.to(at::kDouble);
    return s * 0.5 * at::erfc(-s * M_SQRT1_2);
  };
  const auto y = bias_gelu(dense, at::zeros_like(dense), "none");
  EXPECT_LE((y.to(at::kDouble) - exact(dense)).abs().max().item<double>(), 3.4e-7);

  // Denormals: every bit pattern step of 9973 below 2^23, both signs.
  const auto bits = at::arange(1, 1 << 23, 9973, at::kInt);
  const auto pos = bits.view(at::kFloat);
  const auto s = at::cat({pos, -pos});
  const auto yd = bias_gelu(s, at::zeros_like(s), "none");
  const double ulp = std::ldexp(1.0, -149);
  EXPECT_LE((yd.to(at::kDouble) - exact(s)).abs().max().item<double>(), 1.5 * ulp);
}

TEST_P(BiasGeluDevice, StridedAndBroadcastInputsMatchContiguous) {
  torch::manual_seed(23);
  const auto b = at::randn({2 * 19}, p().options()).slice(0, 0, 38, 2);
  const std::vector<std::pair<std::string, at::Tensor>> inputs = {
      {"transposed", at::randn({19, 6}, p().options()).t()},
      {"sliced last dim", at::randn({4, 38}, p().options()).slice(1, 1, 38, 2)},
      {"expanded rows (stride 0)", at::randn({1, 19}, p().options()).expand({5, 19})},
      {"permuted 3-d", at::randn({19, 2, 3}, p().options()).permute({1, 2, 0})},
  };
  for (const auto& [label, x] : inputs) {
    SCOPED_TRACE(label);
    const auto y = bias_gelu(x, b, "tanh");
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_TRUE(tensors_equal(y, bias_gelu(x.contiguous(), b.contiguous(), "tanh")));
  }
}

TEST_P(BiasGeluDevice, EmptyInputs) {
  const auto b = at::randn({16}, p().options());
  EXPECT_EQ(bias_gelu(at::empty({0, 16}, p().options()), b, "none").sizes(),
            at::IntArrayRef({0, 16}));
  EXPECT_EQ(
      bias_gelu(at::empty({3, 0}, p().options()), at::empty({0}, p().options()), "tanh").sizes(),
      at::IntArrayRef({3, 0}));
}

TEST_P(BiasGeluDevice, BackwardMatchesAutogradOfReference) {
  torch::manual_seed(24);
  for (const std::string approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const auto x = at::randn({2, 3, 33}, p().options()).transpose(0, 1);
    const auto b = at::randn({33}, p().options());
    const auto g = at::randn({3, 2, 33}, p().options());
    const auto ours = customop::testing::vjp(
        [&](const auto& in) { return bias_gelu(in[0], in[1], approximate); }, {x, b}, g);
    const auto ref =
        customop::testing::vjp([&](const auto& in) { return reference(in[0], in[1], approximate); },
                               {x.to(at::kDouble), b.to(at::kDouble)}, g.to(at::kDouble));
    auto tol = tolerance_for(p().dtype);
    tol.atol *= 10;
    tol.rtol *= 10;
    EXPECT_EQ(ours[0].scalar_type(), p().dtype);
    EXPECT_TRUE(tensors_close(ours[0], ref[0], tol)) << "grad input";
    EXPECT_TRUE(tensors_close(ours[1], ref[1], tol)) << "grad bias";
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, BiasGeluDevice, ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, BiasGeluDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

class BiasGeluCuda : public DeviceTest {};

TEST_P(BiasGeluCuda, MatchesCpu) {
  torch::manual_seed(25);
  // The CPU runs float16/bfloat16 inputs (rounded) in float32.
  const auto cpu_dtype = p().reduced() ? at::kFloat : p().dtype;
  const auto x = at::randn({7, 1025}, p().dtype);
  const auto b = at::randn({1025}, p().dtype);
  for (const std::string approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const auto cpu = bias_gelu(x.to(cpu_dtype), b.to(cpu_dtype), approximate);
    const auto cuda = bias_gelu(x.to(p().options()), b.to(p().options()), approximate);
    EXPECT_TRUE(tensors_close(cuda, cpu, tolerance_for(p().dtype)));
  }
}

TEST_P(BiasGeluCuda, BiasOnAnotherDeviceIsRejected) {
  const auto x = at::randn({2, 4}, p().options());
  EXPECT_THAT(
      error_message([&] { bias_gelu(x, at::ones({4}, p().dtype), "none"); }),
      HasSubstr("bias_gelu: bias must be on the same device as input (cuda:0), but got cpu"));
}

INSTANTIATE_TEST_SUITE_P(Cuda, BiasGeluCuda, ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(BiasGelu, SchemaDefaultIsExact) {
  const auto& schema = customop::ops::bias_gelu_op().schema();
  EXPECT_EQ(schema.name(), "customop::bias_gelu");
  ASSERT_TRUE(schema.arguments()[2].default_value().has_value());
  EXPECT_EQ(schema.arguments()[2].default_value()->toStringRef(), "none");
}

TEST(BiasGelu, SamplesMatchTheFloat64Reference) {
  // The samples' count, dtype, device, requires_grad and strides, and gradcheck on them:
  // registered_ops_gradcheck_test.cpp, for every registered op.
  // NB: Op::samples(fn) hides OpCore::samples(device, dtype); call it through the base.
  const customop::OpCore& op = customop::ops::bias_gelu_op();
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (const auto& s : op.samples(c10::Device(c10::kCPU), dtype)) {
      SCOPED_TRACE(s.label);
      const auto x = s.args[0].toTensor();
      const auto b = s.args[1].toTensor();
      const std::string approximate = s.args[2].toStringRef();
      EXPECT_TRUE(tensors_close(bias_gelu(x, b, approximate),
                                reference(x.to(at::kDouble), b.to(at::kDouble), approximate),
                                tolerance_for(dtype)));
    }
  }
}

// ---- one test per error message ----------------------------------------------------------

TEST(BiasGeluErrors, InputDtype) {
  EXPECT_THAT(
      error_message([] {
        bias_gelu(at::ones({2, 4}, at::kLong), at::ones({4}, at::kLong), "none");
      }),
      HasSubstr("bias_gelu: input must be float16, bfloat16, float32 or float64, but got int64"));
}

TEST(BiasGeluErrors, BiasDtype) {
  EXPECT_THAT(error_message([] {
                bias_gelu(at::ones({2, 4}, at::kDouble), at::ones({4}), "none");
              }),
              HasSubstr("bias_gelu: bias must have the dtype of input (float64), but got float32"));
}

TEST(BiasGeluErrors, ZeroDimInput) {
  EXPECT_THAT(
      error_message([] { bias_gelu(at::ones({}), at::ones({1}), "none"); }),
      HasSubstr(
          "bias_gelu: input must have shape [..., D] (at least 1 dim), but got a 0-d tensor"));
}

TEST(BiasGeluErrors, BiasShape) {
  EXPECT_THAT(error_message([] {
                bias_gelu(at::ones({2, 64}), at::ones({32}), "none");
              }),
              HasSubstr("bias_gelu: bias must have shape [D] = [64], but got [32]"));
}

TEST(BiasGeluErrors, UnknownApproximate) {
  EXPECT_THAT(error_message([] {
                bias_gelu(at::ones({2, 4}), at::ones({4}), "erf");
              }),
              HasSubstr("bias_gelu: approximate must be \"none\" or \"tanh\", but got \"erf\""));
}

}  // namespace
