// define_backward: the backward formula as a second op with its own kernels. Its inferred
// schema, the grads it returns by position mapped to argument names and validated, None for a
// Tensor? that was None, Tensor[] arguments, int returns (no grad field), double backward with
// and without a formula of the backward op, and the registration errors.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <tuple>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFile = __FILE__;

// ---- x * y, with a backward kernel (grad * y, grad * x) --------------------------------------

struct MulArgs {
  at::Tensor x;
  at::Tensor y;
};
struct MulBackwardArgs {
  at::Tensor grad{};
  at::Tensor x;
  at::Tensor y;
};
using Pair = std::tuple<at::Tensor, at::Tensor>;

MulBackwardArgs save_mul(const MulArgs& a, const at::Tensor& /*out*/) {
  return {.x = a.x, .y = a.y};
}
Pair mul_backward_kernel(const MulBackwardArgs& b) { return {b.grad * b.y, b.grad * b.x}; }

int mul_backward_line = 0;

// The backward op without a formula of its own: first order only.
customop::Op<MulArgs>& mul_op() {
  static auto& op = []() -> customop::Op<MulArgs>& {
    auto& o = customop::define<MulArgs>("core_bwdop::mul");
    o.impl(c10::DeviceType::CPU, [](const MulArgs& a) { return a.x * a.y; });
    // clang-format off
    mul_backward_line = __LINE__; auto& b = o.define_backward<MulBackwardArgs>(&save_mul);
    // clang-format on
    b.impl(c10::DeviceType::CPU, &mul_backward_kernel);
    return o;
  }();
  return op;
}

// The backward op with a formula: d(grad * y, grad * x) / d(grad, x, y) given (gg_x, gg_y) is
// (gg_x * y + gg_y * x, grad * gg_y, grad * gg_x).
customop::Op<MulArgs>& mul_twice_differentiable_op() {
  static auto& op = []() -> customop::Op<MulArgs>& {
    auto& o = customop::define<MulArgs>("core_bwdop::mul2");
    o.impl(c10::DeviceType::CPU, [](const MulArgs& a) { return a.x * a.y; });
    auto& b = o.define_backward<MulBackwardArgs>(&save_mul);
    b.impl(c10::DeviceType::CPU, &mul_backward_kernel);
    b.impl_autograd([](const MulBackwardArgs& in, const Pair&) { return in; },
                    [](const MulBackwardArgs& s, const at::Tensor& gg_x, const at::Tensor& gg_y) {
                      return customop::Grads{{"grad", gg_x * s.y + gg_y * s.x},
                                             {"x", s.grad * gg_y},
                                             {"y", s.grad * gg_x}};
                    });
    return o;
  }();
  return op;
}

at::Tensor leaf(std::vector<double> values) {
  return at::tensor(values, at::kDouble).requires_grad_();
}

TEST(BackwardOp, IsAnOpWhoseSchemaIsInferredFromTheStructWithOneGradPerTensorArgument) {
  mul_op();
  const customop::OpCore* b = customop::find_op("core_bwdop::mul_backward");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->schema_text(),
            "core_bwdop::mul_backward(Tensor grad, Tensor x, Tensor y) -> (Tensor, Tensor)");
  EXPECT_TRUE(b->has_kernel(c10::DeviceType::CPU));
  EXPECT_FALSE(b->has_autograd());
  EXPECT_TRUE(mul_op().has_autograd());
}

TEST(BackwardOp, GradsComeFromTheBackwardKernelByArgumentPosition) {
  const at::Tensor x = leaf({1.0, 2.0, 3.0});
  const at::Tensor y = leaf({4.0, 5.0, 6.0});
  const at::Tensor w = at::tensor({1.0, -1.0, 0.5}, at::kDouble);
  (mul_op()(MulArgs{x, y}) * w).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), w * y.detach()));
  EXPECT_TRUE(at::equal(y.grad(), w * x.detach()));
}

TEST(BackwardOp, DoubleBackwardWithoutAFormulaOfTheBackwardOpIsRefusedNamingIt) {
  const at::Tensor x = leaf({1.0, 2.0});
  const at::Tensor y = leaf({3.0, 4.0});
  const at::Tensor out = mul_op()(MulArgs{x, y}).sum();
  EXPECT_THAT(error_message([&] {
                torch::autograd::grad({out}, {x}, {}, /*retain_graph=*/true,
                                      /*create_graph=*/true);
              }),
              AllOf(HasSubstr("Autograd has not been implemented for operator "
                              "core_bwdop::mul_backward"),
                    HasSubstr("impl_save_for_backward")));
}

TEST(BackwardOp, DoubleBackwardRunsThroughTheBackwardOpsFormula) {
  const at::Tensor x = leaf({1.0, 2.0});
  const at::Tensor y = leaf({3.0, 4.0});
  const at::Tensor out = mul_twice_differentiable_op()(MulArgs{x, y}).sum();
  // d out / dx = y, so d (sum of d out / dx) / dy = 1 and / dx = 0.
  const auto gx = torch::autograd::grad({out}, {x}, {}, true, /*create_graph=*/true)[0];
  EXPECT_TRUE(at::equal(gx.detach(), y.detach()));
  const auto second = torch::autograd::grad({gx.sum()}, {x, y}, {}, true, false, true);
  EXPECT_FALSE(second[0].defined() && second[0].ne(0).any().item<bool>());
  EXPECT_TRUE(at::equal(second[1], at::ones({2}, at::kDouble)));
}

// ---- Tensor? that may be None, Tensor[], an int return -----------------------------------------

struct AffineArgs {
  at::Tensor x;
  std::optional<at::Tensor> bias;
  double alpha;
};
struct AffineBackwardArgs {
  at::Tensor grad{};
  double alpha;
  bool has_bias;
  int64_t bias_size;
};

customop::Op<AffineArgs>& affine_op() {
  static auto& op = []() -> customop::Op<AffineArgs>& {
    auto& o = customop::define<AffineArgs>(
        "core_bwdop::affine(Tensor x, Tensor? bias, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const AffineArgs& a) {
      return a.bias.has_value() ? a.x * a.alpha + *a.bias : a.x * a.alpha;
    });
    auto& b = o.define_backward<AffineBackwardArgs>([](const AffineArgs& a, const at::Tensor&) {
      const bool has_bias = a.bias.has_value() && a.bias->defined();
      return AffineBackwardArgs{
          .alpha = a.alpha, .has_bias = has_bias, .bias_size = has_bias ? a.bias->size(0) : 0};
    });
    b.impl(c10::DeviceType::CPU, [](const AffineBackwardArgs& in) -> Pair {
      // An undefined Tensor: no grad (None), as the None bias requires.
      return {in.grad * in.alpha, in.has_bias ? in.grad.sum_to_size({in.bias_size}) : at::Tensor()};
    });
    return o;
  }();
  return op;
}

TEST(BackwardOp, AnUndefinedGradIsNoneAndServesATensorOptionalThatWasNone) {
  affine_op();
  EXPECT_EQ(customop::find_op("core_bwdop::affine_backward")->schema_text(),
            "core_bwdop::affine_backward(Tensor grad, float alpha, bool has_bias, int bias_size) "
            "-> (Tensor, Tensor)");
  const at::Tensor x = at::ones({2, 3}, at::kDouble).requires_grad_();
  affine_op()(AffineArgs{x, std::nullopt, 2.0}).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({2, 3}, 2.0, at::kDouble)));

  const at::Tensor x2 = at::ones({2, 3}, at::kDouble).requires_grad_();
  const at::Tensor bias = at::zeros({3}, at::kDouble).requires_grad_();
  affine_op()(AffineArgs{x2, bias, 2.0}).sum().backward();
  EXPECT_TRUE(at::equal(bias.grad(), at::full({3}, 2.0, at::kDouble)));
}

struct SumListArgs {
  std::vector<at::Tensor> xs;
};
struct SumListBackwardArgs {
  at::Tensor grad{};  // of the Tensor return; the int return has no grad field
  int64_t n;
  bool wrong_length;
};

customop::Op<SumListArgs, std::tuple<at::Tensor, int64_t>>& sum_list_op() {
  using Ret = std::tuple<at::Tensor, int64_t>;
  static auto& op = []() -> customop::Op<SumListArgs, Ret>& {
    auto& o = customop::define<SumListArgs, Ret>("core_bwdop::sum_list");
    o.impl(c10::DeviceType::CPU, [](const SumListArgs& a) {
      at::Tensor s = at::zeros_like(a.xs.at(0));
      for (const auto& t : a.xs) s = s + t;
      return Ret{s, static_cast<int64_t>(a.xs.size())};
    });
    auto& b = o.define_backward<SumListBackwardArgs>([](const SumListArgs& a, const Ret&) {
      const auto n = static_cast<int64_t>(a.xs.size());
      return SumListBackwardArgs{.n = n, .wrong_length = a.xs.size() == 3};
    });
    b.impl(c10::DeviceType::CPU, [](const SumListBackwardArgs& in) {
      return std::vector<at::Tensor>(static_cast<std::size_t>(in.n - (in.wrong_length ? 1 : 0)),
                                     in.grad);
    });
    return o;
  }();
  return op;
}

TEST(BackwardOp, ATensorListArgumentGetsAListAndAnIntReturnNoGradField) {
  sum_list_op();
  EXPECT_EQ(customop::find_op("core_bwdop::sum_list_backward")->schema_text(),
            "core_bwdop::sum_list_backward(Tensor grad, int n, bool wrong_length) -> Tensor[]");
  const at::Tensor a = leaf({1.0, 2.0});
  const at::Tensor b = leaf({3.0, 4.0});
  auto [s, n] = sum_list_op()(SumListArgs{{a, b}});
  EXPECT_EQ(n, 2);
  (s * at::tensor({2.0, 3.0}, at::kDouble)).sum().backward();
  EXPECT_TRUE(at::equal(a.grad(), at::tensor({2.0, 3.0}, at::kDouble)));
  EXPECT_TRUE(at::equal(b.grad(), at::tensor({2.0, 3.0}, at::kDouble)));
}

TEST(BackwardOp, TheBackwardKernelsGradsAreValidatedAsTheReferenceDoes) {
  const at::Tensor a = leaf({1.0});
  const at::Tensor b = leaf({2.0});
  const at::Tensor c = leaf({3.0});
  auto [s, n] = sum_list_op()(SumListArgs{{a, b, c}});
  EXPECT_THAT(error_message([&] { s.sum().backward(); }),
              AllOf(HasSubstr("In the backward function defined for core_bwdop::sum_list"),
                    HasSubstr("for input 'xs' expected the grad_input dict to hold a list of 3 "
                              "gradients but got 2")));
}

TEST(BackwardOp, ASecondFormulaIsRefusedNamingTheFirst) {
  mul_op();
  EXPECT_THAT(error_message([&] { mul_op().define_backward<MulBackwardArgs>(&save_mul); }),
              AllOf(HasSubstr("core_bwdop::mul"),
                    HasSubstr(kFile + ":" + std::to_string(mul_backward_line))));
}

}  // namespace
