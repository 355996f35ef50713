// The harness's element loops (gradcheck/src/detail/values.h) against the ATen ops they stand
// in for: all_close against at::allclose(equal_nan=true), one_hot_like and set_row against
// select/fill_ and copy_.

#include "detail/values.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace {

namespace gd = customop::gradcheck::detail;

// Pairs around the boundary |a - b| = atol + |rtol b|, with NaN and infinities of both signs.
TEST(ValuesHelpers, AllCloseAgreesWithAtenAllclose) {
  torch::manual_seed(7);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> specials = {0.0, 1.0, -1.0, inf, -inf, std::nan(""), 1e-300};
  int checked = 0, close = 0;
  for (const double rtol : {0.0, 1e-3}) {
    for (const double atol : {0.0, 1e-5}) {
      for (int trial = 0; trial < 200; ++trial) {
        at::Tensor a = at::randn({5}, at::kDouble);
        // b within, at or just beyond the tolerance of a, or a special value.
        at::Tensor b = a + (at::rand({5}, at::kDouble) - 0.5) * 4 * (atol + rtol * a.abs());
        if (trial % 3 == 0) b[trial % 5] = specials[static_cast<size_t>(trial) % specials.size()];
        if (trial % 7 == 0)
          a[(trial + 1) % 5] = specials[static_cast<size_t>(trial / 7) % specials.size()];
        const bool want = at::allclose(a, b, rtol, atol, /*equal_nan=*/true);
        EXPECT_EQ(gd::all_close(gd::values_of(a), gd::values_of(b), rtol, atol), want)
            << "a " << a << " b " << b << " rtol " << rtol << " atol " << atol;
        ++checked;
        close += want;
      }
    }
  }
  // Hand-picked pairs: NaN matches NaN only; infinities match themselves only.
  const double nan = std::nan("");
  for (const auto& [x, y] : std::vector<std::pair<double, double>>{
           {nan, nan}, {nan, 1.0}, {inf, inf}, {inf, -inf}, {1.0, inf}, {1.0, 1.0 + 1e-9}}) {
    const at::Tensor a = at::tensor({x}, at::kDouble), b = at::tensor({y}, at::kDouble);
    EXPECT_EQ(gd::all_close(gd::values_of(a), gd::values_of(b), 0.0, 1e-8),
              at::allclose(a, b, 0.0, 1e-8, /*equal_nan=*/true))
        << x << " vs " << y;
  }
  EXPECT_GT(close, checked / 10);  // both verdicts occur
  EXPECT_LT(close, checked * 9 / 10);
}

TEST(ValuesHelpers, OneHotAndSetRowMatchTheAtenOps) {
  for (const auto dtype : {at::kDouble, at::kFloat, at::kHalf}) {
    const at::Tensor like = at::empty({2, 3}, at::TensorOptions().dtype(dtype));
    const at::Tensor g = gd::one_hot_like(like, 4);
    at::Tensor want = at::zeros({6}, like.options());
    want.select(0, 4).fill_(1);
    EXPECT_TRUE(at::equal(g, want.view({2, 3})));
    EXPECT_EQ(g.sizes(), like.sizes());
    EXPECT_FALSE(g.requires_grad());
  }
  at::Tensor block = at::zeros({3, 4}, at::kDouble);
  const at::Tensor row = at::randn({4}, at::kDouble);
  gd::set_row(block, 1, row);
  EXPECT_TRUE(at::equal(block[1], row));
  EXPECT_EQ(block.sum().item<double>(), row.sum().item<double>());
}

}  // namespace
