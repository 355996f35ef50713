// An exception thrown by an op's own code (op_user_errors.cpp): its kernel, fake kernel,
// save_for_backward, backward and JVP. The error names the op, the function and where it was
// registered, keeps its message, and keeps the type Python would have raised.
#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/forward_grad.h>

#include <stdexcept>
#include <string>
#include <typeinfo>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct XArgs {
  at::Tensor x;
};

// What a test kernel throws, chosen per call by x's first value.
enum class Throw {
  kNothing,
  kRuntime,
  kInvalid,
  kOutOfRange,
  kInt,
  kTorchCheck,
  kValue,
  kOwn,
  kMentionsOp,
  kBadAlloc
};

struct OwnError : std::exception {
  const char* what() const noexcept override { return "the user's own error"; }
};

void throw_for(const at::Tensor& x) {
  switch (static_cast<Throw>(x.flatten()[0].item<int>())) {
    case Throw::kNothing: return;
    case Throw::kRuntime: throw std::runtime_error("bad x");
    case Throw::kInvalid: throw std::invalid_argument("x must be positive");
    case Throw::kOutOfRange: throw std::out_of_range("index 7 past the end");
    case Throw::kInt: throw 42;
    case Throw::kTorchCheck: TORCH_CHECK(false, "the user's check failed");
    case Throw::kValue: TORCH_CHECK_VALUE(false, "the user's value check failed");
    case Throw::kOwn: throw OwnError();
    case Throw::kMentionsOp: TORCH_CHECK(false, "a thrower needs x > 0");
    case Throw::kBadAlloc: throw std::bad_alloc();
  }
}

// Throws from the kernel when x[0] says so (x[1] == 0), else from save_for_backward
// (x[1] == 1) or the backward (x[1] == 2).
customop::Op<XArgs>& thrower() {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("core_user_errors::thrower(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) {
      if (a.x[1].item<int>() == 0) throw_for(a.x);
      return a.x * 2;
    });
    struct Saved {
      at::Tensor x;
    };
    o.impl_save_for_backward([](const XArgs& a, const at::Tensor&) {
      if (a.x[1].item<int>() == 1) throw_for(a.x);
      return Saved{a.x};
    });
    o.impl_backward([](const Saved& s, const at::Tensor& g) {
      if (s.x[1].item<int>() == 2) throw_for(s.x);
      return customop::Grads{{"x", g * 2}};
    });
    return o;
  }();
  return op;
}

// The message of the c10::Error `fn` throws, which must be a c10::Error itself, not a subclass
// (Python's RuntimeError, not ValueError or IndexError).
template <class F>
std::string exact_error_message(F&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    EXPECT_EQ(typeid(e), typeid(c10::Error)) << c10::demangle(typeid(e).name());
    return e.what_without_backtrace();
  }
  ADD_FAILURE() << "nothing was thrown";
  return "<no exception>";
}

at::Tensor at_stage(Throw code, int stage) {
  at::Tensor x = at::full({3}, static_cast<double>(code), at::kDouble);
  x[1] = stage;
  return x.requires_grad_();
}

TEST(UserErrors, AKernelsStdExceptionNamesTheOpAndKeepsItsPythonType) {
  auto& op = thrower();
  const auto x = [](Throw code) { return at_stage(code, 0); };
  // std::runtime_error (and any other): c10::Error, Python's RuntimeError.
  EXPECT_THAT(
      error_message([&] { op(XArgs{x(Throw::kRuntime)}); }),
      AllOf(HasSubstr("core_user_errors::thrower: the CPU kernel at"),
            HasSubstr("user_errors_test.cpp:"), HasSubstr("threw std::runtime_error: bad x")));
  // std::invalid_argument: RuntimeError too, as torch.ops translates it (a plain c10::Error).
  EXPECT_THAT(exact_error_message([&] { op(XArgs{x(Throw::kInvalid)}); }),
              AllOf(HasSubstr("core_user_errors::thrower: the CPU kernel at"),
                    HasSubstr("threw std::invalid_argument: x must be positive")));
  EXPECT_THAT(exact_error_message([&] { op(XArgs{x(Throw::kBadAlloc)}); }),
              HasSubstr("core_user_errors::thrower: the CPU kernel at"));
  // std::out_of_range: IndexError.
  EXPECT_THAT(error_message<c10::IndexError>([&] { op(XArgs{x(Throw::kOutOfRange)}); }),
              HasSubstr("threw std::out_of_range: index 7 past the end"));
  // A type of the user's own.
  EXPECT_THAT(error_message([&] { op(XArgs{x(Throw::kOwn)}); }),
              AllOf(HasSubstr("core_user_errors::thrower: the CPU kernel at"),
                    HasSubstr("OwnError: the user's own error")));
}

TEST(UserErrors, ANonStdExceptionIsNamedNotUnknown) {
  EXPECT_THAT(error_message([&] { thrower()(XArgs{at_stage(Throw::kInt, 0)}); }),
              AllOf(HasSubstr("core_user_errors::thrower: the CPU kernel at"),
                    HasSubstr("threw an exception of type int, which is no std::exception"),
                    HasSubstr("TORCH_CHECK")));
}

TEST(UserErrors, AUsersTorchCheckKeepsItsTypeAndMessageAndGainsTheOp) {
  auto& op = thrower();
  EXPECT_THAT(error_message([&] { op(XArgs{at_stage(Throw::kTorchCheck, 0)}); }),
              AllOf(HasSubstr("the user's check failed"),
                    HasSubstr("raised in core_user_errors::thrower's CPU kernel at"),
                    HasSubstr("user_errors_test.cpp:")));
  EXPECT_THAT(error_message<c10::ValueError>([&] { op(XArgs{at_stage(Throw::kValue, 0)}); }),
              AllOf(HasSubstr("the user's value check failed"),
                    HasSubstr("raised in core_user_errors::thrower's CPU kernel")));
  // A message that mentions the op's short name in passing does not name the op.
  EXPECT_THAT(error_message([&] { op(XArgs{at_stage(Throw::kMentionsOp, 0)}); }),
              AllOf(HasSubstr("a thrower needs x > 0"),
                    HasSubstr("raised in core_user_errors::thrower's CPU kernel")));
}

TEST(UserErrors, OurOwnErrorsAreNotNamedTwice) {
  // A None for a Tensor is refused by our check, which names the op already.
  const std::string msg = error_message([&] { thrower()(XArgs{at::Tensor()}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_user_errors::thrower"), Not(HasSubstr("raised in"))));
}

TEST(UserErrors, SaveForBackwardAndBackwardAreNamed) {
  auto& op = thrower();
  EXPECT_THAT(error_message([&] { op(XArgs{at_stage(Throw::kRuntime, 1)}); }),
              AllOf(HasSubstr("core_user_errors::thrower: the save_for_backward at"),
                    HasSubstr("user_errors_test.cpp:"), HasSubstr("threw std::runtime_error")));
  const auto x = at_stage(Throw::kInvalid, 2);
  const auto y = op(XArgs{x});
  EXPECT_THAT(exact_error_message([&] { y.sum().backward(); }),
              AllOf(HasSubstr("core_user_errors::thrower: the backward at"),
                    HasSubstr("user_errors_test.cpp:"),
                    HasSubstr("threw std::invalid_argument: x must be positive")));
  // With nothing thrown, the same op runs forward and backward.
  const auto ok = at_stage(Throw::kNothing, 3);
  op(XArgs{ok}).sum().backward();
  EXPECT_TRUE(at::equal(ok.grad(), at::full({3}, 2.0, at::kDouble)));
}

TEST(UserErrors, AShapeFunctionIsNamedNextToTheKernelThatRunsIt) {
  struct ShapeArgs {
    at::Tensor x;
    int64_t n;
  };
  static auto& op = []() -> customop::Op<ShapeArgs>& {
    auto& o = customop::define<ShapeArgs>("core_user_errors::shaped(Tensor x, int n) -> Tensor");
    o.shape([](const ShapeArgs& a) {
      if (a.n < 0) throw std::runtime_error("n must not be negative");
      return customop::TensorSpec::like(a.x);
    });
    o.impl(c10::DeviceType::CPU, [](const ShapeArgs& a, const at::Tensor& out) {
      const_cast<at::Tensor&>(out).copy_(a.x);
    });
    return o;
  }();
  EXPECT_THAT(error_message([&] {
                op(ShapeArgs{at::randn({3}), -1});
              }),
              AllOf(HasSubstr("core_user_errors::shaped: the CPU kernel at"),
                    HasSubstr("(or the shape function it runs, at"),
                    HasSubstr("threw std::runtime_error: n must not be negative")));
  EXPECT_THAT(error_message([&] {
                op(ShapeArgs{at::empty({3}, at::kMeta), -1});
              }),
              HasSubstr("core_user_errors::shaped: the shape function at"));
}

TEST(UserErrors, AFakeKernelAndAJvpAreNamed) {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("core_user_errors::fake_jvp(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * 2; });
    o.impl_fake([](const XArgs&) -> at::Tensor { throw std::runtime_error("fake broke"); });
    o.impl_jvp([](const XArgs&, const XArgs&, const at::Tensor&) -> at::Tensor {
      throw std::runtime_error("jvp broke");
    });
    return o;
  }();
  EXPECT_THAT(error_message([&] { op(XArgs{at::empty({3}, at::kMeta)}); }),
              AllOf(HasSubstr("core_user_errors::fake_jvp: the fake (Meta) kernel at"),
                    HasSubstr("threw std::runtime_error: fake broke")));
  const uint64_t level = torch::autograd::ForwardADLevel::get_next_idx();
  const auto dual = at::_make_dual(at::randn({3}), at::randn({3}), static_cast<int64_t>(level));
  const std::string msg = error_message([&] { op(XArgs{dual}); });
  torch::autograd::ForwardADLevel::release_idx(level);
  EXPECT_THAT(msg, AllOf(HasSubstr("core_user_errors::fake_jvp: the JVP at"),
                         HasSubstr("threw std::runtime_error: jvp broke")));
}

}  // namespace
