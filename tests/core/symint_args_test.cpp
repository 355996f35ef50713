// SymInt, SymInt? and SymInt[] arguments (customop/arg_types.h): c10::SymInt,
// std::optional<c10::SymInt> and std::vector<c10::SymInt> fields take them, in both define() forms
// and in an inferred schema; their values reach the kernel unchanged (from C++ and from a boxed
// call with plain ints); the shape function reads them as sizes; a field of another type is refused
// naming the field and both types.

#include "support/error_message.h"

#include <customop/customop.h>
#include <customop/static_schema.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A row-broadcast op: x [D] -> [rows, D] scaled per row by 1..rows; `pad` extra columns of 0
// after each row ([rows, D + pad[0]]; pad has one element).
struct TileArgs {
  at::Tensor x;
  c10::SymInt rows;
  std::vector<c10::SymInt> pad;
};

std::optional<TileArgs> g_seen;  // the args of the last CPU kernel call

customop::TensorSpec tile_shape(const TileArgs& a) {
  TORCH_CHECK(a.x.dim() == 1, "core_symint::tile: x must be 1-d, got ", a.x.sym_sizes());
  TORCH_CHECK(a.pad.size() == 1, "core_symint::tile: pad must have one element, got ",
              a.pad.size());
  TORCH_SYM_CHECK(a.rows.sym_ge(0), "core_symint::tile: rows must be >= 0, got ", a.rows);
  return customop::TensorSpec::like(a.x).sized({a.rows, a.x.sym_size(0) + a.pad[0]});
}

void tile_cpu(const TileArgs& a, const at::Tensor& out) {
  g_seen = a;
  const int64_t rows = a.rows.expect_int();
  const int64_t d = a.x.size(0);
  out.zero_();
  for (int64_t r = 0; r < rows; ++r) out[r].narrow(0, 0, d).copy_(a.x * (r + 1));
}

customop::Op<TileArgs>& tile_op() {
  static auto& op = []() -> customop::Op<TileArgs>& {
    auto& o = customop::define<TileArgs>(
        "core_symint::tile(Tensor x, SymInt rows, SymInt[] pad) -> Tensor");
    o.shape(&tile_shape);
    o.impl(c10::DeviceType::CPU, &tile_cpu);
    return o;
  }();
  return op;
}

TEST(SymIntArgs, SchemaTypesMapToSymIntFields) {
  auto& op = tile_op();
  ASSERT_EQ(op.args().size(), 3u);
  EXPECT_EQ(op.args()[1].kind, customop::ArgKind::kSymInt);
  EXPECT_EQ(op.args()[1].type, "SymInt");
  EXPECT_EQ(op.args()[2].kind, customop::ArgKind::kSymIntList);
  EXPECT_EQ(op.args()[2].type, "SymInt[]");
  // The dispatcher keeps SymInt (not int): a trace passes symbolic sizes through it.
  const auto& schema = op.handle().schema();
  EXPECT_EQ(schema.arguments()[1].real_type()->kind(), c10::TypeKind::SymIntType);
}

TEST(SymIntArgs, ValuesReachTheKernelAndTheShape) {
  auto& op = tile_op();
  const auto x = at::arange(3, at::kDouble);
  g_seen.reset();
  const at::Tensor y = op(TileArgs{x, 4, {c10::SymInt(2)}});
  ASSERT_TRUE(g_seen.has_value());
  EXPECT_EQ(g_seen->rows, 4);
  ASSERT_EQ(g_seen->pad.size(), 1u);
  EXPECT_EQ(g_seen->pad[0], 2);
  ASSERT_EQ(y.sizes(), at::IntArrayRef({4, 5}));
  EXPECT_TRUE(at::equal(y[3].narrow(0, 0, 3), x * 4));
  EXPECT_TRUE(at::equal(y.narrow(1, 3, 2), at::zeros({4, 2}, at::kDouble)));
}

TEST(SymIntArgs, ABoxedCallWithPlainIntsReachesTheKernel) {
  auto& op = tile_op();
  const auto x = at::ones({2}, at::kDouble);
  // As TorchScript and torch.ops pass them: int and int[] IValues.
  torch::jit::Stack stack{c10::IValue(x), c10::IValue(int64_t{3}),
                          c10::IValue(std::vector<int64_t>{1})};
  g_seen.reset();
  op.handle().callBoxed(stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_EQ(stack[0].toTensor().sizes(), at::IntArrayRef({3, 3}));
  ASSERT_TRUE(g_seen.has_value());
  EXPECT_EQ(g_seen->rows, 3);
  EXPECT_EQ(g_seen->pad.at(0), 1);
}

TEST(SymIntArgs, TheFakeKernelSizesItsOutputFromThem) {
  auto& op = tile_op();
  g_seen.reset();
  const at::Tensor y = op(TileArgs{at::empty({7}, at::device(at::kMeta)), 5, {c10::SymInt(0)}});
  EXPECT_FALSE(g_seen.has_value());  // the shape function alone, no kernel
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), at::IntArrayRef({5, 7}));
  EXPECT_THAT(error_message([&] {
                op(TileArgs{at::empty({7}, at::device(at::kMeta)), -1, {c10::SymInt(0)}});
              }),
              HasSubstr("core_symint::tile: rows must be >= 0, got -1"));
}

TEST(SymIntArgs, StaticSchemaFormAcceptsThem) {
  struct Args {
    at::Tensor x;
    c10::SymInt n;
    std::vector<c10::SymInt> sizes;
  };
  auto& op = customop::define<Args,
                              "core_symint::static_form(Tensor x, SymInt n, SymInt[2] sizes) -> "
                              "Tensor">();
  op.impl(c10::DeviceType::CPU,
          [](const Args& a) { return a.x.new_full({1}, static_cast<double>(a.n.expect_int())); });
  EXPECT_EQ(op.args()[2].kind, customop::ArgKind::kSymIntList);
  const at::Tensor y = op(Args{at::zeros({1}), 6, {c10::SymInt(1), c10::SymInt(2)}});
  EXPECT_EQ(y.item<double>(), 6.0);
}

// NB: GCC 12 stops with an internal compiler error (check_noexcept_r) on Boost.PFR's field count
// of a struct whose std::vector member of a class type (c10::SymInt, std::string) has a braced
// default member initializer; g++-11 and clang++-14 take it. A function call avoids it.
std::vector<c10::SymInt> symints(std::initializer_list<int64_t> values) {
  return {values.begin(), values.end()};
}

TEST(SymIntArgs, InferredSchemaSpellsThemWithDefaults) {
  struct Args {
    at::Tensor x;
    c10::SymInt n;
    c10::SymInt groups = 4;
    std::vector<c10::SymInt> shape = symints({2, 3});
  };
  auto& op = customop::define<Args>("core_symint::inferred");
  EXPECT_EQ(op.schema_text(),
            "core_symint::inferred(Tensor x, SymInt n, SymInt groups=4, SymInt[] shape=[2, 3]) "
            "-> Tensor");
}

// An optional size: None reaches the kernel as nullopt, a value as itself; the shape function
// sizes the output from either.
struct HeadArgs {
  at::Tensor x;
  std::optional<c10::SymInt> n;
};

TEST(SymIntArgs, AnOptionalSymIntIsNoneOrItsValue) {
  static auto& op = []() -> customop::Op<HeadArgs>& {
    auto& o = customop::define<HeadArgs>("core_symint::head");
    o.shape([](const HeadArgs& a) {
      return customop::TensorSpec::like(a.x).sized({a.n.value_or(a.x.sym_size(0))});
    });
    o.impl(c10::DeviceType::CPU, [](const HeadArgs& a, const at::Tensor& out) {
      out.copy_(a.x.narrow(0, 0, out.size(0)));
    });
    return o;
  }();
  EXPECT_EQ(op.schema_text(), "core_symint::head(Tensor x, SymInt? n=None) -> Tensor");
  EXPECT_EQ(op.args()[1].kind, customop::ArgKind::kOptionalSymInt);
  const auto x = at::arange(5, at::kDouble);
  EXPECT_TRUE(at::equal(op(HeadArgs{x, std::nullopt}), x));
  EXPECT_TRUE(at::equal(op(HeadArgs{x, c10::SymInt(2)}), x.narrow(0, 0, 2)));
  torch::jit::Stack stack{c10::IValue(x), c10::IValue(int64_t{3})};
  op.handle().callBoxed(stack);
  EXPECT_EQ(stack.at(0).toTensor().size(0), 3);
  EXPECT_EQ(op(HeadArgs{at::empty({9}, at::device(at::kMeta)), std::nullopt}).size(0), 9);
}

TEST(SymIntArgs, AnInt64FieldForASymIntArgumentIsRefused) {
  struct Args {
    at::Tensor x;
    int64_t n;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_symint::wrong_field(Tensor x, SymInt n) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("'n'"), HasSubstr("SymInt"), HasSubstr("c10::SymInt"),
                         HasSubstr("int64_t")));
  EXPECT_EQ(customop::find_op("core_symint::wrong_field"), nullptr);
}

TEST(SymIntArgs, ASymIntFieldForAnIntArgumentIsRefused) {
  struct Args {
    at::Tensor x;
    c10::SymInt n;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_symint::wrong_int(Tensor x, int n) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("'n'"), HasSubstr("c10::SymInt"), HasSubstr("int64_t")));
  EXPECT_EQ(customop::find_op("core_symint::wrong_int"), nullptr);
}

}  // namespace
