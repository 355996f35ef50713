// Autocast policies declared with the op (op.autocast): what each policy casts under
// at::autocast, what it never casts, the dtype that comes out and of the grads, the refusal,
// and the built-in ops under a bfloat16 autocast on CPU.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using customop::AutocastPolicy;
using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct PairArgs {
  at::Tensor a;
  at::Tensor b;
};

/// a * b on CPU, refusing mixed dtypes as the built-in ops do; one op per policy.
customop::Op<PairArgs>& pair_op(AutocastPolicy policy) {
  static std::map<AutocastPolicy, customop::Op<PairArgs>*> ops;
  auto& slot = ops[policy];
  if (slot == nullptr) {
    const std::string name =
        "core_autocast::mul_" + std::string(customop::autocast_policy_name(policy));
    auto& op = customop::define<PairArgs>(name + "(Tensor a, Tensor b) -> Tensor");
    op.impl(c10::DeviceType::CPU, [name](const PairArgs& p) {
      TORCH_CHECK(p.a.scalar_type() == p.b.scalar_type(), name, ": b must have a's dtype ",
                  p.a.scalar_type(), ", but got ", p.b.scalar_type());
      return p.a * p.b;
    });
    op.impl_autograd(
        [](const PairArgs& p, const at::Tensor&) {
          return PairArgs{p.a, p.b};
        },
        [](const PairArgs& s, const at::Tensor& g) {
          return customop::Grads{{"a", g * s.b}, {"b", g * s.a}};
        });
    op.autocast(policy);
    slot = &op;
  }
  return *slot;
}

/// at::autocast on CPU with `dtype` for the scope's lifetime (the C++ frontend's way).
struct CpuAutocast {
  explicit CpuAutocast(c10::ScalarType dtype)
      : was_(at::autocast::is_autocast_enabled(at::kCPU)),
        dtype_(at::autocast::get_autocast_dtype(at::kCPU)) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
  }
  ~CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, was_);
    at::autocast::set_autocast_dtype(at::kCPU, dtype_);
    at::autocast::clear_cache();
  }
  bool was_;
  c10::ScalarType dtype_;
};

at::Tensor randn(std::vector<int64_t> shape, c10::ScalarType dtype) {
  return at::randn(shape, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

TEST(Autocast, Float32CastsLowPrecisionUpAndGradsComeBackInTheirDtypes) {
  auto& op = pair_op(AutocastPolicy::kFloat32);
  const at::Tensor a = randn({4}, at::kBFloat16).requires_grad_(true);
  const at::Tensor b = randn({4}, at::kFloat).requires_grad_(true);
  at::Tensor y;
  {
    CpuAutocast ac(at::kBFloat16);
    y = op(PairArgs{a, b});
  }
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(y, a.detach().to(at::kFloat) * b.detach()));
  y.sum().backward();
  EXPECT_EQ(a.grad().scalar_type(), at::kBFloat16);
  EXPECT_EQ(b.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(op.autocast_policy(), AutocastPolicy::kFloat32);
}

TEST(Autocast, LowerPrecisionCastsFloat32DownToTheAutocastDtypeButNeverFloat64) {
  auto& op = pair_op(AutocastPolicy::kLowerPrecision);
  CpuAutocast ac(at::kBFloat16);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kFloat), randn({3}, at::kFloat)}).scalar_type(),
            at::kBFloat16);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kDouble), randn({3}, at::kDouble)}).scalar_type(),
            at::kDouble);
  // Integer tensors are not floating: never cast (the op's own check sees them).
  const auto ints = at::arange(3, at::kLong);
  EXPECT_THAT(error_message([&] {
                op(PairArgs{ints, randn({3}, at::kFloat)});
              }),
              HasSubstr("core_autocast::mul_lower_precision: b must have a's dtype Long"));
}

TEST(Autocast, PromoteCastsToTheWidestFloatingDtype) {
  auto& op = pair_op(AutocastPolicy::kPromote);
  CpuAutocast ac(at::kBFloat16);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kBFloat16), randn({3}, at::kFloat)}).scalar_type(),
            at::kFloat);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kBFloat16), randn({3}, at::kHalf)}).scalar_type(),
            at::kFloat);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kFloat), randn({3}, at::kDouble)}).scalar_type(),
            at::kDouble);
}

TEST(Autocast, RefuseNamesTheOpAndWhereItWasDeclared) {
  auto& op = pair_op(AutocastPolicy::kRefuse);
  const auto a = randn({3}, at::kFloat);
  EXPECT_TRUE(at::equal(op(PairArgs{a, a}), a * a));  // outside autocast it runs
  CpuAutocast ac(at::kBFloat16);
  EXPECT_THAT(error_message([&] {
                op(PairArgs{a, a});
              }),
              AllOf(HasSubstr("core_autocast::mul_refuse: refuses to run under autocast (cpu), "
                              "as declared at "),
                    HasSubstr("autocast_test.cpp:"), HasSubstr("(AutocastPolicy::kRefuse)")));
}

TEST(Autocast, OutsideAutocastMixedDtypesStillReachTheKernelsCheck) {
  auto& op = pair_op(AutocastPolicy::kFloat32);
  EXPECT_THAT(
      error_message([&] {
        op(PairArgs{randn({3}, at::kBFloat16), randn({3}, at::kFloat)});
      }),
      HasSubstr("core_autocast::mul_float32: b must have a's dtype BFloat16, but got Float"));
}

TEST(Autocast, ASecondDeclarationIsRefusedNamingBoth) {
  auto& op = pair_op(AutocastPolicy::kPromote);
  EXPECT_THAT(error_message([&] { op.autocast(AutocastPolicy::kFloat32); }),
              AllOf(HasSubstr("core_autocast::mul_promote: an autocast policy (promote) is "
                              "already declared at "),
                    HasSubstr("autocast_test.cpp:"), HasSubstr("is refused")));
}

TEST(Autocast, AnOpWithoutAPolicySeesTheDtypesItIsGiven) {
  auto& op = customop::define<PairArgs>("core_autocast::mul_none(Tensor a, Tensor b) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const PairArgs& p) { return p.a * p.b; });
  EXPECT_FALSE(op.autocast_policy().has_value());
  CpuAutocast ac(at::kBFloat16);
  EXPECT_EQ(op(PairArgs{randn({3}, at::kFloat), randn({3}, at::kFloat)}).scalar_type(), at::kFloat);
}

}  // namespace
