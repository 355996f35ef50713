// The out= overload customop defines for every op with a shape function (op_out_variant.cpp):
// its schema (untagged), the C++ check of the out= rules, results equal to the functional
// op's through the same kernel, torch's out= convention (dtype and device must match, other
// sizes are resized), non-contiguous buffers, the version bump, the refusals (grad, memory
// shared with an input) leaving the buffer unchanged, and its fake kernel.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <string>
#include <tuple>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct ScaleArgs {
  at::Tensor x;
  double alpha = 2.0;
};

int scale_kernel_calls = 0;

customop::Op<ScaleArgs>& scale_op() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("core_out::scale(Tensor x, float alpha=2.0) -> Tensor");
    o.shape([](const ScaleArgs& a) { return customop::TensorSpec::like(a.x); });
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a, const at::Tensor& out) {
      ++scale_kernel_calls;
      at::mul_out(const_cast<at::Tensor&>(out), a.x, a.alpha);
    });
    return o;
  }();
  return op;
}

struct SplitArgs {
  at::Tensor x;
};

// Two returns, named: the out arguments take their names.
customop::Op<SplitArgs, std::tuple<at::Tensor, at::Tensor>>& split_op() {
  static auto& op = []() -> customop::Op<SplitArgs, std::tuple<at::Tensor, at::Tensor>>& {
    auto& o = customop::define<SplitArgs, std::tuple<at::Tensor, at::Tensor>>(
        "core_out::split_sign(Tensor x) -> (Tensor pos, Tensor neg)");
    o.shape([](const SplitArgs& a) {
      return std::tuple{customop::TensorSpec::like(a.x), customop::TensorSpec::like(a.x)};
    });
    o.impl(c10::DeviceType::CPU,
           [](const SplitArgs& a, const std::tuple<at::Tensor, at::Tensor>& o) {
             at::clamp_min_out(const_cast<at::Tensor&>(std::get<0>(o)), a.x, 0);
             at::clamp_max_out(const_cast<at::Tensor&>(std::get<1>(o)), a.x, 0);
           });
    return o;
  }();
  return op;
}

c10::OperatorHandle out_of(const std::string& name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "out");
}

at::Tensor call_out(const at::Tensor& x, double alpha, const at::Tensor& out) {
  scale_op();
  static const auto h =
      out_of("core_out::scale").typed<at::Tensor&(const at::Tensor&, double, at::Tensor&)>();
  return h.call(x, alpha, const_cast<at::Tensor&>(out));
}

TEST(OutVariant, SchemaAndTag) {
  const auto& op = scale_op();
  ASSERT_NE(op.out_handle(), nullptr);
  std::ostringstream os;
  os << op.out_handle()->schema();
  EXPECT_EQ(os.str(), "core_out::scale.out(Tensor x, float alpha=2., *, Tensor(a!) out) -> ()");
  // Untagged: Tag.out makes torch 2.15's AOTInductor emit a C shim call that does not exist.
  EXPECT_FALSE(op.out_handle()->hasTag(at::Tag::out));
  split_op();
  std::ostringstream two;
  two << out_of("core_out::split_sign").schema();
  EXPECT_EQ(two.str(),
            "core_out::split_sign.out(Tensor x, *, Tensor(a!) pos, Tensor(b!) neg) -> ()");
}

TEST(OutVariant, SameKernelSameResultAndWritesTheBufferDirectly) {
  const at::Tensor x = at::randn({3, 4}, at::kDouble);
  const at::Tensor out = at::empty({3, 4}, at::kDouble);
  const void* data = out.data_ptr();
  const int before = scale_kernel_calls;
  call_out(x, 1.5, out);
  EXPECT_EQ(scale_kernel_calls, before + 1);
  EXPECT_EQ(out.data_ptr(), data);  // written in place, no copy
  EXPECT_TRUE(at::equal(out, scale_op()(ScaleArgs{x, 1.5})));
}

TEST(OutVariant, SeveralReturns) {
  split_op();
  const at::Tensor x = at::randn({5}, at::kDouble);
  at::Tensor pos = at::empty({5}, at::kDouble);
  at::Tensor neg = at::empty({5}, at::kDouble);
  auto h = out_of("core_out::split_sign")
               .typed<std::tuple<at::Tensor&, at::Tensor&>(const at::Tensor&, at::Tensor&,
                                                           at::Tensor&)>();
  h.call(x, pos, neg);
  EXPECT_TRUE(at::equal(pos, x.clamp_min(0)));
  EXPECT_TRUE(at::equal(neg, x.clamp_max(0)));
}

TEST(OutVariant, NonContiguousBufferGetsTheRightValues) {
  const at::Tensor x = at::randn({3, 4}, at::kDouble);
  const at::Tensor base = at::zeros({4, 3}, at::kDouble);
  const at::Tensor out = base.t();  // [3, 4], column-major
  call_out(x, 2.0, out);
  EXPECT_TRUE(at::equal(out, x * 2.0));
  EXPECT_EQ(out.data_ptr(), base.data_ptr());
}

TEST(OutVariant, WrongSizesAreResized) {
  const at::Tensor x = at::randn({3, 4}, at::kDouble);
  const at::Tensor empty = at::empty({0}, at::kDouble);
  call_out(x, 2.0, empty);
  EXPECT_EQ(empty.sizes(), x.sizes());
  EXPECT_TRUE(at::equal(empty, x * 2.0));
  const at::Tensor wrong = at::zeros({7}, at::kDouble);
  call_out(x, 2.0, wrong);  // resized, with a warning
  EXPECT_TRUE(at::equal(wrong, x * 2.0));
}

TEST(OutVariant, WrongDtypeRefusedNamingArgumentAndBothDtypesBufferUnchanged) {
  const at::Tensor x = at::randn({3}, at::kDouble);
  const at::Tensor out = at::full({3}, 7.0, at::kFloat);
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, out); }),
              AllOf(HasSubstr("core_out::scale.out: out argument 'out' has dtype Float"),
                    HasSubstr("expected Double")));
  EXPECT_TRUE(at::equal(out, at::full({3}, 7.0, at::kFloat)));
}

TEST(OutVariant, BufferSharingMemoryWithAnInputIsRefused) {
  const at::Tensor x = at::randn({4}, at::kDouble);
  const at::Tensor copy = x.clone();
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, x); }),
              HasSubstr("out argument 'out' shares memory with argument 'x'"));
  EXPECT_TRUE(at::equal(x, copy));
}

TEST(OutVariant, BufferOnAnotherDeviceOrStride0OrInferenceIsRefusedUnchanged) {
  const at::Tensor x = at::randn({3}, at::kDouble);
  const at::Tensor meta = at::empty({3}, at::TensorOptions().dtype(at::kDouble).device(at::kMeta));
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, meta); }),
              AllOf(HasSubstr("core_out::scale.out: out argument 'out' is on meta"),
                    HasSubstr("expected cpu")));
  const at::Tensor base = at::full({1}, 7.0, at::kDouble);
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, base.expand({3})); }),
              HasSubstr("out argument 'out' has several elements in one memory location"));
  EXPECT_EQ(base.item<double>(), 7.0);
  at::Tensor inference;
  {
    const c10::InferenceMode guard;
    inference = at::zeros({3}, at::kDouble);
  }
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, inference); }),
              HasSubstr("out argument 'out' is an inference tensor"));
  EXPECT_TRUE(at::equal(inference, at::zeros({3}, at::kDouble)));
}

TEST(OutVariant, BufferOverlappingAStridedOrListInputIsRefused) {
  const at::Tensor xb = at::randn({4, 8}, at::kDouble);
  const at::Tensor copy = xb.clone();
  // A non-dense input (torch cannot tell exactly): the same storage is refused.
  EXPECT_THAT(error_message([&] { call_out(xb.narrow(1, 0, 4), 2.0, xb); }),
              HasSubstr("out argument 'out' shares memory with argument 'x'"));
  EXPECT_TRUE(at::equal(xb, copy));
}

TEST(OutVariant, RefusesGradUnderGradModeAllowsItUnderNoGrad) {
  const at::Tensor x = at::randn({3}, at::kDouble).requires_grad_();
  const at::Tensor out = at::zeros({3}, at::kDouble);
  EXPECT_THAT(error_message([&] { call_out(x, 2.0, out); }),
              AllOf(HasSubstr("core_out::scale.out: out= does not support automatic "
                              "differentiation, but argument 'x' requires grad"),
                    HasSubstr("torch.no_grad()")));
  EXPECT_TRUE(at::equal(out, at::zeros({3}, at::kDouble)));
  const at::NoGradGuard no_grad;
  call_out(x, 2.0, out);
  EXPECT_TRUE(at::equal(out, x.detach() * 2.0));
}

TEST(OutVariant, BumpsTheBuffersVersion) {
  const at::Tensor x = at::randn({3}, at::kDouble);
  const at::Tensor out = at::zeros({3}, at::kDouble);
  const auto v = out._version();
  call_out(x, 2.0, out);
  EXPECT_EQ(out._version(), v + 1);
}

TEST(OutVariant, FakeKernelResizesMetaBuffers) {
  const at::Tensor x = at::empty({2, 5}, at::TensorOptions().dtype(at::kDouble).device(at::kMeta));
  const at::Tensor out = at::empty({0}, x.options());
  call_out(x, 2.0, out);
  EXPECT_EQ(out.sizes(), x.sizes());
}

TEST(OutVariant, CheckOutSchemaRefusesBrokenOverloads) {
  const auto functional = torch::schema("ns::f(Tensor x) -> Tensor");
  auto check = [&](const char* text) {
    return error_message([&] { customop::check_out_schema(functional, torch::schema(text)); });
  };
  EXPECT_NO_THROW(customop::check_out_schema(
      functional, torch::schema("ns::f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")));
  EXPECT_THAT(check("ns::f.out(Tensor x, Tensor(a!) out) -> Tensor(a!)"),
              HasSubstr("out argument 'out' must be keyword-only"));
  EXPECT_THAT(check("ns::f.out(Tensor x, *, Tensor out) -> Tensor"),
              HasSubstr("must be written in its own alias set"));
  EXPECT_NO_THROW(customop::check_out_schema(
      functional, torch::schema("ns::f.out(Tensor x, *, Tensor(a!) out) -> ()")));
  EXPECT_THAT(check("ns::f.out(Tensor x, *, Tensor(a!) out) -> Tensor"),
              HasSubstr("return 0 must be out argument 'out' itself"));
  EXPECT_THAT(check("ns::f.out(Tensor y, *, Tensor(a!) out) -> Tensor(a!)"),
              HasSubstr("argument 0 is 'y'"));
  EXPECT_THAT(check("ns::f.out(Tensor(b!) x, *, Tensor(a!) out) -> Tensor(a!)"),
              HasSubstr("argument 'x' is written"));
}

}  // namespace
