// Saved state: what save_for_backward returns reaches backward intact. Non-tensor fields
// round-trip exactly; tensor fields go through the autograd context, so they get its
// version-counter check, are released after backward, and a saved output makes no cycle.
#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::HasSubstr;

using WeakTensorImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// A weak reference to a tensor's TensorImpl: expired once nothing holds the tensor.
std::optional<WeakTensorImpl> weak_ref(const at::Tensor& t) {
  return WeakTensorImpl(t.getIntrusivePtr());
}
bool expired(const std::optional<WeakTensorImpl>& w) { return w.has_value() && w->expired(); }

struct ScaleArgs {
  at::Tensor x;
  double alpha;
};

at::Tensor leaf(int64_t n = 3) { return at::arange(n, at::kDouble).requires_grad_(); }

// ---- non-tensor fields -----------------------------------------------------------------------

struct ScalarsSaved {
  double d;
  double negative_zero;
  int64_t i;
  std::string s;
  std::vector<int64_t> v;
  std::optional<double> maybe;
  std::optional<int64_t> none;
  bool flag;
};

ScalarsSaved expected_scalars(double alpha) {
  return ScalarsSaved{
      .d = alpha,
      .negative_zero = -0.0,
      .i = std::numeric_limits<int64_t>::min(),
      .s = std::string("saved\0state \xe2\x9c\x93", 15),
      .v = {std::numeric_limits<int64_t>::max(), -1, 0, 42},
      .maybe = std::nextafter(1.0, 2.0),
      .none = std::nullopt,
      .flag = true,
  };
}

std::optional<ScalarsSaved> g_scalars_seen;

TEST(SavedState, NonTensorFieldsRoundTripExactly) {
  auto& op = customop::define<ScaleArgs>("core_saved::scalars(Tensor x, float alpha) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  op.impl_save_for_backward(
      [](const ScaleArgs& a, const at::Tensor&) { return expected_scalars(a.alpha); });
  op.impl_backward([](const ScalarsSaved& s, const at::Tensor& g) {
    g_scalars_seen = s;
    return customop::Grads{{"x", g * s.d}};
  });
  const double alpha = 0.1 + 0.2;  // not 0.3: any rounding on the way shows
  const auto x = leaf();
  op(ScaleArgs{x, alpha}).sum().backward();
  ASSERT_TRUE(g_scalars_seen.has_value());
  const auto want = expected_scalars(alpha);
  const auto& got = *g_scalars_seen;
  EXPECT_EQ(got.d, want.d);
  EXPECT_TRUE(std::signbit(got.negative_zero));
  EXPECT_EQ(got.i, want.i);
  EXPECT_EQ(got.s, want.s);
  EXPECT_EQ(got.s.size(), 15u);
  EXPECT_EQ(got.v, want.v);
  EXPECT_EQ(got.maybe, want.maybe);
  EXPECT_EQ(got.none, want.none);
  EXPECT_EQ(got.flag, want.flag);
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, alpha, at::kDouble)));
}

// ---- tensor fields -----------------------------------------------------------------------

struct TensorsArgs {
  at::Tensor x;
  std::optional<at::Tensor> bias;
  std::vector<at::Tensor> extra;
};
struct TensorsSaved {
  at::Tensor x;
  std::optional<at::Tensor> bias;     // nullopt when the call had none
  std::optional<at::Tensor> present;  // always set: 2 x
  std::vector<at::Tensor> extra;
  int64_t marker;  // between tensor fields: order must not get mixed up
  at::Tensor out;
};

struct TensorsSeen {
  bool bias_present = false;
  size_t extra_size = 0;
  bool x_ok = false, bias_ok = false, present_ok = false, extra_ok = false, out_ok = false;
  int64_t marker = 0;
};
TensorsSeen g_tensors_seen;

customop::Op<TensorsArgs>& tensors_op() {
  static auto& op = []() -> customop::Op<TensorsArgs>& {
    auto& o = customop::define<TensorsArgs>(
        "core_saved::tensors(Tensor x, Tensor? bias, Tensor[] extra) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const TensorsArgs& a) {
      auto out = a.x * 2;
      if (a.bias) out = out + *a.bias;
      return out;
    });
    o.impl_save_for_backward([](const TensorsArgs& a, const at::Tensor& out) {
      return TensorsSaved{a.x, a.bias, a.x * 2, a.extra, 1234567, out};
    });
    o.impl_backward([](const TensorsSaved& s, const at::Tensor& g) {
      auto& seen = g_tensors_seen;
      seen.bias_present = s.bias.has_value();
      seen.extra_size = s.extra.size();
      seen.x_ok = s.x.defined() && at::equal(s.x, at::arange(3, at::kDouble));
      seen.bias_ok = !s.bias || at::equal(*s.bias, at::full({3}, 10.0, at::kDouble));
      seen.present_ok = s.present.has_value() && at::equal(*s.present, 2 * s.x);
      seen.extra_ok = s.extra.size() != 2 || (at::equal(s.extra[0], at::ones({1})) &&
                                              at::equal(s.extra[1], at::zeros({2, 2})));
      seen.out_ok = at::equal(s.out, s.bias ? 2 * s.x + *s.bias : 2 * s.x);
      seen.marker = s.marker;
      return customop::Grads{{"x", g * 2},
                             {"bias", s.bias ? c10::IValue(g) : c10::IValue()},
                             {"extra", std::vector<at::Tensor>(s.extra.size())}};
    });
    return o;
  }();
  return op;
}

TEST(SavedState, TensorFieldsComeBackInPlace) {
  auto& op = tensors_op();
  for (bool with_bias : {true, false}) {
    g_tensors_seen = {};
    const auto x = leaf();
    const auto bias = at::full({3}, 10.0, at::kDouble).requires_grad_();
    std::vector<at::Tensor> extra = {at::ones({1}), at::zeros({2, 2})};
    if (!with_bias) extra.clear();
    op(TensorsArgs{x, with_bias ? std::optional<at::Tensor>(bias) : std::nullopt, extra})
        .sum()
        .backward();
    const auto& seen = g_tensors_seen;
    EXPECT_EQ(seen.bias_present, with_bias);
    EXPECT_EQ(seen.extra_size, extra.size());
    EXPECT_TRUE(seen.x_ok);
    EXPECT_TRUE(seen.bias_ok);
    EXPECT_TRUE(seen.present_ok);
    EXPECT_TRUE(seen.extra_ok);
    EXPECT_TRUE(seen.out_ok);
    EXPECT_EQ(seen.marker, 1234567);
    EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 2.0, at::kDouble)));
  }
}

// ---- version counter ----------------------------------------------------------------------

struct InputSaved {
  at::Tensor x;
};

customop::Op<ScaleArgs>& square_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_saved::square(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.x * a.alpha; });
    o.impl_save_for_backward([](const ScaleArgs& a, const at::Tensor&) { return InputSaved{a.x}; });
    o.impl_backward([](const InputSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", 2 * s.x * g}};
    });
    return o;
  }();
  return op;
}

TEST(SavedState, InPlaceChangeOfASavedInputIsCaughtInBackward) {
  auto& op = square_op();
  const auto x = leaf();
  const auto y = op(ScaleArgs{x, 1.0});
  {
    at::NoGradGuard no_grad;
    x.add_(1);
  }
  EXPECT_THAT(error_message([&] { y.sum().backward(); }),
              HasSubstr("one of the variables needed for gradient computation has been modified "
                        "by an inplace operation"));
}

TEST(SavedState, InPlaceChangeOfASavedNonLeafInputIsCaughtInBackward) {
  auto& op = square_op();
  const auto x = leaf();
  auto h = x * 1;
  const auto y = op(ScaleArgs{h, 1.0});
  h.mul_(3);
  EXPECT_THAT(error_message([&] { y.sum().backward(); }),
              HasSubstr("modified by an inplace operation"));
}

// A view saved in place of the tensor (x.t() of an input, out.flatten() of an output) is
// checked too: an in-place write to the input or output before backward raises, where the
// view would otherwise hand backward the new values (as a torch.autograd.Function's check
// does for a view it saves).
struct ViewsSaved {
  at::Tensor x_t;
  at::Tensor out_flat;
};

customop::Op<ScaleArgs>& views_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o =
        customop::define<ScaleArgs>("core_saved::square_views(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.x * a.alpha; });
    o.impl_save_for_backward([](const ScaleArgs& a, const at::Tensor& out) {
      return ViewsSaved{a.x.t(), out.flatten()};
    });
    o.impl_backward([](const ViewsSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", 2 * s.x_t.t() * g + 0 * s.out_flat.view_as(g)}};
    });
    return o;
  }();
  return op;
}

TEST(SavedState, InPlaceChangeBehindASavedViewIsCaughtInBackward) {
  auto& op = views_op();
  {
    const auto x = at::randn({2, 3}, at::kDouble).requires_grad_();
    auto h = x * 1;
    const auto y = op(ScaleArgs{h, 1.0});
    h.mul_(0);  // the saved x_t now reads zeros
    EXPECT_THAT(error_message([&] { y.sum().backward(); }),
                HasSubstr("modified by an inplace operation"));
  }
  {
    const auto x = at::randn({2, 3}, at::kDouble).requires_grad_();
    const auto y = op(ScaleArgs{x, 1.0});
    auto z = y * 1;  // y itself is not written: its own grad_fn would refuse y.mul_ anyway
    {
      at::NoGradGuard no_grad;
      y.mul_(0);
    }
    EXPECT_THAT(error_message([&] { z.sum().backward(); }),
                HasSubstr("modified by an inplace operation"));
  }
  // Untouched, the views give the right grad.
  const auto x = at::randn({2, 3}, at::kDouble).requires_grad_();
  op(ScaleArgs{x * 1, 1.0}).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), 2 * x.detach()));
}

TEST(SavedState, InPlaceChangeOfAnUnsavedInputIsFine) {
  auto& op =
      customop::define<ScaleArgs>("core_saved::scale_unsaved(Tensor x, float alpha) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  struct AlphaSaved {
    double alpha;
  };
  op.impl_save_for_backward(
      [](const ScaleArgs& a, const at::Tensor&) { return AlphaSaved{a.alpha}; });
  op.impl_backward([](const AlphaSaved& s, const at::Tensor& g) {
    return customop::Grads{{"x", g * s.alpha}};
  });
  const auto x = leaf();
  const auto y = op(ScaleArgs{x, 2.0});
  {
    at::NoGradGuard no_grad;
    x.add_(1);
  }
  ASSERT_NO_THROW(y.sum().backward());
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 2.0, at::kDouble)));
}

// ---- lifetime: saved outputs make no cycle; saved tensors are released ------------------

struct OutputSaved {
  at::Tensor out;
  at::Tensor scratch;  // a tensor only the saved state holds
};
std::optional<WeakTensorImpl> g_scratch;

customop::Op<ScaleArgs>& exp_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_saved::exp(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return (a.x * a.alpha).exp(); });
    o.impl_save_for_backward([](const ScaleArgs& a, const at::Tensor& out) {
      auto scratch = at::full({1}, a.alpha, at::kDouble);
      g_scratch = weak_ref(scratch);
      return OutputSaved{out, scratch};
    });
    o.impl_backward([](const OutputSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", g * s.out * s.scratch}};
    });
    return o;
  }();
  return op;
}

TEST(SavedState, SavedOutputDoesNotLeak) {
  auto& op = exp_op();
  std::optional<WeakTensorImpl> weak_out;
  {
    const auto x = leaf();
    const auto y = op(ScaleArgs{x, 0.5});
    weak_out = weak_ref(y);
    EXPECT_FALSE(expired(weak_out));
  }
  EXPECT_TRUE(expired(weak_out)) << "the output is kept alive by its own graph (a cycle)";
  EXPECT_TRUE(expired(g_scratch));
}

TEST(SavedState, SavedOutputDoesNotLeakAfterBackward) {
  auto& op = exp_op();
  std::optional<WeakTensorImpl> weak_out;
  {
    const auto x = leaf();
    const auto y = op(ScaleArgs{x, 0.5});
    weak_out = weak_ref(y);
    y.sum().backward(/*gradient=*/{}, /*retain_graph=*/true);
    EXPECT_TRUE(at::allclose(x.grad(), 0.5 * (x.detach() * 0.5).exp()));
  }
  EXPECT_TRUE(expired(weak_out));
}

TEST(SavedState, SavedTensorsAreReleasedAfterBackward) {
  auto& op = exp_op();
  const auto x = leaf();
  const auto y = op(ScaleArgs{x, 0.5});
  EXPECT_FALSE(expired(g_scratch));
  y.sum().backward();
  // The graph (and y) are still alive, but backward without retain_graph frees its buffers.
  EXPECT_TRUE(expired(g_scratch)) << "a saved tensor outlived backward: it is held outside "
                                     "the autograd context";
  EXPECT_THAT(error_message([&] { y.sum().backward(); }),
              HasSubstr("Trying to backward through the graph a second time"));
}

TEST(SavedState, NothingIsSavedWithoutAGraph) {
  auto& op = exp_op();
  const auto y = op(ScaleArgs{at::ones({2}, at::kDouble), 1.0});
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(expired(g_scratch));
}

}  // namespace
