// impl_fake: the fake (Meta) kernel, its registration rules, the error for an op without one,
// autograd over meta tensors, and the forward-mode AD error.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/forward_grad.h>

#include <string>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct ScaleArgs {
  at::Tensor x;
  double alpha;
};
struct ScaleSaved {
  double alpha;
};

const std::string kFile = __FILE__;

customop::Op<ScaleArgs>& scale_with_fake() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_fake::scale(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_fake(
        [](const ScaleArgs& a) { return at::empty_symint(a.x.sym_sizes(), a.x.options()); });
    o.impl_autograd([](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; },
                    [](const ScaleSaved& s, const at::Tensor& g) {
                      return customop::Grads{{"x", g * s.alpha}};
                    });
    return o;
  }();
  return op;
}

TEST(FakeKernel, MetaTensorsReachTheFakeKernelAndCpuTensorsTheCpuKernel) {
  auto& op = scale_with_fake();
  EXPECT_TRUE(op.has_fake_kernel());
  EXPECT_TRUE(op.has_kernel(c10::DeviceType::Meta));
  const at::Tensor meta =
      op(ScaleArgs{at::empty({3, 5}, at::device(at::kMeta).dtype(at::kDouble)), 2.0});
  EXPECT_TRUE(meta.is_meta());
  EXPECT_EQ(meta.sizes(), at::IntArrayRef({3, 5}));
  EXPECT_EQ(meta.scalar_type(), at::kDouble);
  const auto x = at::arange(4, at::kDouble);
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 3.0}), x * 3));
}

TEST(FakeKernel, AutogradOverMetaTensorsRunsTheFormula) {
  auto& op = scale_with_fake();
  const auto x = at::empty({4}, at::device(at::kMeta).dtype(at::kDouble)).requires_grad_();
  const at::Tensor y = op(ScaleArgs{x, 2.0});
  ASSERT_TRUE(y.requires_grad());
  const auto g = torch::autograd::grad({y}, {x}, {at::ones_like(y)});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_TRUE(g[0].is_meta());
  EXPECT_EQ(g[0].sizes(), x.sizes());
}

TEST(FakeKernel, WithoutOneMetaCallsNameTheOpAndHowToAddIt) {
  auto& op = customop::define<ScaleArgs>("core_fake::no_fake(Tensor x, float alpha) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  EXPECT_FALSE(op.has_fake_kernel());
  const std::string what = error_message([&] {
    op(ScaleArgs{at::empty({2}, at::device(at::kMeta)), 1.0});
  });
  EXPECT_THAT(what, AllOf(HasSubstr("core_fake::no_fake: no fake (Meta) kernel registered"),
                          HasSubstr("torch.compile"), HasSubstr("op.impl_fake(kernel)"),
                          HasSubstr("at::empty_symint")));
}

TEST(FakeKernel, SecondFakeKernelIsRefusedNamingTheFirst) {
  auto& op = customop::define<ScaleArgs>("core_fake::twice(Tensor x, float alpha) -> Tensor");
  auto fake = [](const ScaleArgs& a) { return at::empty_like(a.x); };
  // clang-format off
  op.impl_fake(fake); const int first_line = __LINE__;
  const std::string what = error_message([&] { op.impl_fake(fake); }); const int second_line = __LINE__;
  // clang-format on
  EXPECT_THAT(what, AllOf(HasSubstr("core_fake::twice: a fake (Meta) impl_fake is already "
                                    "registered at " +
                                    kFile + ":" + std::to_string(first_line)),
                          HasSubstr(kFile + ":" + std::to_string(second_line))));
}

TEST(FakeKernel, ImplForMetaPointsToImplFake) {
  auto& op = customop::define<ScaleArgs>("core_fake::impl_meta(Tensor x, float alpha) -> Tensor");
  const std::string what = error_message(
      [&] { op.impl(c10::DeviceType::Meta, [](const ScaleArgs& a) { return a.x; }); });
  EXPECT_THAT(what, AllOf(HasSubstr("core_fake::impl_meta"), HasSubstr("op.impl_fake(kernel)")));
  EXPECT_FALSE(op.has_fake_kernel());
}

TEST(FakeKernel, ForwardModeAdNamesTheOpAndTheArgument) {
  auto& op = scale_with_fake();
  const uint64_t level = torch::autograd::ForwardADLevel::get_next_idx();
  const auto x = at::randn({3}, at::kDouble);
  const auto dual = at::_make_dual(x, at::ones_like(x), static_cast<int64_t>(level));
  const std::string what = error_message([&] { op(ScaleArgs{dual, 2.0}); });
  torch::autograd::ForwardADLevel::release_idx(level);
  EXPECT_THAT(what, AllOf(HasSubstr("core_fake::scale: forward-mode AD is not supported"),
                          HasSubstr("argument 'x' carries a tangent")));
  // Without a dual level the check costs nothing and the op runs.
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 2.0}), x * 2));
}

}  // namespace
