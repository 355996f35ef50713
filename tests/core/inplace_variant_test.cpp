// The in-place variant an op may declare (Op::inplace_variant, op_inplace_variant.cpp): its
// schema and tag, the result written into the first argument through the functional op's
// kernel (any layout, memory shared with another argument), the version bump, the refusals
// (grad, an expanded argument, a result of other sizes or dtype) leaving the argument
// unchanged, the opt-in to grads through the functional op (InplaceGrad::kThroughFunctional),
// the fake kernel, and the declaration's refusals.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct RowScaleArgs {
  at::Tensor x;
  at::Tensor scale;
  bool widen = false;  // planted for the refusal test: a result one column wider than x
};

customop::Op<RowScaleArgs>& row_scale_op() {
  static auto& op = []() -> customop::Op<RowScaleArgs>& {
    auto& o = customop::define<RowScaleArgs>(
        "core_inplace::row_scale(Tensor x, Tensor scale, *, bool widen=False) -> Tensor");
    o.shape([](const RowScaleArgs& a) {
      auto spec = customop::TensorSpec::like(a.x);
      if (a.widen) spec.sizes.back() = spec.sizes.back() + 1;
      return spec;
    });
    o.impl(c10::DeviceType::CPU, [](const RowScaleArgs& a, const at::Tensor& out) {
      // Reads x's whole row through a sum before writing: an in-place kernel writing x as it
      // goes would see its own writes. Computed into `out`, then copied: safe.
      const at::Tensor r = a.x * a.scale + a.x.sum(-1, /*keepdim=*/true);
      out.narrow(-1, 0, a.x.size(-1)).copy_(r);
      if (a.widen) out.narrow(-1, a.x.size(-1), 1).zero_();
    });
    o.inplace_variant();
    return o;
  }();
  return op;
}

at::Tensor expected(const at::Tensor& x, const at::Tensor& s) {
  return x * s + x.sum(-1, /*keepdim=*/true);
}

c10::OperatorHandle variant() {
  row_scale_op();
  return c10::Dispatcher::singleton().findSchemaOrThrow("core_inplace::row_scale_", "");
}

at::Tensor call_inplace(const at::Tensor& x, const at::Tensor& s, bool widen = false) {
  static const auto h = variant().typed<at::Tensor&(at::Tensor&, const at::Tensor&, bool)>();
  return h.call(const_cast<at::Tensor&>(x), s, widen);
}

TEST(InplaceVariant, SchemaTagAndHandle) {
  const auto& op = row_scale_op();
  const auto h = variant();
  EXPECT_EQ(c10::toString(h.schema()),
            "core_inplace::row_scale_(Tensor(a!) x, Tensor scale, *, bool widen=False) -> "
            "Tensor(a!)");
  EXPECT_TRUE(h.hasTag(at::Tag::inplace));
  ASSERT_NE(op.inplace_handle(), nullptr);
  EXPECT_EQ(op.inplace_handle()->schema().name(), "core_inplace::row_scale_");
}

TEST(InplaceVariant, WritesTheFunctionalResultIntoXAndReturnsIt) {
  const at::Tensor x = at::randn({3, 4}, at::kDouble);
  const at::Tensor s = at::randn({4}, at::kDouble);
  const at::Tensor want = expected(x, s);
  const auto version = x._version();
  const at::Tensor r = call_inplace(x, s);
  EXPECT_TRUE(r.is_same(x));
  EXPECT_TRUE(at::allclose(x, want));
  EXPECT_GT(x._version(), version);
}

TEST(InplaceVariant, AnyLayoutAndMemorySharedWithAnotherArgument) {
  // x transposed in memory keeps its strides; the result lands in logical order.
  const at::Tensor base = at::randn({4, 3}, at::kDouble);
  const at::Tensor x = base.t();
  const at::Tensor s = at::randn({4}, at::kDouble);
  const at::Tensor want = expected(x.clone(), s);
  call_inplace(x, s);
  EXPECT_EQ(x.strides(), base.t().strides());
  EXPECT_TRUE(at::allclose(x, want));
  // scale is a view of x's first row: computed before x is written.
  const at::Tensor y = at::randn({3, 4}, at::kDouble);
  const at::Tensor row = y[0];
  const at::Tensor want2 = expected(y.clone(), row.clone());
  call_inplace(y, row);
  EXPECT_TRUE(at::allclose(y, want2));
}

TEST(InplaceVariant, RefusalsNameOpAndArgumentAndLeaveXUnchanged) {
  const at::Tensor s = at::randn({4}, at::kDouble);
  {
    const at::Tensor x = at::randn({3, 4}, at::kDouble);
    const at::Tensor before = x.clone();
    EXPECT_THAT(error_message([&] { call_inplace(x, s, /*widen=*/true); }),
                AllOf(HasSubstr("core_inplace::row_scale_: argument 'x' receives the result"),
                      HasSubstr("[3, 5]"), HasSubstr("[3, 4]"), HasSubstr("nothing was written")));
    EXPECT_TRUE(at::equal(x, before));
  }
  {
    const at::Tensor x = at::randn({1, 4}, at::kDouble).expand({3, 4});
    EXPECT_THAT(error_message([&] { call_inplace(x, s); }),
                AllOf(HasSubstr("argument 'x' is expanded"), HasSubstr("stride of 0")));
  }
  {
    const at::Tensor x = at::randn({3, 4}, at::kDouble).requires_grad_();
    const at::Tensor before = x.detach().clone();
    EXPECT_THAT(error_message([&] { call_inplace(x, s); }),
                AllOf(HasSubstr("core_inplace::row_scale_: the in-place variant is not "
                                "differentiable, but argument 'x' requires grad"),
                      HasSubstr("core_inplace::row_scale to differentiate")));
    EXPECT_TRUE(at::equal(x.detach(), before));
    // Under no_grad (an optimizer-style update) it runs.
    const at::NoGradGuard no_grad;
    call_inplace(x, s);
    EXPECT_TRUE(at::allclose(x.detach(), expected(before, s)));
  }
}

TEST(InplaceVariant, MetaTensorsAndInferenceMode) {
  const at::Tensor x = at::empty({3, 4}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const at::Tensor s = at::empty({4}, x.options());
  EXPECT_TRUE(call_inplace(x, s).is_same(x));
  const c10::InferenceMode guard;
  const at::Tensor y = at::randn({2, 4}, at::kDouble);
  const at::Tensor s2 = at::randn({4}, at::kDouble);
  const at::Tensor want = expected(y, s2);
  call_inplace(y, s2);
  EXPECT_TRUE(at::allclose(y, want));
}

// row_scale again, differentiable in place (InplaceGrad::kThroughFunctional), with its
// backward: d/dx (x * s + sum(x, -1)) . g = g * s + sum(g, -1); d/ds = sum over rows of g * x.
struct ScaleSaved {
  at::Tensor x;
  at::Tensor scale;
};
struct RowScaleGrads {
  at::Tensor x;
  at::Tensor scale;
};

customop::Op<RowScaleArgs>& row_scale_grad_op() {
  static auto& op = []() -> customop::Op<RowScaleArgs>& {
    auto& o = customop::define<RowScaleArgs>(
        "core_inplace::row_scale_grad(Tensor x, Tensor scale, *, bool widen=False) -> Tensor");
    o.shape([](const RowScaleArgs& a) { return customop::TensorSpec::like(a.x); });
    o.impl(c10::DeviceType::CPU, [](const RowScaleArgs& a, const at::Tensor& out) {
      out.copy_(a.x * a.scale + a.x.sum(-1, /*keepdim=*/true));
    });
    o.inplace_variant(customop::InplaceGrad::kThroughFunctional);
    o.impl_autograd(
        [](const RowScaleArgs& a, const at::Tensor&) {
          return ScaleSaved{a.x, a.scale};
        },
        [](const ScaleSaved& s, const at::Tensor& g) {
          return RowScaleGrads{g * s.scale + g.sum(-1, /*keepdim=*/true),
                               (g * s.x).sum_to_size(s.scale.sizes())};
        });
    return o;
  }();
  return op;
}

at::Tensor call_inplace_grad(const at::Tensor& x, const at::Tensor& s) {
  row_scale_grad_op();
  static const auto h = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("core_inplace::row_scale_grad_", "")
                            .typed<at::Tensor&(at::Tensor&, const at::Tensor&, bool)>();
  return h.call(const_cast<at::Tensor&>(x), s, false);
}

TEST(InplaceVariant, OptedInGradsAreTheFunctionalOpsThroughTheWrite) {
  EXPECT_EQ(row_scale_grad_op().inplace_grad(), customop::InplaceGrad::kThroughFunctional);
  EXPECT_EQ(row_scale_op().inplace_grad(), customop::InplaceGrad::kRefuse);
  const at::Tensor x0 = at::randn({3, 4}, at::kDouble);
  const at::Tensor s0 = at::randn({4}, at::kDouble);
  const at::Tensor g = at::randn({3, 4}, at::kDouble);
  const at::Tensor xf = x0.clone().requires_grad_();
  const at::Tensor sf = s0.clone().requires_grad_();
  row_scale_grad_op()(RowScaleArgs{xf, sf}).backward(g);
  const at::Tensor xi = x0.clone().requires_grad_();
  const at::Tensor si = s0.clone().requires_grad_();
  const at::Tensor a = xi * 1.0;  // not a leaf: written in place
  const auto version = a._version();
  const at::Tensor r = call_inplace_grad(a, si);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_GT(a._version(), version);
  EXPECT_TRUE(at::allclose(a.detach(), expected(x0, s0)));
  a.backward(g);
  EXPECT_TRUE(at::allclose(xi.grad(), xf.grad()));
  EXPECT_TRUE(at::allclose(si.grad(), sf.grad()));
  // Only the weight requires grad: x's old value was saved for it (a clone), so the write is
  // safe.
  const at::Tensor s2 = s0.clone().requires_grad_();
  const at::Tensor b = x0.clone();
  call_inplace_grad(b, s2).backward(g);
  EXPECT_TRUE(at::allclose(s2.grad(), sf.grad()));
}

TEST(InplaceVariant, OptedInRefusesLeavesAndSeesOverwrittenSavedTensors) {
  const at::Tensor s = at::randn({4}, at::kDouble);
  const at::Tensor leaf = at::randn({3, 4}, at::kDouble).requires_grad_();
  const at::Tensor before = leaf.detach().clone();
  EXPECT_THAT(error_message([&] { call_inplace_grad(leaf, s); }),
              AllOf(HasSubstr("core_inplace::row_scale_grad_: argument 'x' is a leaf tensor "
                              "that requires grad"),
                    HasSubstr("x.clone()")));
  EXPECT_THAT(error_message([&] { call_inplace_grad(leaf[0], s); }),
              HasSubstr("argument 'x' is a view of a leaf tensor that requires grad"));
  EXPECT_TRUE(at::equal(leaf.detach(), before));
  // A tensor saved for backward (a, by a * a) and then overwritten: backward raises.
  const at::Tensor a = leaf * 1.0;
  const at::Tensor sq = a * a;
  call_inplace_grad(a, s);
  EXPECT_THAT(error_message([&] { sq.sum().backward(); }),
              HasSubstr("modified by an inplace operation"));
}

struct NoTensorFirstArgs {
  double a = 0;
  at::Tensor x;
};
struct WritesArgs {
  customop::MutableTensor x;
};

TEST(InplaceVariant, DeclarationRefusals) {
  auto& first = customop::define<NoTensorFirstArgs>(
      "core_inplace::scalar_first(float a, Tensor x) -> Tensor");
  EXPECT_THAT(error_message([&] { first.inplace_variant(); }),
              AllOf(HasSubstr("core_inplace::scalar_first: inplace_variant()"),
                    HasSubstr("needs a first argument of type Tensor")));
  auto& writes = customop::define<WritesArgs, void>("core_inplace::writes(Tensor(a!) x) -> ()");
  EXPECT_THAT(error_message([&] { writes.inplace_variant(); }),
              HasSubstr("this one writes its arguments already"));
  EXPECT_THAT(error_message([&] { row_scale_op().inplace_variant(); }),
              HasSubstr("inplace_variant() is declared twice"));
  // Opted in without a backward: refused at the call, naming what is missing.
  auto& no_backward = customop::define<RowScaleArgs>(
      "core_inplace::row_scale_nb(Tensor x, Tensor scale, *, bool widen=False) -> Tensor");
  no_backward.shape([](const RowScaleArgs& a) { return customop::TensorSpec::like(a.x); });
  no_backward.impl(c10::DeviceType::CPU,
                   [](const RowScaleArgs& a, const at::Tensor& out) { out.copy_(a.x * a.scale); });
  no_backward.inplace_variant(customop::InplaceGrad::kThroughFunctional);
  const auto h = c10::Dispatcher::singleton()
                     .findSchemaOrThrow("core_inplace::row_scale_nb_", "")
                     .typed<at::Tensor&(at::Tensor&, const at::Tensor&, bool)>();
  at::Tensor x = at::randn({3, 4}, at::kDouble);
  const at::Tensor s = at::randn({4}, at::kDouble).requires_grad_();
  const at::Tensor before = x.clone();
  EXPECT_THAT(error_message([&] { h.call(x, s, false); }),
              AllOf(HasSubstr("core_inplace::row_scale_nb_: an argument requires grad"),
                    HasSubstr("has no backward")));
  EXPECT_TRUE(at::equal(x, before));
  EXPECT_THAT(error_message([&] {
                row_scale_grad_op().inplace_variant(static_cast<customop::InplaceGrad>(7));
              }),
              HasSubstr("got InplaceGrad value 7"));
  EXPECT_THAT(error_message([&] {
                row_scale_grad_op().inplace_variant(customop::InplaceGrad::kRefuse,
                                                    static_cast<customop::InplaceWrite>(9));
              }),
              HasSubstr("got InplaceWrite value 9"));
}

}  // namespace
