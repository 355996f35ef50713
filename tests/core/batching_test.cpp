// Op::vmap: the batching rule's checks against the schema at declaration (the rule itself runs
// under torch.func.vmap: tests/python/test_transforms.py).

#include "support/error_message.h"

#include <customop/customop.h>

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

}  // namespace
