// Sharding rules declared with the op (op.sharding): what is refused at definition time
// (unknown or mistyped arguments and returns, a second rule), and the JSON the Python package
// reads through the dispatcher op customop_registry::sharding_rules.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace {

using customop::Placement;
using customop::Sharding;
using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct ReduceArgs {
  at::Tensor input;
  std::optional<at::Tensor> mask;
  int64_t dim;
  bool keepdim;
  double scale;
};
using ReduceResult = std::tuple<at::Tensor, at::Tensor>;

/// A fresh op per test (names must be unique in the process).
customop::Op<ReduceArgs, ReduceResult>& fresh_op(const std::string& name) {
  auto& op = customop::define<ReduceArgs, ReduceResult>(
      "core_sharding::" + name +
      "(Tensor input, Tensor? mask, int dim, bool keepdim, float scale) -> (Tensor out, Tensor "
      "count)");
  op.impl(c10::DeviceType::CPU, [](const ReduceArgs& a) {
    return ReduceResult{a.input.sum(a.dim, a.keepdim), at::scalar_tensor(a.input.numel())};
  });
  return op;
}

TEST(Sharding, RuleIsKeptAsDeclared) {
  auto& op = fresh_op("kept");
  EXPECT_EQ(op.sharding_rule(), nullptr);
  op.sharding(Sharding::reduction("dim", "keepdim").partial_sum("count"));
  ASSERT_NE(op.sharding_rule(), nullptr);
  EXPECT_EQ(op.sharding_rule()->kind(), Sharding::Kind::kReduction);
  EXPECT_EQ(op.sharding_rule()->dim_argument(), "dim");
  EXPECT_EQ(op.sharding_rule()->keepdim_argument(), "keepdim");
  EXPECT_EQ(op.sharding_rule()->partial_sum_outputs(), std::vector<std::string>{"count"});
}

TEST(Sharding, UnknownOrMistypedArgumentsAreRefusedNamingThem) {
  EXPECT_THAT(error_message([] { fresh_op("no_arg").sharding(Sharding::reduction("axis")); }),
              AllOf(HasSubstr("core_sharding::no_arg: op.sharding at "),
                    HasSubstr("the dim argument 'axis' is not an argument of the schema "
                              "(arguments: 'input', 'mask', 'dim', 'keepdim', 'scale')")));
  EXPECT_THAT(error_message([] { fresh_op("float_dim").sharding(Sharding::reduction("scale")); }),
              HasSubstr("the dim argument 'scale' must be int or int[], but is float"));
  EXPECT_THAT(
      error_message([] { fresh_op("int_keep").sharding(Sharding::reduction("dim", "dim")); }),
      HasSubstr("the keepdim argument 'dim' must be bool, but is int"));
  EXPECT_THAT(
      error_message([] { fresh_op("no_out").sharding(Sharding::pointwise().partial_sum("n")); }),
      HasSubstr("partial_sum('n') names no return (returns: 'out', 'count')"));
  EXPECT_THAT(error_message([] {
                fresh_op("strat_arg")
                    .sharding(Sharding::strategies(
                        {{.inputs = {{"scale", Placement::shard(0)}},
                          .outputs = {Placement::shard(0), Placement::partial_sum()}}}));
              }),
              HasSubstr("strategy 0 places 'scale', which is a float, not a tensor (tensor "
                        "arguments: 'input', 'mask')"));
  EXPECT_THAT(error_message([] {
                fresh_op("strat_outs")
                    .sharding(Sharding::strategies({{.inputs = {{"input", Placement::shard(0)}},
                                                     .outputs = {Placement::shard(0)}}}));
              }),
              HasSubstr("strategy 0 gives 1 output placement(s), but the op has 2 return(s)"));
  EXPECT_THAT(error_message([] {
                fresh_op("strat_partial").sharding(Sharding::replicate().partial_sum("count"));
              }),
              HasSubstr("partial_sum('count') applies to the pointwise and reduction kinds"));
}

TEST(Sharding, SecondRuleIsRefusedNamingBothLocations) {
  auto& op = fresh_op("twice");
  op.sharding(Sharding::pointwise());
  EXPECT_THAT(error_message([&] { op.sharding(Sharding::replicate()); }),
              AllOf(HasSubstr("core_sharding::twice: a sharding rule (pointwise) is already "
                              "declared at "),
                    HasSubstr("sharding_test.cpp"), HasSubstr(" is refused")));
  EXPECT_EQ(op.sharding_rule()->kind(), Sharding::Kind::kPointwise);
}

TEST(Sharding, JsonThroughTheDispatcherListsRulesAndOpsWithout) {
  fresh_op("json_rule")
      .sharding(
          Sharding::strategies({{.inputs = {{"input", Placement::shard(-1)}},
                                 .outputs = {Placement::shard(0), Placement::partial_sum()}}}));
  fresh_op("json_none");
  const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("customop_registry::sharding_rules", "");
  const std::string text = handle.typed<std::string()>().call();
  EXPECT_EQ(text, customop::sharding_rules_json());
  const auto j = nlohmann::json::parse(text);
  const auto& rule = j.at("core_sharding::json_rule");
  EXPECT_EQ(rule.at("kind"), "strategies");
  EXPECT_EQ(rule.at("wrapped"), false);
  EXPECT_EQ(rule.at("tensor_arguments"), nlohmann::json({"input", "mask"}));
  EXPECT_EQ(rule.at("strategies")[0].at("inputs").at("input"), "S-1");
  EXPECT_EQ(rule.at("strategies")[0].at("outputs"), nlohmann::json({"S0", "P"}));
  EXPECT_TRUE(j.at("core_sharding::json_none").at("kind").is_null());
  fresh_op("json_partial").sharding(Sharding::pointwise().partial_sum("1"));
  const auto k = nlohmann::json::parse(customop::sharding_rules_json());
  EXPECT_EQ(k.at("core_sharding::json_partial").at("partial_sum"), nlohmann::json({1}));
}

}  // namespace
