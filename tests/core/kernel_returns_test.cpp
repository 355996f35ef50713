// What a device kernel returns, and what a fake kernel is given (op_kernel_returns.cpp): an
// output that shares memory with an argument or another output, an undefined output, an output on
// the wrong device, a call mixing meta and real tensors, and a shape function next to a kernel that
// allocates its own outputs are refused with the op, the kernel and the argument named.
#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};
struct XsArgs {
  std::vector<at::Tensor> xs;
};

// One op per kernel body, defined once per process.
template <class Args = XArgs, class Ret = at::Tensor, class F>
customop::Op<Args, Ret>& op_with(const std::string& name, F kernel) {
  auto& o = customop::define<Args, Ret>(
      "core_returns::" + name + (std::is_same_v<Args, XArgs> ? "(Tensor x)" : "(Tensor[] xs)") +
      " -> " + (std::is_same_v<Ret, at::Tensor> ? "Tensor" : "Tensor[]"));
  o.impl(c10::DeviceType::CPU, kernel);
  if constexpr (std::is_same_v<Args, XArgs> && std::is_same_v<Ret, at::Tensor>) {
    // A formula, so a call under grad mode reaches the kernel (the grad is not the point).
    struct NoSaved {};
    o.impl_autograd([](const XArgs&, const at::Tensor&) { return NoSaved{}; },
                    [](const NoSaved&, const at::Tensor& g) {
                      return customop::Grads{{"x", g}};
                    });
  }
  return o;
}

TEST(KernelReturns, AViewOfAnInputIsRefusedWithOrWithoutGrad) {
  static auto& view = op_with("flat_view", [](const XArgs& a) { return a.x.view({-1}); });
  static auto& same = op_with("same", [](const XArgs& a) { return a.x; });
  static auto& sliced = op_with<XsArgs, std::vector<at::Tensor>>("list_slice", [](const XsArgs& a) {
    return std::vector<at::Tensor>{a.xs[1].narrow(0, 0, 1)};
  });
  for (const bool requires_grad : {false, true}) {
    SCOPED_TRACE(requires_grad);
    const auto x = at::randn({2, 3}, at::kDouble).requires_grad_(requires_grad);
    EXPECT_THAT(error_message([&] { view(XArgs{x}); }),
                AllOf(HasSubstr("core_returns::flat_view: the CPU kernel at"),
                      HasSubstr("returned output 0 sharing memory with argument 'x' (the tensor "
                                "itself, a view or an alias of it)"),
                      HasSubstr("x.clone()")));
    EXPECT_THAT(error_message([&] { same(XArgs{x}); }),
                HasSubstr("returned output 0 sharing memory with argument 'x'"));
    if (!requires_grad) {  // (no formula)
      EXPECT_THAT(error_message([&] {
                    sliced(XsArgs{{at::randn({2}), x}});
                  }),
                  HasSubstr("returned output 0[0] sharing memory with argument 'xs[1]'"));
    }
    EXPECT_TRUE(x.grad_fn() == nullptr);
  }
  // Another storage object over the input's memory (at::from_blob) is the input too.
  static auto& blob = op_with("blob", [](const XArgs& a) {
    return at::from_blob(const_cast<void*>(a.x.const_data_ptr()), a.x.sizes(), a.x.options());
  });
  EXPECT_THAT(error_message([&] { blob(XArgs{at::randn({3})}); }),
              HasSubstr("returned output 0 sharing memory with argument 'x'"));
  // An empty view holds no memory to share.
  static auto& empty_view =
      op_with("empty_view", [](const XArgs& a) { return a.x.narrow(0, 0, 0); });
  EXPECT_EQ(empty_view(XArgs{at::randn({3})}).numel(), 0);
  // A new tensor is fine (and a copy of the input is one).
  static auto& copy = op_with("copy", [](const XArgs& a) { return a.x.clone(); });
  const auto x = at::randn({3});
  EXPECT_TRUE(at::equal(copy(XArgs{x}), x));
}

TEST(KernelReturns, AnUndefinedOrMisplacedOutputIsRefused) {
  static auto& undefined = op_with("undefined", [](const XArgs&) { return at::Tensor(); });
  static auto& meta =
      op_with("meta_out", [](const XArgs& a) { return at::empty_like(a.x, at::kMeta); });
  static auto& in_list =
      op_with<XsArgs, std::vector<at::Tensor>>("undefined_in_list", [](const XsArgs& a) {
        return std::vector<at::Tensor>{a.xs[0] * 2, at::Tensor()};
      });
  const auto x = at::randn({3});
  EXPECT_THAT(error_message([&] { undefined(XArgs{x}); }),
              AllOf(HasSubstr("core_returns::undefined: the CPU kernel at"),
                    HasSubstr("returned an undefined tensor as output 0")));
  EXPECT_THAT(error_message([&] { meta(XArgs{x}); }),
              AllOf(HasSubstr("core_returns::meta_out: the CPU kernel at"),
                    HasSubstr("returned output 0 on meta; a CPU kernel returns tensors on its own "
                              "device")));
  EXPECT_THAT(error_message([&] { in_list(XsArgs{{x}}); }),
              HasSubstr("returned an undefined tensor as output 0[1]"));
}

TEST(KernelReturns, TwoOutputsSharingMemoryAreRefused) {
  static auto& twice = []() -> customop::Op<XArgs, std::tuple<at::Tensor, at::Tensor>>& {
    auto& o = customop::define<XArgs, std::tuple<at::Tensor, at::Tensor>>(
        "core_returns::twice(Tensor x) -> (Tensor, Tensor)");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) {
      at::Tensor y = a.x * 2;
      return std::make_tuple(y, y.view({-1}));
    });
    return o;
  }();
  static auto& list = op_with<XsArgs, std::vector<at::Tensor>>("list_twice", [](const XsArgs& a) {
    at::Tensor y = a.xs[0] * 2;
    return std::vector<at::Tensor>{y, a.xs[0] + 1, y};
  });
  const auto x = at::randn({2, 3});
  EXPECT_THAT(error_message([&] { twice(XArgs{x}); }),
              AllOf(HasSubstr("core_returns::twice: the CPU kernel at"),
                    HasSubstr("returned output 1 sharing memory with output 0 (the same tensor, "
                              "a view or an alias of it)")));
  EXPECT_THAT(error_message([&] { list(XsArgs{{x}}); }),
              HasSubstr("returned output 0[2] sharing memory with output 0[0]"));
  // Outputs of their own are fine, and so are disjoint parts of one new buffer.
  static auto& apart = op_with<XsArgs, std::vector<at::Tensor>>("list_apart", [](const XsArgs& a) {
    return std::vector<at::Tensor>{a.xs[0] * 2, a.xs[0] * 3};
  });
  EXPECT_EQ(apart(XsArgs{{x}}).size(), 2u);
  static auto& chunks = op_with<XsArgs, std::vector<at::Tensor>>(
      "list_chunks", [](const XsArgs& a) { return (a.xs[0] * 2).chunk(2); });
  EXPECT_EQ(chunks(XsArgs{{x}}).size(), 2u);
  static auto& overlapping =
      op_with<XsArgs, std::vector<at::Tensor>>("list_overlapping", [](const XsArgs& a) {
        at::Tensor y = a.xs[0].flatten() * 2;
        return std::vector<at::Tensor>{y.narrow(0, 0, 4), y.narrow(0, 2, 4)};
      });
  EXPECT_THAT(error_message([&] { overlapping(XsArgs{{x}}); }),
              HasSubstr("returned output 0[1] sharing memory with output 0[0]"));
  // Strided and expanded views, which ATen's overlap check cannot judge: the bytes decide.
  static auto& strided =
      op_with<XsArgs, std::vector<at::Tensor>>("list_strided", [](const XsArgs& a) {
        const int64_t how = a.xs[1].item<int64_t>();
        at::Tensor y = at::zeros({4, 4}, a.xs[0].options());
        at::Tensor e = at::zeros({1}, a.xs[0].options());
        switch (how) {
          case 0: return std::vector<at::Tensor>{y.select(1, 0), y.select(0, 0)};  // share y[0][0]
          case 1: return std::vector<at::Tensor>{y.slice(0, 0, 4, 2), y.slice(0, 0, 4, 2)};
          case 2: return std::vector<at::Tensor>{e.expand({4}), e};
          case 3: return std::vector<at::Tensor>{y, at::from_blob(y.data_ptr(), {4}, y.options())};
          default: return std::vector<at::Tensor>{y.slice(0, 0, 4, 2), y.slice(0, 1, 4, 2)};
        }
      });
  for (int64_t how = 0; how < 4; ++how) {
    SCOPED_TRACE(how);
    EXPECT_THAT(error_message([&] {
                  strided(XsArgs{{x, at::scalar_tensor(how, at::kLong)}});
                }),
                HasSubstr("returned output 0[1] sharing memory with output 0[0]"));
  }
  // Interleaved rows of one buffer share no byte.
  EXPECT_EQ(strided(XsArgs{{x, at::scalar_tensor(4, at::kLong)}}).size(), 2u);
}

TEST(KernelReturns, AFakeKernelReturningARealTensorIsRefused) {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("core_returns::real_fake(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * 2; });
    // The classic slip: at::empty without the input's options allocates on the CPU.
    o.impl_fake([](const XArgs& a) { return at::empty(a.x.sizes()); });
    return o;
  }();
  EXPECT_THAT(error_message([&] { op(XArgs{at::empty({3}, at::kMeta)}); }),
              AllOf(HasSubstr("core_returns::real_fake: the fake (Meta) kernel at"),
                    HasSubstr("returned output 0 on cpu; a fake kernel returns meta tensors")));
}

struct PairArgs {
  at::Tensor x;
  at::Tensor scale;
};

TEST(KernelReturns, MetaMixedWithRealTensorsIsRefusedByName) {
  static auto& op = []() -> customop::Op<PairArgs>& {
    auto& o = customop::define<PairArgs>("core_returns::scaled(Tensor x, Tensor scale) -> Tensor");
    o.shape([](const PairArgs& a) { return customop::TensorSpec::like(a.x); });
    o.impl(c10::DeviceType::CPU, [](const PairArgs& a, const at::Tensor& out) {
      at::mul_out(const_cast<at::Tensor&>(out), a.x, a.scale);
    });
    return o;
  }();
  const auto x = at::randn({3});
  EXPECT_THAT(error_message([&] {
                op(PairArgs{x, at::empty({3}, at::kMeta)});
              }),
              AllOf(HasSubstr("core_returns::scaled: argument 'x' is a cpu tensor but 'scale' "
                              "is a meta tensor"),
                    HasSubstr("put every tensor argument on one device")));
  // All meta: the fake kernel's answer; all CPU: the kernel's.
  EXPECT_TRUE(op(PairArgs{x.to(at::kMeta), at::empty({3}, at::kMeta)}).is_meta());
  EXPECT_TRUE(at::equal(op(PairArgs{x, at::full({3}, 2.0)}), x * 2));
}

TEST(KernelReturns, AShapeFunctionAndAnAllocatingKernelAreNotBothAccepted) {
  const std::string after = error_message([] {
    auto& o = customop::define<XArgs>("core_returns::shape_first(Tensor x) -> Tensor");
    o.shape([](const XArgs& a) { return customop::TensorSpec::like(a.x); });
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * 2; });
  });
  EXPECT_THAT(after, AllOf(HasSubstr("core_returns::shape_first: the CPU kernel at"),
                           HasSubstr("allocates its outputs (kernel(const Args&)), but the op has "
                                     "a shape function (declared at"),
                           HasSubstr("kernel(const Args&, outputs)")));
  static customop::Op<XArgs>* kernel_first = nullptr;
  const std::string before = error_message([] {
    auto& o = customop::define<XArgs>("core_returns::kernel_first(Tensor x) -> Tensor");
    kernel_first = &o;
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * 2; });
    o.shape([](const XArgs& a) { return customop::TensorSpec::like(a.x); });
  });
  EXPECT_THAT(before, AllOf(HasSubstr("core_returns::kernel_first: the shape function at"),
                            HasSubstr("comes after the CPU kernel at")));
  // The refused shape function installed nothing: the op still runs, and has no fake kernel.
  ASSERT_NE(kernel_first, nullptr);
  auto& kept = *kernel_first;
  EXPECT_FALSE(kept.has_shape());
  EXPECT_THAT(error_message([&] { kept(XArgs{at::empty({2}, at::kMeta)}); }),
              HasSubstr("no fake (Meta) kernel registered"));
  EXPECT_TRUE(at::equal(kept(XArgs{at::ones({2})}), at::full({2}, 2.0)));
}

}  // namespace
