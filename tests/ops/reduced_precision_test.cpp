// The float16/bfloat16 CPU kernels accumulate in float32 (plugin/ops/cpu/vec_io.h): inputs
// whose float32 result is exact in the dtype, chosen so a kernel that summed in the dtype
// itself would stall (bfloat16 stops counting ones at 256, float16 at 2048: the spacing there
// exceeds 1), and y is rounded once. Named Cpu/*Forward* so the lower instruction-set builds
// run them too (CMakeLists.txt).

#include <customop/ops/bias_gelu.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include "support/tensor_assertions.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using customop::ops::BiasGeluArgs;
using customop::ops::MaskedSoftmaxArgs;
using customop::ops::RmsNormArgs;
using customop::ops::WeightedSumArgs;
using customop::testing::tensors_equal;

class ReducedForward : public ::testing::TestWithParam<c10::ScalarType> {
 protected:
  at::TensorOptions opts() const { return at::TensorOptions().dtype(GetParam()); }
};

// 2^18 squares of 1 per row: 4,096 per lane of the widest (4 x 16 lanes) accumulator.
TEST_P(ReducedForward, RmsNormSumsSquaresInFloat32) {
  const auto x = at::ones({3, 1 << 18}, opts());
  const auto w = at::full({1 << 18}, 0.5, opts());
  const auto y = customop::ops::rms_norm_op()(RmsNormArgs{x, w, 0.0});
  EXPECT_EQ(y.scalar_type(), GetParam());
  EXPECT_TRUE(tensors_equal(y, at::full_like(x, 0.5)));
}

// 2^16 equal logits per row: exp(0) = 1 summed to 65536 (4,096 per lane of AVX-512), so each
// output is 2^-16 (a float16 subnormal, exact); along dim 0 the column path sums the same.
TEST_P(ReducedForward, MaskedSoftmaxSumsInFloat32) {
  const auto x = at::zeros({2, 1 << 16}, opts());
  const auto row = customop::ops::masked_softmax_op()(MaskedSoftmaxArgs{x, std::nullopt, -1});
  EXPECT_EQ(row.scalar_type(), GetParam());
  EXPECT_TRUE(tensors_equal(row, at::full_like(x, 1.0 / 65536)));
  const auto xt = at::zeros({1 << 16, 3}, opts());
  const auto col = customop::ops::masked_softmax_op()(MaskedSoftmaxArgs{xt, std::nullopt, 0});
  EXPECT_TRUE(tensors_equal(col, at::full_like(xt, 1.0 / 65536)));
}

// 3,000 inputs of ones, weight 1: 3000 is a float16 and a bfloat16 value (3000 = 375 * 8;
// bfloat16 spacing 16 there: 2992 and 3008 neighbour it, so the float32 sum is rounded once).
TEST_P(ReducedForward, WeightedSumAccumulatesInFloat32) {
  std::vector<at::Tensor> xs(3000, at::ones({37}, opts()));
  const std::vector<double> w(3000, 1.0);
  const auto y = customop::ops::weighted_sum_op()(WeightedSumArgs{.inputs = xs, .weights = w});
  EXPECT_EQ(y.scalar_type(), GetParam());
  EXPECT_TRUE(tensors_equal(y, at::full({37}, 3000.0, opts())));
}

// bias_gelu in 16 bits is the float32 kernel's gelu of s = x + b rounded to the dtype, rounded
// once: bit for bit (NaN for NaN), in rows that take the two-vector steps (whose bfloat16 lanes
// go through the unordered, shuffle-free widening of cpu/vec_io.h) and a partial last vector,
// with zeros, infinities, NaN and values whose sum lands between two 16-bit neighbours.
TEST_P(ReducedForward, BiasGeluRoundsTheFloat32KernelOnce) {
  torch::manual_seed(31);
  const int64_t d = 1000 + 37;
  auto x = (at::randn({3, d}) * 3).to(GetParam());
  const auto b = (at::randn({d}) * 3).to(GetParam());
  const double inf = std::numeric_limits<double>::infinity();
  x[0][1] = inf;
  x[0][2] = -inf;
  x[0][3] = std::nan("");
  x[1][5] = std::nan("");      // in a two-vector step
  x[1][d - 1] = std::nan("");  // in the partial rest
  x[2][0] = 0.0;
  const auto y = customop::ops::bias_gelu_op()(BiasGeluArgs{x, b, "none"});
  const auto s = (x + b).to(at::kFloat);  // the add in the dtype, as the kernel rounds it
  const auto expected = customop::ops::bias_gelu_op()(BiasGeluArgs{s, at::zeros({d}), "none"});
  EXPECT_TRUE(tensors_equal(y, expected.to(GetParam())));
  // One NaN bit pattern wherever the element falls in the row.
  const auto bits = y.view(at::kShort);
  EXPECT_EQ(bits[1][5].item<int16_t>(), bits[1][d - 1].item<int16_t>());
}

// Every 16-bit value of s through both GELU forms: the float32 kernel's result rounded once, bit
// for bit (bfloat16 takes these from a table of its own results, built once per instruction
// set; float16 computes them). One row holds all 2^16 bit patterns, in order, so each lane
// position of the two-vector steps sees every kind of value; b = -0 keeps s = x (-0 included).
TEST_P(ReducedForward, BiasGeluOfEveryValueIsTheFloat32KernelsRoundedOnce) {
  const auto x = at::arange(1 << 16, at::kInt).to(at::kShort).view(GetParam()).reshape({2, -1});
  const auto b = at::full({1 << 15}, -0.0, opts());
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const auto y = customop::ops::bias_gelu_op()(BiasGeluArgs{x, b, approximate});
    const auto expected = customop::ops::bias_gelu_op()(
        BiasGeluArgs{x.to(at::kFloat), at::full({1 << 15}, -0.0), approximate});
    const auto e = expected.to(GetParam());
    EXPECT_TRUE(tensors_equal(y, e));
    // Bits too (the sign of a zero). NaN payloads aside: the reference's .to keeps them;
    // bfloat16 gives one NaN pattern, float16 what the build's conversion keeps.
    const auto nan = e.isnan();
    EXPECT_TRUE(
        at::equal(y.view(at::kShort).masked_select(~nan), e.view(at::kShort).masked_select(~nan)));
    if (GetParam() == at::kBFloat16) {
      const auto nan_bits = y.view(at::kShort).masked_select(nan);
      EXPECT_TRUE(nan_bits.numel() > 0 && (nan_bits == nan_bits[0]).all().item<bool>());
    }
  }
}

std::string dtype_param_name(const ::testing::TestParamInfo<c10::ScalarType>& info) {
  return std::string(c10::getDtypeNames(info.param).first);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ReducedForward, ::testing::Values(at::kHalf, at::kBFloat16),
                         dtype_param_name);

}  // namespace
