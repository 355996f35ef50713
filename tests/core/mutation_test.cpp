// Ops that write arguments in place: customop::MutableTensor fields and `Tensor(a!)` schemas,
// `-> ()` ops, the schema rules for written arguments, the version bump after each call, and
// the refusals (a written tensor that requires grad or views one, an expanded written tensor,
// a written tensor sharing memory with another argument), each of which leaves every argument
// unchanged.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct AddIntoArgs {
  customop::MutableTensor acc;
  at::Tensor x;
};

int add_into_calls = 0;

customop::Op<AddIntoArgs, void>& add_into() {
  static auto& op = []() -> customop::Op<AddIntoArgs, void>& {
    auto& o =
        customop::define<AddIntoArgs, void>("core_mut::add_into(Tensor(a!) acc, Tensor x) -> ()");
    o.impl(c10::DeviceType::CPU, [](const AddIntoArgs& a) {
      ++add_into_calls;
      a.acc.add_(a.x);
    });
    o.impl_fake([](const AddIntoArgs&) {});
    return o;
  }();
  return op;
}

TEST(Mutation, WritesTheArgumentAndBumpsItsVersionOnce) {
  auto& op = add_into();
  EXPECT_TRUE(op.mutates());
  EXPECT_TRUE(op.args()[0].written);
  EXPECT_FALSE(op.args()[1].written);
  EXPECT_TRUE(op.schema().is_mutable());
  auto acc = at::zeros({4}, at::kDouble);
  const auto x = at::arange(4, at::kDouble);
  const auto v0 = acc._version();
  const auto vx = x._version();
  op(AddIntoArgs{acc, x});
  EXPECT_TRUE(at::equal(acc, x));
  EXPECT_EQ(acc._version(), v0 + 1);
  EXPECT_EQ(x._version(), vx);  // read arguments keep their version
}

TEST(Mutation, PythonStyleBoxedCallWritesToo) {
  add_into();
  auto acc = at::ones({3}, at::kFloat);
  const auto h = c10::Dispatcher::singleton().findSchemaOrThrow("core_mut::add_into", "");
  torch::jit::Stack stack{acc, at::full({3}, 2.0f)};
  h.callBoxed(stack);
  EXPECT_TRUE(stack.empty());  // -> (): nothing returned
  EXPECT_TRUE(at::equal(acc, at::full({3}, 3.0f)));
}

TEST(Mutation, OverwrittenSavedTensorRaisesInBackward) {
  auto& op = add_into();
  const auto w = at::randn({4}, at::kDouble).requires_grad_();
  auto acc = at::randn({4}, at::kDouble);
  const auto loss = (w * acc).sum();  // saves acc for w's grad
  op(AddIntoArgs{acc, at::ones({4}, at::kDouble)});
  EXPECT_THAT(error_message([&] { torch::autograd::grad({loss}, {w}); }),
              HasSubstr("modified by an inplace operation"));
}

TEST(Mutation, WrittenArgumentThatRequiresGradIsRefusedAndUnchanged) {
  auto& op = add_into();
  const auto acc = at::zeros({4}, at::kDouble).requires_grad_();
  const int calls = add_into_calls;
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{acc, at::ones({4}, at::kDouble)});
              }),
              AllOf(HasSubstr("core_mut::add_into"), HasSubstr("argument 'acc'"),
                    HasSubstr("requires grad")));
  EXPECT_EQ(add_into_calls, calls);
  EXPECT_TRUE(at::equal(acc.detach(), at::zeros({4}, at::kDouble)));
  // Under no_grad the same write is allowed (an optimizer step), and bumps the version.
  const auto v = acc._version();
  {
    at::NoGradGuard no_grad;
    op(AddIntoArgs{acc, at::ones({4}, at::kDouble)});
  }
  EXPECT_TRUE(at::equal(acc.detach(), at::ones({4}, at::kDouble)));
  EXPECT_EQ(acc._version(), v + 1);
}

TEST(Mutation, ReadArgumentThatRequiresGradIsRefusedWithoutAFormula) {
  auto& op = add_into();
  auto acc = at::zeros({4}, at::kDouble);
  const auto x = at::ones({4}, at::kDouble).requires_grad_();
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{acc, x});
              }),
              AllOf(HasSubstr("core_mut::add_into"), HasSubstr("argument 'x'")));
  EXPECT_TRUE(at::equal(acc, at::zeros({4}, at::kDouble)));
}

TEST(Mutation, ViewOfATensorThatRequiresGradIsRefused) {
  auto& op = add_into();
  const auto base = at::zeros({2, 4}, at::kDouble).requires_grad_();
  at::Tensor row;
  {
    at::NoGradGuard no_grad;
    row = base[0];  // a view made under no_grad: it still reports its base's requires_grad
  }
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{row, at::ones({4}, at::kDouble)});
              }),
              AllOf(HasSubstr("argument 'acc'"), HasSubstr("requires grad")));
  EXPECT_TRUE(at::equal(base.detach(), at::zeros({2, 4}, at::kDouble)));
}

TEST(Mutation, ExpandedWrittenArgumentIsRefusedBeforeTheKernel) {
  auto& op = add_into();
  const auto storage = at::zeros({1}, at::kDouble);
  const auto expanded = storage.expand({4});
  const int calls = add_into_calls;
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{expanded, at::ones({4}, at::kDouble)});
              }),
              AllOf(HasSubstr("argument 'acc'"), HasSubstr("share one memory location"),
                    HasSubstr("strides [0]")));
  EXPECT_EQ(add_into_calls, calls);
  EXPECT_EQ(storage.item<double>(), 0.0);
}

TEST(Mutation, WrittenArgumentSharingMemoryWithAnotherIsRefused) {
  auto& op = add_into();
  auto buf = at::arange(8, at::kDouble);
  const auto before = buf.clone();
  EXPECT_THAT(
      error_message([&] {
        op(AddIntoArgs{buf, buf});
      }),
      AllOf(HasSubstr("argument 'acc'"), HasSubstr("argument 'x'"), HasSubstr("the same tensor")));
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{buf.slice(0, 0, 4), buf.slice(0, 2, 6)});
              }),
              HasSubstr("shares memory with argument 'x'"));
  // Strided views that interleave in one storage: torch calls it too hard; the byte extents
  // intersect, so it is refused too.
  const auto grid = at::zeros({4, 4}, at::kDouble);
  EXPECT_THAT(error_message([&] {
                op(AddIntoArgs{grid.select(1, 0), grid.select(1, 1)});
              }),
              AllOf(HasSubstr("may share memory with argument 'x'"),
                    HasSubstr("byte ranges in one storage overlap")));
  EXPECT_TRUE(at::equal(buf, before));
  // Disjoint slices of one storage are separate tensors.
  op(AddIntoArgs{buf.slice(0, 0, 4), buf.slice(0, 4, 8)});
  EXPECT_TRUE(at::equal(buf.slice(0, 0, 4), at::tensor({4.0, 6.0, 8.0, 10.0}, at::kDouble)));
}

TEST(Mutation, MetaAndInferenceModeCalls) {
  auto& op = add_into();
  op(AddIntoArgs{at::empty({3}, at::device(at::kMeta)), at::empty({3}, at::device(at::kMeta))});
  auto acc = at::zeros({2}, at::kFloat);
  {
    c10::InferenceMode guard;
    op(AddIntoArgs{acc, at::ones({2}, at::kFloat)});
  }
  EXPECT_TRUE(at::equal(acc, at::ones({2}, at::kFloat)));
}

TEST(Mutation, AnAutocastPolicyThatWouldCastAWrittenTensorIsRefused) {
  auto& op = add_into();
  EXPECT_THAT(error_message([&] { op.autocast(customop::AutocastPolicy::kFloat32); }),
              AllOf(HasSubstr("core_mut::add_into"), HasSubstr("writes arguments in place"),
                    HasSubstr("kRefuse")));
  EXPECT_FALSE(op.autocast_policy().has_value());
}

TEST(Mutation, ABackwardFormulaIsRefused) {
  auto& op = add_into();
  struct Saved {
    double unused;
  };
  EXPECT_THAT(error_message([&] {
                op.impl_save_for_backward(
                    [](const AddIntoArgs&, const std::tuple<>&) { return Saved{0.0}; });
              }),
              AllOf(HasSubstr("core_mut::add_into"), HasSubstr("writes an argument in place"),
                    HasSubstr("is refused")));
}

// ---- schema rules --------------------------------------------------------------------------

struct TwoWritten {
  customop::MutableTensor a;
  customop::MutableTensor b;
};
struct PlainPair {
  at::Tensor a;
  at::Tensor b;
};

TEST(MutationSchema, InferredSchemaGivesEachWrittenFieldItsOwnAliasSet) {
  auto& op = customop::define<TwoWritten, void>("core_mut::inferred_pair");
  EXPECT_EQ(op.schema_text(), "core_mut::inferred_pair(Tensor(a!) a, Tensor(b!) b) -> ()");
  EXPECT_TRUE(op.args()[0].written && op.args()[1].written);
  // A `-> ()` op without impl_fake has a trivial fake kernel: meta calls run the written-argument
  // checks and nothing else.
  const auto meta = at::empty({2}, at::device(at::kMeta));
  op(TwoWritten{meta, at::empty({2}, at::device(at::kMeta))});
  EXPECT_THAT(error_message([&] { op(TwoWritten{meta, meta}); }), HasSubstr("the same tensor"));
}

TEST(MutationSchema, FieldTypeMustDeclareTheWrite) {
  EXPECT_THAT(
      error_message([] {
        customop::define<PlainPair, void>("core_mut::undeclared(Tensor(a!) a, Tensor b) -> ()");
      }),
      AllOf(HasSubstr("field 0 'a'"), HasSubstr("customop::MutableTensor"),
            HasSubstr("at::Tensor")));
  EXPECT_THAT(
      error_message([] {
        customop::define<TwoWritten>("core_mut::unannotated(Tensor a, Tensor(b!) b) -> Tensor");
      }),
      AllOf(HasSubstr("field 0 'a'"), HasSubstr("write Tensor(a!)")));
}

TEST(MutationSchema, MalformedWritesAreRefused) {
  EXPECT_THAT(error_message([] {
                customop::define<TwoWritten, void>(
                    "core_mut::shared_set(Tensor(a!) a, Tensor(a!) b) -> ()");
              }),
              AllOf(HasSubstr("argument 'b'"), HasSubstr("alias set 'a'")));
  EXPECT_THAT(
      error_message([] {
        customop::define<PlainPair>("core_mut::read_alias(Tensor(a) a, Tensor b) -> Tensor");
      }),
      AllOf(HasSubstr("argument 'a'"), HasSubstr("does not write")));
  struct OptWritten {
    std::optional<at::Tensor> a;
  };
  EXPECT_THAT(error_message([] {
                customop::define<OptWritten, void>("core_mut::opt_written(Tensor(a!)? a) -> ()");
              }),
              AllOf(HasSubstr("argument 'a'"), HasSubstr("only a Tensor argument")));
  EXPECT_THAT(error_message([] {
                customop::define<PlainPair, void>("core_mut::no_effect(Tensor a, Tensor b) -> ()");
              }),
              HasSubstr("writes no argument"));
  EXPECT_THAT(error_message([] {
                customop::define<TwoWritten>(
                    "core_mut::alias_return(Tensor(a!) a, Tensor(b!) b) -> Tensor(a!)");
              }),
              AllOf(HasSubstr("returns an alias"), HasSubstr("returns ()")));
}

}  // namespace
