// The fused bias + leaky ReLU, registered with customop (flrelu::) and by hand (flrelu_by_hand::):
// both give the composite's values and grads, pass gradcheck and gradgradcheck (the backward
// op's formula), run on meta tensors, and refuse bad arguments naming them.

#include "fused_leaky_relu.h"

#include <customop/gradcheck/gradcheck.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>

namespace {

using ::testing::HasSubstr;

constexpr double kSlope = 0.2;
constexpr double kScale = 1.4142135623730951;

at::Tensor composite(const at::Tensor& x, const at::Tensor& bias) {
  std::vector<int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = bias.size(0);
  return at::leaky_relu(x + bias.view(shape), kSlope) * kScale;
}

at::Tensor call(const std::string& ns, const at::Tensor& x, const at::Tensor& bias) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow((ns + "::fused_bias_leaky_relu").c_str(), "")
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, double)>()
      .call(x, bias, kSlope, kScale);
}

// Inputs away from the kink at x + bias = 0 (finite differences must not cross it).
std::pair<at::Tensor, at::Tensor> inputs(at::IntArrayRef shape, bool transposed) {
  at::manual_seed(7);
  at::Tensor x = at::randn(shape, at::kDouble);
  x = x + x.sign() * 0.1;
  if (transposed) x = x.transpose(0, 1).contiguous().transpose(0, 1);  // non-contiguous
  return {x.requires_grad_(), at::zeros({shape[1]}, at::kDouble).requires_grad_()};
}

class FusedLeakyRelu : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedLeakyRelu, ForwardAndBackwardEqualTheComposite) {
  flrelu::fused_bias_leaky_relu_op();
  for (const bool transposed : {false, true}) {
    auto [x, bias] = inputs({3, 4, 5}, transposed);
    const at::Tensor w = at::randn({3, 4, 5}, at::kDouble);
    const at::Tensor y = call(GetParam(), x, bias);
    const at::Tensor ref = composite(x, bias);
    EXPECT_TRUE(at::allclose(y, ref, 1e-12, 1e-12)) << "transposed=" << transposed;
    const auto g = torch::autograd::grad({(y * w).sum()}, {x, bias});
    const auto g_ref = torch::autograd::grad({(ref * w).sum()}, {x, bias});
    EXPECT_TRUE(at::allclose(g[0], g_ref[0], 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(g[1], g_ref[1], 1e-12, 1e-12));
  }
}

TEST_P(FusedLeakyRelu, GradcheckAndGradgradcheck) {
  flrelu::fused_bias_leaky_relu_op();
  auto [x, bias] = inputs({2, 3, 4}, /*transposed=*/true);
  bias = (at::randn({3}, at::kDouble) * 0.01).requires_grad_();
  const auto& h = c10::Dispatcher::singleton().findSchemaOrThrow(
      (GetParam() + "::fused_bias_leaky_relu").c_str(), "");
  const torch::jit::Stack args{x, bias, kSlope, kScale};
  const auto first = customop::gradcheck::gradcheck(h, args);
  EXPECT_TRUE(first.passed) << first.message();
  const auto second = customop::gradcheck::gradgradcheck(h, args);
  EXPECT_TRUE(second.passed) << second.message();
}

TEST_P(FusedLeakyRelu, MetaTensorsGiveTheOutputsMetadata) {
  flrelu::fused_bias_leaky_relu_op();
  const auto meta = at::device(at::kMeta).dtype(at::kFloat);
  const at::Tensor y = call(GetParam(), at::empty({8, 16, 4, 4}, meta), at::empty({16}, meta));
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), at::IntArrayRef({8, 16, 4, 4}));
}

TEST_P(FusedLeakyRelu, BadBiasIsRefusedNamingIt) {
  flrelu::fused_bias_leaky_relu_op();
  try {
    call(GetParam(), at::ones({2, 3}, at::kDouble), at::ones({4}, at::kDouble));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                HasSubstr("fused_bias_leaky_relu: bias must have shape [C] = [3], but got [4]"));
  }
}

// float16/bfloat16: values rounded once from the float computation; grad_bias summed in float
// (a sum of 2^15 grads accumulated in the 16-bit type would stall far below the true sum); the
// low-precision gradcheck (against the op's own float64 run) passes.
TEST_P(FusedLeakyRelu, SixteenBitKernelsRoundOnceAndSumInFloat) {
  flrelu::fused_bias_leaky_relu_op();
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    const double u = dtype == at::kHalf ? 0x1p-11 : 0x1p-8;  // unit roundoff
    auto [x64, bias64] = inputs({64, 2, 512}, false);
    const at::Tensor x = x64.detach().to(dtype).requires_grad_();
    const at::Tensor bias = bias64.detach().to(dtype).requires_grad_();
    const at::Tensor y = call(GetParam(), x, bias);
    ASSERT_EQ(y.scalar_type(), dtype);
    const at::Tensor exact = composite(x.detach().to(at::kDouble), bias.detach().to(at::kDouble));
    // One rounding of the float result: |y - exact| <= u |exact| (+ float's own error).
    EXPECT_TRUE(
        ((y.to(at::kDouble) - exact).abs() <= exact.abs() * (u * 1.001) + 1e-30).all().item<bool>())
        << dtype;
    const at::Tensor w = at::ones_like(y);
    const auto g = torch::autograd::grad({y}, {x, bias}, {w});
    const at::Tensor slope =
        at::where(exact > 0, at::ones_like(exact), at::full_like(exact, kSlope)) * kScale;
    const at::Tensor want_bias = slope.sum(at::IntArrayRef{0, 2});
    EXPECT_TRUE(at::allclose(g[1].to(at::kDouble), want_bias, 2 * u, 0))
        << dtype << ": grad_bias " << g[1] << " vs " << want_bias;
    const torch::jit::Stack args{x.detach().narrow(2, 0, 8).contiguous().requires_grad_(),
                                 bias.detach().requires_grad_(), kSlope, kScale};
    const auto& h = c10::Dispatcher::singleton().findSchemaOrThrow(
        (GetParam() + "::fused_bias_leaky_relu").c_str(), "");
    const auto r = customop::gradcheck::gradcheck(h, args);
    EXPECT_TRUE(r.passed) << r.message();
    EXPECT_EQ(r.precision_rule, "no reference");
  }
}

INSTANTIATE_TEST_SUITE_P(Registrations, FusedLeakyRelu,
                         ::testing::Values("flrelu", "flrelu_by_hand"),
                         [](const auto& info) { return info.param; });

TEST(FusedLeakyReluCustomop, SchemasAreInferredFromTheStructs) {
  EXPECT_EQ(flrelu::fused_bias_leaky_relu_op().schema_text(),
            "flrelu::fused_bias_leaky_relu(Tensor x, Tensor bias, float negative_slope=0.2, "
            "float scale=1.4142135623730951) -> Tensor");
  EXPECT_EQ(customop::find_op("flrelu::fused_bias_leaky_relu_backward")->schema_text(),
            "flrelu::fused_bias_leaky_relu_backward(Tensor grad, Tensor out, float "
            "negative_slope, float scale) -> (Tensor, Tensor)");
}

TEST(FusedLeakyReluCustomop, CppCallersGetTheDefaults) {
  auto [x, bias] = inputs({2, 3}, false);
  const at::Tensor y = flrelu::fused_bias_leaky_relu_op()({.x = x, .bias = bias});
  EXPECT_TRUE(at::allclose(y, composite(x, bias)));
}

}  // namespace
