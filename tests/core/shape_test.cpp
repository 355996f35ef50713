// Op::shape: one shape function gives the fake (Meta) kernel and the outputs of out kernels
// (kernel(const Args&, outputs)), with the sizes, strides and dtype it states; an out kernel
// needs one; an out kernel that resizes or replaces its output is refused.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct RowScaleArgs {
  at::Tensor x;      // [N, D]
  at::Tensor scale;  // [D]
};

int shape_calls = 0;

// Output [N, D] laid out column-major (strides [1, N]): a layout no kernel would pick by
// accident, so the tests see that the stated strides reach the kernel and the fake.
customop::TensorSpec row_scale_shape(const RowScaleArgs& a) {
  ++shape_calls;
  TORCH_CHECK(a.x.dim() == 2, "row_scale: x must be [N, D], got ", a.x.sym_sizes());
  TORCH_SYM_CHECK(a.scale.sym_size(0).sym_eq(a.x.sym_size(1)), "row_scale: scale must be [D]");
  const c10::SymInt n = a.x.sym_size(0);
  return customop::TensorSpec::like(a.x).strided({c10::SymInt(1), n});
}

customop::Op<RowScaleArgs>& row_scale() {
  static auto& op = []() -> customop::Op<RowScaleArgs>& {
    auto& o =
        customop::define<RowScaleArgs>("core_shape::row_scale(Tensor x, Tensor scale) -> Tensor");
    o.shape(&row_scale_shape);
    o.impl(c10::DeviceType::CPU, [](const RowScaleArgs& a, const at::Tensor& out) {
      EXPECT_EQ(out.strides(), at::IntArrayRef({1, a.x.size(0)}));
      at::mul_out(const_cast<at::Tensor&>(out), a.x, a.scale);
    });
    return o;
  }();
  return op;
}

TEST(Shape, OutKernelWritesIntoTheOutputTheShapeFunctionStates) {
  auto& op = row_scale();
  EXPECT_TRUE(op.has_shape());
  EXPECT_TRUE(op.has_fake_kernel());
  const auto x = at::randn({3, 4}, at::kDouble);
  const auto s = at::randn({4}, at::kDouble);
  const at::Tensor y = op(RowScaleArgs{x, s});
  EXPECT_EQ(y.sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(y.strides(), at::IntArrayRef({1, 3}));
  EXPECT_TRUE(at::allclose(y, x * s));
}

TEST(Shape, FakeKernelComesFromTheShapeFunction) {
  auto& op = row_scale();
  const auto meta = at::device(at::kMeta).dtype(at::kFloat);
  const at::Tensor y = op(RowScaleArgs{at::empty({5, 2}, meta), at::empty({2}, meta)});
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), at::IntArrayRef({5, 2}));
  EXPECT_EQ(y.strides(), at::IntArrayRef({1, 5}));
  EXPECT_EQ(y.scalar_type(), at::kFloat);
}

TEST(Shape, ChecksInTheShapeFunctionRunBeforeAnyKernelOnEveryDevice) {
  auto& op = row_scale();
  const int before = shape_calls;
  EXPECT_THAT(error_message([&] {
                op(RowScaleArgs{at::randn({3, 4}), at::randn({5})});
              }),
              HasSubstr("row_scale: scale must be [D]"));
  const auto meta = at::device(at::kMeta);
  EXPECT_THAT(error_message([&] {
                op(RowScaleArgs{at::empty({3, 4}, meta), at::empty({5}, meta)});
              }),
              HasSubstr("row_scale: scale must be [D]"));
  EXPECT_EQ(shape_calls, before + 2);
}

struct SplitArgs {
  at::Tensor x;
};

TEST(Shape, SeveralReturnsTakeATupleOfSpecsAndOutputs) {
  using Ret = std::tuple<at::Tensor, at::Tensor>;
  auto& op =
      customop::define<SplitArgs, Ret>("core_shape::sign_and_count(Tensor x) -> (Tensor, Tensor)");
  op.shape([](const SplitArgs& a) {
    return std::tuple{customop::TensorSpec::like(a.x),
                      customop::TensorSpec::like(a.x).sized({}).typed(at::kLong)};
  });
  op.impl(c10::DeviceType::CPU, [](const SplitArgs& a, const Ret& outs) {
    std::get<0>(outs).copy_(a.x.sign());
    std::get<1>(outs).fill_((a.x > 0).sum().item<int64_t>());
  });
  const auto [sign, count] = op(SplitArgs{at::tensor({-1.0, 2.0, 3.0})});
  EXPECT_TRUE(at::equal(sign, at::tensor({-1.0, 1.0, 1.0})));
  EXPECT_EQ(count.dim(), 0);
  EXPECT_EQ(count.scalar_type(), at::kLong);
  EXPECT_EQ(count.item<int64_t>(), 2);
  const auto [msign, mcount] = op(SplitArgs{at::empty({7}, at::device(at::kMeta))});
  EXPECT_EQ(msign.sizes(), at::IntArrayRef({7}));
  EXPECT_EQ(mcount.scalar_type(), at::kLong);
}

TEST(Shape, OutKernelWithoutAShapeFunctionIsRefused) {
  auto& op = customop::define<SplitArgs>("core_shape::no_shape(Tensor x) -> Tensor");
  EXPECT_THAT(
      error_message(
          [&] { op.impl(c10::DeviceType::CPU, [](const SplitArgs&, const at::Tensor&) {}); }),
      AllOf(HasSubstr("core_shape::no_shape"), HasSubstr("CPU kernel"), HasSubstr("op.shape(fn)")));
  EXPECT_FALSE(op.has_kernel(c10::DeviceType::CPU));
}

TEST(Shape, ShapeFunctionAfterAFakeKernelIsRefused) {
  auto& op = customop::define<SplitArgs>("core_shape::fake_first(Tensor x) -> Tensor");
  op.impl_fake([](const SplitArgs& a) { return at::empty_like(a.x); });
  EXPECT_THAT(error_message([&] {
                op.shape([](const SplitArgs& a) { return customop::TensorSpec::like(a.x); });
              }),
              AllOf(HasSubstr("core_shape::fake_first"), HasSubstr("already registered")));
  EXPECT_FALSE(op.has_shape());
}

TEST(Shape, OutKernelThatResizesItsOutputIsRefused) {
  auto& op = customop::define<SplitArgs>("core_shape::resizer(Tensor x) -> Tensor");
  op.shape([](const SplitArgs& a) { return customop::TensorSpec::like(a.x); });
  op.impl(c10::DeviceType::CPU, [](const SplitArgs& a, const at::Tensor& out) {
    const_cast<at::Tensor&>(out).resize_({a.x.numel() + 1});
  });
  EXPECT_THAT(error_message([&] { op(SplitArgs{at::zeros({4})}); }),
              AllOf(HasSubstr("core_shape::resizer"), HasSubstr("output 0"), HasSubstr("sizes [4]"),
                    HasSubstr("sizes [5]")));
}

TEST(Shape, OutputStatedOnAnotherDeviceIsRefusedBeforeTheKernel) {
  auto& op = customop::define<SplitArgs>("core_shape::wrong_device(Tensor x) -> Tensor");
  op.shape([](const SplitArgs& a) {
    customop::TensorSpec s = customop::TensorSpec::like(a.x);
    s.device = c10::Device(c10::kMeta);  // e.g. copied from an argument on another device
    return s;
  });
  bool ran = false;
  op.impl(c10::DeviceType::CPU, [&ran](const SplitArgs&, const at::Tensor&) { ran = true; });
  EXPECT_THAT(error_message([&] { op(SplitArgs{at::zeros({2})}); }),
              AllOf(HasSubstr("core_shape::wrong_device"), HasSubstr("output 0 on meta"),
                    HasSubstr("CPU out kernel")));
  EXPECT_FALSE(ran);
}

}  // namespace
