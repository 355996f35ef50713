// Forward-mode AD (impl_jvp) and the generated autograd kernel's backward Node, from C++: dual
// tensors through an op with a JVP, the tangent of each output, a JVP that returns a tangent
// of the wrong shape, registration refusals; the Node's name, its saved-tensor version check,
// a second backward, and a kernel that returns its own input.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/forward_grad.h>

#include <string>
#include <tuple>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct MulArgs {
  at::Tensor x;
  at::Tensor y;
  double alpha;
};
struct MulSaved {
  at::Tensor x;
  at::Tensor y;
  double alpha;
};
struct MulGrads {
  at::Tensor x;
  at::Tensor y;
};

// out = alpha * x * y, and (as a second return) x + y.
using MulRet = std::tuple<at::Tensor, at::Tensor>;

customop::Op<MulArgs, MulRet>& scaled_mul() {
  static auto& op = []() -> customop::Op<MulArgs, MulRet>& {
    auto& o = customop::define<MulArgs, MulRet>(
        "core_fwad::scaled_mul(Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)");
    o.impl(c10::DeviceType::CPU, [](const MulArgs& a) {
      return MulRet{a.x * a.y * a.alpha, a.x + a.y};
    });
    o.impl_autograd(
        [](const MulArgs& a, const MulRet&) {
          return MulSaved{a.x, a.y, a.alpha};
        },
        [](const MulSaved& s, const at::Tensor& g0, const at::Tensor& g1) {
          return MulGrads{g0 * s.y * s.alpha + g1, g0 * s.x * s.alpha + g1};
        });
    // d(alpha x y) = alpha (dx y + x dy); d(x + y) = dx + dy (undefined: zero).
    o.impl_jvp([](const MulArgs& p, const MulArgs& t, const MulRet&) {
      at::Tensor d0;
      at::Tensor d1;
      if (t.x.defined()) {
        d0 = t.x * p.y * p.alpha;
        d1 = t.x;
      }
      if (t.y.defined()) {
        d0 = d0.defined() ? d0 + p.x * t.y * p.alpha : p.x * t.y * p.alpha;
        d1 = d1.defined() ? d1 + t.y : t.y;
      }
      return MulRet{d0, d1};
    });
    return o;
  }();
  return op;
}

// A dual level for one test (the C++ form of torch.autograd.forward_ad.dual_level()).
struct DualLevel {
  uint64_t idx = torch::autograd::ForwardADLevel::get_next_idx();
  ~DualLevel() { torch::autograd::ForwardADLevel::release_idx(idx); }
};

TEST(ForwardAd, DualTensorsGiveEachOutputItsJvp) {
  auto& op = scaled_mul();
  EXPECT_TRUE(op.has_jvp());
  const auto x = at::randn({3, 4}, at::kDouble);
  const auto y = at::randn({3, 4}, at::kDouble);
  const auto tx = at::randn({3, 4}, at::kDouble);
  const auto ty = at::randn({3, 4}, at::kDouble);
  DualLevel level;
  const auto lvl = static_cast<int64_t>(level.idx);
  {
    const auto [out, sum] =
        op(MulArgs{at::_make_dual(x, tx, lvl), at::_make_dual(y, ty, lvl), 2.0});
    EXPECT_TRUE(at::allclose(std::get<1>(at::_unpack_dual(out, lvl)), 2.0 * (tx * y + x * ty)));
    EXPECT_TRUE(at::allclose(std::get<1>(at::_unpack_dual(sum, lvl)), tx + ty));
  }
  {
    // Only y carries a tangent: x's is zero (an undefined tensor reaches the formula).
    const auto [out, sum] = op(MulArgs{x, at::_make_dual(y, ty, lvl), 2.0});
    EXPECT_TRUE(at::allclose(std::get<1>(at::_unpack_dual(out, lvl)), 2.0 * x * ty));
    EXPECT_TRUE(at::allclose(std::get<1>(at::_unpack_dual(sum, lvl)), ty));
  }
}

TEST(ForwardAd, ForwardAndReverseModeTogether) {
  // A dual input that also requires grad: the output gets both a tangent and a backward Node.
  auto& op = scaled_mul();
  const auto x = at::randn({5}, at::kDouble).requires_grad_();
  const auto y = at::randn({5}, at::kDouble);
  const auto tx = at::randn({5}, at::kDouble);
  DualLevel level;
  const auto lvl = static_cast<int64_t>(level.idx);
  const auto [out, sum] = op(MulArgs{at::_make_dual(x, tx, lvl), y, 3.0});
  EXPECT_TRUE(at::allclose(std::get<1>(at::_unpack_dual(out, lvl)), 3.0 * tx * y));
  ASSERT_TRUE(out.grad_fn() != nullptr);
  const auto g = torch::autograd::grad({out.sum()}, {x})[0];
  EXPECT_TRUE(at::allclose(g, 3.0 * y));
}

struct ScaleArgs {
  at::Tensor x;
  double alpha;
};
struct ScaleSaved {
  double alpha;
};

TEST(ForwardAd, AJvpReturningTheWrongShapeIsRefusedNamingTheOpAndReturn) {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_fwad::bad_jvp(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_jvp([](const ScaleArgs&, const ScaleArgs& t, const at::Tensor&) {
      return t.x.sum();  // a 0-d tangent for a [4] output
    });
    return o;
  }();
  DualLevel level;
  const auto x = at::_make_dual(at::randn({4}, at::kDouble), at::ones({4}, at::kDouble),
                                static_cast<int64_t>(level.idx));
  const std::string what = error_message([&] { op(ScaleArgs{x, 2.0}); });
  EXPECT_THAT(what, AllOf(HasSubstr("core_fwad::bad_jvp: the JVP registered at"),
                          HasSubstr("returned a tangent for return 0 of shape []"),
                          HasSubstr("that output has shape [4]")));
}

TEST(ForwardAd, ASecondJvpIsRefusedNamingBothLocations) {
  auto& op = customop::define<ScaleArgs>("core_fwad::twice(Tensor x, float alpha) -> Tensor");
  auto jvp = [](const ScaleArgs& p, const ScaleArgs& t, const at::Tensor&) {
    return t.x * p.alpha;
  };
  op.impl_jvp(jvp);
  const std::string what = error_message([&] { op.impl_jvp(jvp); });
  EXPECT_THAT(what, AllOf(HasSubstr("core_fwad::twice: a JVP is already registered at"),
                          HasSubstr("forward_ad_test.cpp"), HasSubstr("is refused")));
}

TEST(AutogradNode, NamesTheOpAndChecksSavedTensorVersions) {
  auto& op = scaled_mul();
  const auto x = at::randn({4}, at::kDouble).requires_grad_();
  const auto y0 = at::randn({4}, at::kDouble).requires_grad_();
  const auto y = y0 * 1;  // not a leaf: it may be written in place
  const auto [out, sum] = op(MulArgs{x, y, 2.0});
  ASSERT_TRUE(out.grad_fn() != nullptr);
  EXPECT_EQ(out.grad_fn()->name(), "customop::OpBackward<core_fwad::scaled_mul>");
  EXPECT_EQ(out.grad_fn().get(), sum.grad_fn().get());  // one Node per call
  y.add_(1);                                            // y was saved for backward
  const std::string what = error_message([&] { out.sum().backward(); });
  EXPECT_THAT(what, HasSubstr("modified by an inplace operation"));
}

TEST(AutogradNode, ASecondBackwardWithoutRetainGraphRaises) {
  auto& op = scaled_mul();
  const auto x = at::randn({4}, at::kDouble).requires_grad_();
  const auto y = at::randn({4}, at::kDouble);
  const auto [out, sum] = op(MulArgs{x, y, 2.0});
  out.sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), 2.0 * y));
  const std::string what = error_message([&] { out.sum().backward(); });
  EXPECT_THAT(what, HasSubstr("backward through the graph a second time"));
}

TEST(AutogradNode, AnUndefinedOutputGradArrivesAsZeros) {
  // Only the second return is used: the first one's grad reaches the formula as zeros.
  auto& op = scaled_mul();
  const auto x = at::randn({4}, at::kDouble).requires_grad_();
  const auto y = at::randn({4}, at::kDouble);
  const auto [out, sum] = op(MulArgs{x, y, 2.0});
  const auto g = torch::autograd::grad({sum.sum()}, {x})[0];
  EXPECT_TRUE(at::allclose(g, at::ones({4}, at::kDouble)));
}

TEST(AutogradNode, AKernelThatReturnsItsInputIsRefusedUnderGrad) {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_fwad::identity(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x; });
    o.impl_autograd([](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; },
                    [](const ScaleSaved&, const at::Tensor& g) {
                      return customop::Grads{{"x", g}};
                    });
    return o;
  }();
  const auto x = at::randn({4}, at::kDouble).requires_grad_();
  const std::string what = error_message([&] { op(ScaleArgs{x, 1.0}); });
  EXPECT_THAT(what, AllOf(HasSubstr("core_fwad::identity: the CPU kernel at"),
                          HasSubstr("returned output 0 sharing memory with argument 'x'"),
                          HasSubstr("x.clone()")));
  EXPECT_TRUE(x.grad_fn() == nullptr);  // the input's history is untouched
}

}  // namespace
