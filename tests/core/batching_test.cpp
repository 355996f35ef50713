// Op::vmap: the batching rule's checks against the schema at declaration, and the general form
// run under a vmap level made here (functorch's C++ layer; the built-in ops' rules run under
// torch.func.vmap in tests/python/test_transforms.py).

#include "support/error_message.h"

#include <customop/customop.h>
#include <customop/vmap_level.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace {

using customop::BatchRule;
using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct NormArgs {
  at::Tensor input;
  at::Tensor weight;
  int64_t dim;
  double eps;
};

customop::Op<NormArgs>& norm(const std::string& name) {
  return customop::define<NormArgs>("core_vmap::" + name +
                                    "(Tensor input, Tensor weight, int dim, float eps) -> Tensor");
}

TEST(BatchRule, RowsIsKeptAndNamesItsArguments) {
  auto& op = norm("ok");
  EXPECT_EQ(op.batch_rule(), nullptr);
  op.vmap(BatchRule::rows({"input"}, {"dim"}));
  ASSERT_NE(op.batch_rule(), nullptr);
  EXPECT_EQ(op.batch_rule()->kind(), BatchRule::Kind::kRows);
  EXPECT_EQ(op.batch_rule()->row_args(), std::vector<std::string>{"input"});
  EXPECT_EQ(op.batch_rule()->dim_args(), std::vector<std::string>{"dim"});
  EXPECT_THAT(error_message([&] { op.vmap(BatchRule::loop()); }),
              AllOf(HasSubstr("core_vmap::ok: a batching rule is already declared at"),
                    HasSubstr("batching_test.cpp"), HasSubstr("is refused")));
}

TEST(BatchRule, UnknownOrWrongKindArgumentsAreRefusedNamingThem) {
  EXPECT_THAT(error_message<c10::ValueError>([] { norm("r1").vmap(BatchRule::rows({"x"})); }),
              AllOf(HasSubstr("core_vmap::r1: op.vmap at"),
                    HasSubstr("the row argument 'x' is not an argument of the schema")));
  EXPECT_THAT(
      error_message<c10::ValueError>([] { norm("r2").vmap(BatchRule::rows({"eps"})); }),
      HasSubstr("the row argument 'eps' must be Tensor, Tensor? or Tensor[], but is float"));
  EXPECT_THAT(
      error_message<c10::ValueError>([] { norm("r3").vmap(BatchRule::rows({"input"}, {"eps"})); }),
      HasSubstr("the dim argument 'eps' must be int, but is float"));
  EXPECT_THAT(error_message<c10::ValueError>([] { norm("r4").vmap(BatchRule::rows({})); }),
              HasSubstr("BatchRule::rows needs a row argument"));
}

struct CountArgs {
  at::Tensor input;
};

TEST(BatchRule, RowsIsRefusedForANonTensorReturnButLoopIsNot) {
  auto& op = customop::define<CountArgs, std::tuple<at::Tensor, int64_t>>(
      "core_vmap::count(Tensor input) -> (Tensor, int)");
  EXPECT_THAT(error_message<c10::ValueError>([&] { op.vmap(BatchRule::rows({"input"})); }),
              AllOf(HasSubstr("BatchRule::rows needs Tensor or Tensor[] returns"),
                    HasSubstr("return 1"), HasSubstr("BatchRule::loop")));
  EXPECT_NO_THROW(op.vmap(BatchRule::loop()));
}

struct XArgs {
  at::Tensor x;
  at::Tensor y;
};

TEST(BatchRule, GeneralRuleGetsTheBatchAtDim0AndItsReturnsAreChecked) {
  auto& op = customop::define<XArgs>("core_vmap::add(Tensor x, Tensor y) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x + a.y; });
  bool wrong = false;
  std::vector<int64_t> seen;
  std::vector<bool> which;
  op.vmap([&](const XArgs& a, const customop::BatchInfo& b) -> at::Tensor {
    seen.push_back(b.size());
    which = {b.batched("x"), b.batched("y"), b.batched("nope")};
    EXPECT_EQ(a.x.size(0), b.size());  // x batched at dim 1 by the caller arrives at dim 0
    at::Tensor y = b.batched("y") ? a.y : a.y.unsqueeze(0);
    return wrong ? (a.x + y).sum(0) : a.x + y;
  });
  EXPECT_EQ(op.batch_rule()->kind(), BatchRule::Kind::kGeneral);
  const at::Tensor xs = at::randn({3, 4});  // 4 examples of x: [3], batched along dim 1
  const at::Tensor y = at::randn({3});
  at::Tensor out;
  {
    const customop::VmapLevel vmap(4);
    out = vmap.unbatch(op({vmap.batch(xs, 1), y}));
  }
  EXPECT_EQ(seen, std::vector<int64_t>{4});
  EXPECT_EQ(which, (std::vector<bool>{true, false, false}));
  EXPECT_TRUE(at::allclose(out, xs.t() + y));
  wrong = true;
  EXPECT_THAT(error_message([&] {
                const customop::VmapLevel vmap(4);
                op({vmap.batch(xs, 1), y});
              }),
              AllOf(HasSubstr("core_vmap::add: the batching rule (op.vmap at"),
                    HasSubstr("batching_test.cpp"), HasSubstr("returned a tensor of shape [3]"),
                    HasSubstr("a rule returns the batch of 4 examples at dim 0")));
  // Nothing batched at this level: the op runs as usual, the rule is not called.
  seen.clear();
  {
    const customop::VmapLevel vmap(2);
    EXPECT_TRUE(at::allclose(op({xs.select(1, 0), y}), xs.select(1, 0) + y));
  }
  EXPECT_TRUE(seen.empty());
}

struct AddIntoArgs {
  customop::MutableTensor acc;
  at::Tensor x;
};

TEST(BatchRule, AnOpThatWritesItsArgumentsTakesLoopAndWritesEachExamplesSlice) {
  auto& op =
      customop::define<AddIntoArgs, void>("core_vmap::add_into(Tensor(a!) acc, Tensor x) -> ()");
  op.impl(c10::DeviceType::CPU, [](const AddIntoArgs& a) { a.acc.add_(a.x); });
  EXPECT_THAT(error_message<c10::ValueError>([&] { op.vmap(BatchRule::rows({"x"})); }),
              HasSubstr("an op that writes its arguments takes BatchRule::loop"));
  op.vmap(BatchRule::loop());
  const at::Tensor xs = at::randn({3, 4});  // 3 examples of [4]
  at::Tensor acc = at::zeros({3, 4});
  {
    const customop::VmapLevel vmap(3);
    op({vmap.batch(acc, 0), vmap.batch(xs, 0)});
  }
  EXPECT_TRUE(at::equal(acc, xs));
  at::Tensor shared = at::zeros({4});
  EXPECT_THAT(error_message([&] {
                const customop::VmapLevel vmap(3);
                op({shared, vmap.batch(xs, 0)});
              }),
              AllOf(HasSubstr("core_vmap::add_into: vmap: argument 'acc' is written in place "
                              "but not batched, while argument 'x' is"),
                    HasSubstr("nothing was written")));
  EXPECT_TRUE(at::equal(shared, at::zeros({4})));
}

// A batch of size 0 under BatchRule::loop (torch.func.jacrev of an output with no elements vmaps
// the VJP over 0 elements): the op runs once on the Meta device for one example's shapes and
// each return comes back as the empty batch of them, on the batched argument's device.
TEST(BatchRule, LoopOverZeroExamplesGivesEmptyBatchesOfTheExamplesShapes) {
  auto& op = customop::define<XArgs>("core_vmap::outer_rows(Tensor x, Tensor y) -> Tensor");
  op.shape([](const XArgs& a) {
    auto spec = customop::TensorSpec::like(a.x);
    spec.sizes.push_back(a.y.size(0));
    return spec;
  });
  int calls = 0;
  op.impl(c10::DeviceType::CPU, [&](const XArgs& a, const at::Tensor& out) {
    ++calls;
    out.copy_(a.x.unsqueeze(-1) * a.y);
  });
  op.vmap(BatchRule::loop());
  const at::Tensor xs = at::randn({0, 3}, at::kDouble);  // 0 examples of [3]
  const at::Tensor y = at::randn({5}, at::kDouble);
  at::Tensor out;
  {
    const customop::VmapLevel vmap(0);
    out = vmap.unbatch(op({vmap.batch(xs, 0), y}));
  }
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(out.scalar_type(), at::kDouble);
  EXPECT_TRUE(out.device().is_cpu());
  EXPECT_EQ(calls, 0);  // the CPU kernel never ran: only the shape function, on Meta
}

TEST(BatchRule, LoopOverZeroExamplesIsRefusedWithoutAShapeOrANonTensorReturn) {
  auto& no_shape = customop::define<XArgs>("core_vmap::no_shape(Tensor x, Tensor y) -> Tensor");
  no_shape.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x + a.y; });
  no_shape.vmap(BatchRule::loop());
  const at::Tensor xs = at::randn({0, 3}), y = at::randn({3});
  EXPECT_THAT(error_message([&] {
                const customop::VmapLevel vmap(0);
                no_shape({vmap.batch(xs, 0), y});
              }),
              AllOf(HasSubstr("core_vmap::no_shape: vmap over a batch of size 0"),
                    HasSubstr("define a shape function or a fake kernel")));

  auto& count = customop::define<CountArgs, std::tuple<at::Tensor, int64_t>>(
      "core_vmap::count_nonneg(Tensor input) -> (Tensor, int)");
  count.impl(c10::DeviceType::CPU, [](const CountArgs& a) {
    return std::tuple<at::Tensor, int64_t>{a.input.clone(), (a.input >= 0).sum().item<int64_t>()};
  });
  count.vmap(BatchRule::loop());
  EXPECT_THAT(error_message([&] {
                const customop::VmapLevel vmap(0);
                count({vmap.batch(xs, 0)});
              }),
              AllOf(HasSubstr("core_vmap::count_nonneg: vmap over a batch of size 0: return 1 is "
                              "a int"),
                    HasSubstr("no value for zero examples")));
}

}  // namespace
