// SCENARIOS B (I1-I4): kernels per device and how calls reach them: op(args), the
// dispatcher's typed call, and a boxed call.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

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

// SCENARIOS I1.
TEST(Dispatch, CpuImplRuns) {
  static std::atomic<int> calls{0};
  auto& op =
      customop::define<ScaleArgs>("core_dispatch::i1_scale(Tensor x, float alpha) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) {
    ++calls;
    return a.x * a.alpha;
  });
  EXPECT_TRUE(op.has_kernel(c10::DeviceType::CPU));
  EXPECT_FALSE(op.has_kernel(c10::DeviceType::CUDA));
  const auto x = at::arange(4, at::kDouble);
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 3.0}), x * 3));
  EXPECT_EQ(calls.load(), 1);
}

// I2: each device runs its own impl. The CUDA half needs a GPU (label `gpu`); without one it
// still registers the CUDA impl and checks the CPU calls never reach it.
struct I2Op {
  static customop::Op<ScaleArgs>& get() {
    static auto& op = []() -> customop::Op<ScaleArgs>& {
      auto& o = customop::define<ScaleArgs>(
          "core_dispatch::i2_two_devices(Tensor x, float alpha) -> Tensor");
      o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) {
        EXPECT_TRUE(a.x.is_cpu());
        return a.x * a.alpha;
      });
      o.impl(c10::DeviceType::CUDA, [](const ScaleArgs& a) {
        EXPECT_TRUE(a.x.is_cuda());
        return a.x * a.alpha + 100;
      });
      o.impl_save_for_backward(
          [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
      o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
        return customop::Grads{{"x", g * s.alpha}};
      });
      return o;
    }();
    return op;
  }
};

// SCENARIOS I2.
TEST(Dispatch, CpuCallsRunTheCpuImpl) {
  auto& op = I2Op::get();
  EXPECT_TRUE(op.has_kernel(c10::DeviceType::CUDA));
  const auto x = at::arange(3, at::kDouble);
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 2.0}), x * 2));
}

// SCENARIOS I2.
TEST(DispatchCuda, CudaCallsRunTheCudaImpl) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU";
  auto& op = I2Op::get();
  const auto x =
      at::arange(3, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA)).requires_grad_();
  const auto y = op(ScaleArgs{x, 2.0});
  EXPECT_TRUE(y.is_cuda());
  EXPECT_TRUE(at::equal(y.detach().cpu(), at::arange(3, at::kDouble) * 2 + 100));
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad().cpu(), at::full({3}, 2.0, at::kDouble)));
}

// SCENARIOS I3.
TEST(Dispatch, NoImplErrorNamesTheOpAndHowToRegister) {
  auto& op =
      customop::define<ScaleArgs>("core_dispatch::i3_no_impl(Tensor x, float alpha) -> Tensor");
  EXPECT_FALSE(op.has_kernel(c10::DeviceType::CPU));
  const auto x = at::ones({2});
  const auto msg = error_message<c10::NotImplementedError>([&] { op(ScaleArgs{x, 1.0}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_dispatch::i3_no_impl: no CPU impl registered"),
                         HasSubstr("op.impl(c10::DeviceType::CPU, kernel)")));
  // Registering one later makes the op work.
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 2.0}), x * 2));
}

// SCENARIOS I3.
TEST(Dispatch, NoImplErrorAlsoThroughAutograd) {
  auto& op = customop::define<ScaleArgs>(
      "core_dispatch::i3_no_impl_grad(Tensor x, float alpha) -> Tensor");
  op.impl_save_for_backward(
      [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
  op.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
    return customop::Grads{{"x", g * s.alpha}};
  });
  const auto x = at::ones({2}).requires_grad_();
  const auto msg = error_message<c10::NotImplementedError>([&] { op(ScaleArgs{x, 1.0}); });
  EXPECT_THAT(msg, HasSubstr("core_dispatch::i3_no_impl_grad: no CPU impl registered"));
}

// SCENARIOS I4.
TEST(Dispatch, SecondImplForTheSameDeviceRefused) {
  auto& op =
      customop::define<ScaleArgs>("core_dispatch::i4_twice(Tensor x, float alpha) -> Tensor");
  // clang-format off
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; }); const int first_line = __LINE__;
  // clang-format on
  int second_line = 0;
  const auto msg = error_message([&] {
    // clang-format off
    second_line = __LINE__; op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x; });
    // clang-format on
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_dispatch::i4_twice: a CPU impl is already registered at " +
                                   CUSTOMOP_TEST_LOCATION(first_line)),
                         HasSubstr("the second one at " + CUSTOMOP_TEST_LOCATION(second_line))));
  // The first impl stays in place.
  const auto x = at::ones({2});
  EXPECT_TRUE(at::equal(op(ScaleArgs{x, 5.0}), x * 5));
  // Another device is still free.
  EXPECT_NO_THROW(op.impl(c10::DeviceType::CUDA, [](const ScaleArgs& a) { return a.x; }));
  const auto cuda_msg = error_message(
      [&] { op.impl(c10::DeviceType::CUDA, [](const ScaleArgs& a) { return a.x; }); });
  EXPECT_THAT(cuda_msg, HasSubstr("a CUDA impl is already registered"));
}

TEST(Dispatch, ImplForAnotherDeviceTypeRefused) {
  auto& op =
      customop::define<ScaleArgs>("core_dispatch::meta_impl(Tensor x, float alpha) -> Tensor");
  const auto msg = error_message<c10::ValueError>(
      [&] { op.impl(c10::DeviceType::MPS, [](const ScaleArgs& a) { return a.x; }); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_dispatch::meta_impl: impl() takes c10::DeviceType::CPU "
                                   "or c10::DeviceType::CUDA"),
                         HasSubstr("MPS")));
  // Meta is the fake kernel's: the message says where it goes.
  const auto meta_msg = error_message<c10::ValueError>(
      [&] { op.impl(c10::DeviceType::Meta, [](const ScaleArgs& a) { return a.x; }); });
  EXPECT_THAT(meta_msg, HasSubstr("impl() does not take c10::DeviceType::Meta; register the fake "
                                  "kernel with op.impl_fake(kernel)"));
}

// ---- the three ways to call an op --------------------------------------------------------

customop::Op<ScaleArgs>& call_paths_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_dispatch::calls(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_save_for_backward(
        [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
    o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", g * s.alpha}};
    });
    return o;
  }();
  return op;
}

TEST(Dispatch, CallThroughOpCallOperator) {
  auto& op = call_paths_op();
  const auto x = at::arange(3, at::kDouble).requires_grad_();
  const auto y = op(ScaleArgs{x, 3.0});
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 3.0, at::kDouble)));
}

TEST(Dispatch, CallThroughTypedDispatcherCall) {
  call_paths_op();
  const auto typed = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("core_dispatch::calls", "")
                         .typed<at::Tensor(const at::Tensor&, double)>();
  const auto x = at::arange(3, at::kDouble).requires_grad_();
  const auto y = typed.call(x, 4.0);
  EXPECT_TRUE(at::equal(y.detach(), x.detach() * 4));
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 4.0, at::kDouble)));
}

TEST(Dispatch, CallBoxed) {
  auto& op = call_paths_op();
  const auto x = at::arange(3, at::kDouble).requires_grad_();
  torch::jit::Stack stack{x, 5.0};
  op.handle().callBoxed(stack);
  ASSERT_EQ(stack.size(), 1u);
  const auto y = stack[0].toTensor();
  EXPECT_TRUE(at::equal(y.detach(), x.detach() * 5));
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 5.0, at::kDouble)));
}

TEST(Dispatch, ToStackMatchesSchemaOrder) {
  const auto x = at::ones({1});
  const auto stack = customop::Op<ScaleArgs>::to_stack(ScaleArgs{x, 0.25});
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_TRUE(stack[0].toTensor().is_same(x));
  EXPECT_EQ(stack[1].toDouble(), 0.25);
}

TEST(Dispatch, RegistryListsDefinedOps) {
  auto& op = call_paths_op();
  EXPECT_EQ(customop::find_op("core_dispatch::calls"), &op);
  EXPECT_EQ(customop::find_op("core_dispatch::never_defined"), nullptr);
  const auto all = customop::registered_ops();
  EXPECT_NE(std::find(all.begin(), all.end(), &op), all.end());
}

}  // namespace

// ---- None for a Tensor argument ------------------------------------------------------------

struct NoneArgs {
  at::Tensor x;
  at::Tensor y;
  std::vector<at::Tensor> zs;
};

TEST(Dispatch, NoneForATensorNamesTheOpAndArgument) {
  auto& op = customop::define<NoneArgs>(
      "core_dispatch::none_arg(Tensor x, Tensor y, Tensor[] zs) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const NoneArgs& a) { return a.x + a.y; });
  const auto x = at::ones({2}, at::kDouble);
  // What Python's torch.ops.core_dispatch.none_arg(x, None, [x]) puts on the stack.
  torch::jit::Stack stack{x, at::Tensor(), c10::List<at::Tensor>({x})};
  EXPECT_EQ(error_message<c10::TypeError>([&] { op.handle().callBoxed(stack); }),
            "core_dispatch::none_arg: argument 'y' (Tensor) expected a tensor, got None");
  stack = {x, x, c10::List<at::Tensor>({x, at::Tensor()})};
  EXPECT_EQ(error_message<c10::TypeError>([&] { op.handle().callBoxed(stack); }),
            "core_dispatch::none_arg: argument 'zs' (Tensor[]) element 1 expected a tensor, got "
            "None");
  stack = {x, x, c10::List<at::Tensor>({x})};
  op.handle().callBoxed(stack);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), x * 2));
}

// The same check when the op has a formula: the Autograd kernel runs first.
TEST(Dispatch, NoneForATensorNamesTheOpAndArgumentThroughAutograd) {
  auto& op = customop::define<NoneArgs>(
      "core_dispatch::none_arg_autograd(Tensor x, Tensor y, Tensor[] zs) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const NoneArgs& a) { return a.x + a.y; });
  op.impl_save_for_backward([](const NoneArgs&, const at::Tensor&) { return ScaleSaved{1.0}; });
  op.impl_backward([](const ScaleSaved&, const at::Tensor& g) {
    return customop::Grads{{"x", g}, {"y", g}};
  });
  const auto x = at::ones({2}, at::kDouble);
  torch::jit::Stack stack{x, at::Tensor(), c10::List<at::Tensor>({x})};
  EXPECT_EQ(error_message<c10::TypeError>([&] { op.handle().callBoxed(stack); }),
            "core_dispatch::none_arg_autograd: argument 'y' (Tensor) expected a tensor, got None");
}
