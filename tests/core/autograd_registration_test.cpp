// SCENARIOS C (A1-A6) and F (N1-N4): registering a backward formula in two parts, and what
// an op without one does when a gradient could be asked for.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <atomic>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  double unused = 0;
};

at::Tensor triple_cpu(const XArgs& a) { return a.x * 3; }
XSaved save_nothing(const XArgs&, const at::Tensor&) { return {}; }
customop::Grads triple_backward(const XSaved&, const at::Tensor& g) { return {{"x", g * 3}}; }

at::Tensor leaf(int64_t n = 3) { return at::arange(n, at::kDouble).requires_grad_(); }

// ---- A1: only one half of the formula ------------------------------------------------------

// SCENARIOS A1.
TEST(AutogradRegistration, BackwardWithoutSaveForBackwardFailsAtForward) {
  auto& op = customop::define<XArgs>("core_autograd::a1_backward_only(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, triple_cpu);
  int line = 0;
  // clang-format off
  ASSERT_NO_THROW({ op.impl_backward(triple_backward); line = __LINE__; });
  // clang-format on
  EXPECT_FALSE(op.has_autograd());
  const auto msg = error_message([&] { op(XArgs{leaf()}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("We found a 'backward' registration for "
                                   "core_autograd::a1_backward_only at " +
                                   CUSTOMOP_TEST_LOCATION(line) +
                                   " but were unable to find a 'save_for_backward' registration"),
                         HasSubstr("impl_save_for_backward")));
  // As in the reference, the indirection refuses the call even when nothing requires grad.
  EXPECT_THAT(error_message([&] { op(XArgs{at::ones({1})}); }),
              HasSubstr("unable to find a 'save_for_backward' registration"));
  // Completing the formula makes the op differentiable.
  op.impl_save_for_backward(save_nothing);
  EXPECT_TRUE(op.has_autograd());
  const auto x = leaf();
  op(XArgs{x}).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

// SCENARIOS A1.
TEST(AutogradRegistration, SaveForBackwardWithoutBackwardFailsAtForward) {
  auto& op = customop::define<XArgs>("core_autograd::a1_save_only(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, triple_cpu);
  int line = 0;
  // clang-format off
  ASSERT_NO_THROW({ op.impl_save_for_backward(save_nothing); line = __LINE__; });
  // clang-format on
  const auto msg = error_message([&] { op(XArgs{leaf()}); });
  EXPECT_THAT(msg, HasSubstr("We found a 'save_for_backward' registration for "
                             "core_autograd::a1_save_only at " +
                             CUSTOMOP_TEST_LOCATION(line) +
                             " but were unable to find a 'backward' registration"));
}

TEST(AutogradRegistration, EachHalfOnlyOnce) {
  auto& op = customop::define<XArgs>("core_autograd::twice(Tensor x) -> Tensor");
  // clang-format off
  op.impl_save_for_backward(save_nothing); const int save_line = __LINE__;
  // clang-format on
  // clang-format off
  op.impl_backward(triple_backward); const int backward_line = __LINE__;
  // clang-format on
  EXPECT_THAT(error_message([&] { op.impl_save_for_backward(save_nothing); }),
              AllOf(HasSubstr("core_autograd::twice: save_for_backward is already registered at " +
                              CUSTOMOP_TEST_LOCATION(save_line)),
                    HasSubstr("is refused")));
  EXPECT_THAT(
      error_message([&] { op.impl_backward(triple_backward); }),
      HasSubstr("backward is already registered at " + CUSTOMOP_TEST_LOCATION(backward_line)));
}

TEST(AutogradRegistration, SavedStateTypesMustAgree) {
  struct OtherSaved {
    int64_t n;
  };
  auto& op = customop::define<XArgs>("core_autograd::saved_mismatch(Tensor x) -> Tensor");
  op.impl_save_for_backward(save_nothing);
  const auto msg = error_message<c10::TypeError>([&] {
    op.impl_backward([](const OtherSaved&, const at::Tensor& g) {
      return customop::Grads{{"x", g}};
    });
  });
  EXPECT_THAT(
      msg, AllOf(HasSubstr("core_autograd::saved_mismatch: backward at "), HasSubstr("OtherSaved"),
                 HasSubstr("but save_for_backward uses"), HasSubstr("XSaved")));
  EXPECT_FALSE(op.has_autograd());
}

// A refused registration must leave no trace: here the first backward is refused for its
// output_differentiability, and the saved-state type it named must not bind the op.
TEST(AutogradRegistration, RefusedBackwardLeavesNoTrace) {
  struct OtherSaved {
    int64_t n;
  };
  auto& op = customop::define<XArgs>("core_autograd::refused_backward(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, triple_cpu);
  EXPECT_THAT(error_message<c10::ValueError>([&] {
                op.impl_backward(
                    [](const OtherSaved&, const at::Tensor& g) {
                      return customop::Grads{{"x", g}};
                    },
                    {true, false});
              }),
              HasSubstr("output_differentiability has 2 entries but the op has 1 returns"));
  EXPECT_FALSE(op.has_autograd());
  ASSERT_NO_THROW(op.impl_save_for_backward(save_nothing));
  ASSERT_NO_THROW(op.impl_backward(triple_backward));
  const auto x = leaf();
  op(XArgs{x}).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

// ---- A3: save_for_backward runs once per forward, never in backward -------------------------

struct A3Saved {
  at::Tensor x;
  at::Tensor out;
};
std::atomic<int> g_a3_saves{0};
std::atomic<int> g_a3_backwards{0};

// SCENARIOS A3.
TEST(AutogradRegistration, SaveRunsOncePerForwardAndNeverInBackward) {
  auto& op = customop::define<XArgs>("core_autograd::a3_square(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * a.x; });
  op.impl_save_for_backward([](const XArgs& in, const at::Tensor& out) {
    ++g_a3_saves;
    return A3Saved{in.x, out};
  });
  op.impl_backward([](const A3Saved& s, const at::Tensor& g) {
    ++g_a3_backwards;
    EXPECT_TRUE(at::allclose(s.out, s.x * s.x));
    return customop::Grads{{"x", 2 * s.x * g}};
  });
  const auto x = leaf();
  const auto y = op(XArgs{x});
  EXPECT_EQ(g_a3_saves.load(), 1);
  EXPECT_EQ(g_a3_backwards.load(), 0);
  y.sum().backward(/*gradient=*/{}, /*retain_graph=*/true);
  EXPECT_EQ(g_a3_saves.load(), 1);
  EXPECT_EQ(g_a3_backwards.load(), 1);
  EXPECT_TRUE(at::allclose(x.grad(), 2 * x.detach()));
  // A second backward over the same graph reuses the saved state.
  y.sum().backward();
  EXPECT_EQ(g_a3_saves.load(), 1);
  EXPECT_EQ(g_a3_backwards.load(), 2);
  EXPECT_TRUE(at::allclose(x.grad(), 4 * x.detach()));
  // One more forward, one more save.
  op(XArgs{x});
  EXPECT_EQ(g_a3_saves.load(), 2);
  // The save runs for inputs that do not require grad as well (the reference's forward does).
  op(XArgs{at::ones({2})});
  EXPECT_EQ(g_a3_saves.load(), 3);
  EXPECT_EQ(g_a3_backwards.load(), 2);
}

// ---- A4: ops with an autograd kernel from a plain TORCH_LIBRARY ---------------------------

at::Tensor lib_identity(const at::Tensor& x) { return x.clone(); }

TORCH_LIBRARY_FRAGMENT(core_autograd, m) {
  m.def("a4_autograd(Tensor x) -> Tensor");
  m.def("a4_autograd_cpu(Tensor x) -> Tensor");
  m.def("a4_autograd_cuda(Tensor x) -> Tensor");
  m.def("a4_composite(Tensor x) -> Tensor");
  m.def("a4_plain(Tensor x) -> Tensor");
  m.def("a4_plain_cpu(Tensor x) -> Tensor");
  m.def("a4_wrap_twice(Tensor x) -> Tensor");
}
TORCH_LIBRARY_IMPL(core_autograd, Autograd, m) { m.impl("a4_autograd", lib_identity); }
TORCH_LIBRARY_IMPL(core_autograd, AutogradCPU, m) { m.impl("a4_autograd_cpu", lib_identity); }
TORCH_LIBRARY_IMPL(core_autograd, AutogradCUDA, m) { m.impl("a4_autograd_cuda", lib_identity); }
TORCH_LIBRARY_IMPL(core_autograd, CompositeImplicitAutograd, m) {
  m.impl("a4_composite", lib_identity);
}
TORCH_LIBRARY_IMPL(core_autograd, CPU, m) { m.impl("a4_plain_cpu", lib_identity); }

// SCENARIOS A4.
TEST(AutogradRegistration, LibraryAutogradKernelRefusedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"core_autograd::a4_autograd", "an Autograd kernel"},
      {"core_autograd::a4_autograd_cpu", "an AutogradCPU kernel"},
      {"core_autograd::a4_autograd_cuda", "an AutogradCUDA kernel"},
      {"core_autograd::a4_composite", "a CompositeImplicitAutograd kernel"},
  };
  for (const auto& [name, key] : cases) {
    auto* op = static_cast<customop::Op<XArgs>*>(nullptr);
    ASSERT_NO_THROW(op = &customop::wrap<XArgs>(name)) << name;
    int line = 0;
    // clang-format off
    const auto msg = error_message([&] { line = __LINE__; op->impl_backward(triple_backward); });
    // clang-format on
    EXPECT_THAT(msg, AllOf(HasSubstr(std::string(name) + ": already has " + key +
                                     " registered outside customop"),
                           HasSubstr("the backward formula at " + CUSTOMOP_TEST_LOCATION(line))))
        << name;
    EXPECT_THAT(error_message([&] { op->impl_save_for_backward(save_nothing); }),
                HasSubstr(std::string(name) + ": already has " + key))
        << name;
    EXPECT_FALSE(op->has_autograd());
  }
}

TEST(AutogradRegistration, WrapAdoptsALibraryOpWithoutAutograd) {
  auto& op = customop::wrap<XArgs>("core_autograd::a4_plain");
  op.impl(c10::DeviceType::CPU, triple_cpu);
  op.impl_save_for_backward(save_nothing);
  op.impl_backward(triple_backward);
  const auto x = leaf();
  op(XArgs{x}).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

TEST(AutogradRegistration, WrapKeepsTheLibraryCpuKernelAndRefusesASecond) {
  auto& op = customop::wrap<XArgs>("core_autograd::a4_plain_cpu");
  const auto msg = error_message([&] { op.impl(c10::DeviceType::CPU, triple_cpu); });
  EXPECT_THAT(msg, HasSubstr("core_autograd::a4_plain_cpu: already has a CPU kernel registered "
                             "outside customop"));
  op.impl_save_for_backward(save_nothing);
  op.impl_backward([](const XSaved&, const at::Tensor& g) { return customop::Grads{{"x", g}}; });
  const auto x = leaf();
  const auto y = op(XArgs{x});
  EXPECT_TRUE(at::equal(y.detach(), x.detach()));
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::ones({3}, at::kDouble)));
}

TEST(AutogradRegistration, WrapUnknownOpAndWrapTwice) {
  EXPECT_THAT(error_message<c10::ValueError>([] { customop::wrap<XArgs>("core_autograd::nope"); }),
              HasSubstr("core_autograd::nope: customop::wrap found no operator of that name"));
  struct WrongArgs {
    double x;
  };
  EXPECT_THAT(error_message<c10::TypeError>(
                  [] { customop::wrap<WrongArgs>("core_autograd::a4_composite"); }),
              HasSubstr("args struct field 0 'x' (schema argument 'x' of type Tensor)"));
  // clang-format off
  customop::wrap<XArgs>("core_autograd::a4_wrap_twice"); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(error_message([] { customop::wrap<XArgs>("core_autograd::a4_wrap_twice"); }),
              AllOf(HasSubstr("core_autograd::a4_wrap_twice: defined multiple times"),
                    HasSubstr("the first definition is at " + CUSTOMOP_TEST_LOCATION(line))));
}

// ---- A6: a formula registered after the op was called -----------------------------------

// SCENARIOS A6.
TEST(AutogradRegistration, FormulaRegisteredAfterFirstCallTakesEffect) {
  auto& op = customop::define<XArgs>("core_autograd::a6_late(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, triple_cpu);
  const auto x = leaf();
  // Before: plain calls work, calls that need a gradient do not.
  EXPECT_TRUE(at::equal(op(XArgs{x.detach()}), x.detach() * 3));
  EXPECT_THAT(error_message<c10::NotImplementedError>([&] { op(XArgs{x}); }),
              HasSubstr("Autograd has not been implemented for operator core_autograd::a6_late"));
  op.impl_save_for_backward(save_nothing);
  op.impl_backward(triple_backward);
  const auto y = op(XArgs{x});
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

// ---- impl_autograd: both halves in one call ----------------------------------------------

TEST(AutogradRegistration, ImplAutogradRegistersBothHalves) {
  auto& op = customop::define<XArgs>("core_autograd::both(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, triple_cpu).impl_autograd(save_nothing, triple_backward);
  EXPECT_TRUE(op.has_autograd());
  const auto x = leaf();
  op(XArgs{x}).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

// ---- F: autograd not implemented ---------------------------------------------------------

struct XYArgs {
  at::Tensor x;
  at::Tensor y;
};

customop::Op<XYArgs>& no_formula_op() {
  static auto& op = []() -> customop::Op<XYArgs>& {
    auto& o = customop::define<XYArgs>("core_autograd::n_add(Tensor x, Tensor y) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XYArgs& a) { return a.x + a.y; });
    return o;
  }();
  return op;
}

// SCENARIOS N1.
TEST(NotImplemented, InputRequiringGradFailsAtForward) {
  auto& op = no_formula_op();
  const auto msg = error_message<c10::NotImplementedError>([&] {
    op(XYArgs{leaf(), at::ones({3}, at::kDouble)});
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("Autograd has not been implemented for operator "
                                   "core_autograd::n_add"),
                         HasSubstr("argument 'x' requires grad")));
}

// SCENARIOS N1.
TEST(NotImplemented, NothingRequiringGradRuns) {
  auto& op = no_formula_op();
  const auto out = op(XYArgs{at::ones({2}), at::ones({2})});
  EXPECT_TRUE(at::equal(out, at::full({2}, 2.0)));
  EXPECT_FALSE(out.requires_grad());
}

// SCENARIOS N3.
TEST(NotImplemented, OnlySecondArgumentRequiringGradFailsAtForward) {
  auto& op = no_formula_op();
  const auto msg = error_message<c10::NotImplementedError>([&] {
    op(XYArgs{at::ones({3}, at::kDouble), leaf()});
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("Autograd has not been implemented for operator "
                                   "core_autograd::n_add"),
                         HasSubstr("argument 'y' requires grad")));
}

// SCENARIOS N3.
TEST(NotImplemented, TensorListOrOptionalArgumentRequiringGradFailsAtForward) {
  struct Args {
    std::vector<at::Tensor> xs;
    std::optional<at::Tensor> bias;
  };
  auto& op = customop::define<Args>("core_autograd::n_list(Tensor[] xs, Tensor? bias) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const Args& a) { return at::stack(a.xs).sum(0); });
  const auto plain = at::ones({2}, at::kDouble);
  EXPECT_THAT(error_message<c10::NotImplementedError>([&] {
                op(Args{{plain, plain, leaf(2)}, std::nullopt});
              }),
              HasSubstr("argument 'xs' requires grad"));
  EXPECT_THAT(error_message<c10::NotImplementedError>([&] {
                op(Args{{plain}, leaf(2)});
              }),
              HasSubstr("argument 'bias' requires grad"));
  EXPECT_NO_THROW(op(Args{{plain, plain}, plain}));
}

// SCENARIOS N4.
TEST(NotImplemented, NoGradModeReturnsTheKernelResult) {
  auto& op = no_formula_op();
  const auto x = leaf();
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    ASSERT_NO_THROW(out = op(XYArgs{x, x}));
  }
  EXPECT_TRUE(at::equal(out, 2 * x.detach()));
  EXPECT_FALSE(out.requires_grad());
}

}  // namespace
