// SCENARIOS A (S1-S8): defining ops and matching the args struct to the schema. Every error
// here fires at definition time, and a refused definition leaves nothing registered.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>
#include <customop/static_schema.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};

bool in_dispatcher(const char* name) {
  return c10::Dispatcher::singleton().findSchema({name, ""}).has_value();
}

// A refused definition registers nothing: neither in the dispatcher nor in customop.
void expect_not_registered(const char* name) {
  EXPECT_FALSE(in_dispatcher(name)) << name;
  EXPECT_EQ(customop::find_op(name), nullptr) << name;
}

// ---- S1 ----------------------------------------------------------------------------------

// SCENARIOS S1.
TEST(Schema, UnparsableSchemaNamesTheOp) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("core_schema::s1_broken(Tensor x -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s1_broken: the schema does not parse"),
                         HasSubstr("(Tensor x -> Tensor")));
  expect_not_registered("core_schema::s1_broken");
}

// SCENARIOS S1.
TEST(Schema, LoneParenthesisIsUnparsableForAnUnnamedOp) {
  const auto msg = error_message<c10::ValueError>([] { customop::define<XArgs>("("); });
  EXPECT_THAT(msg, HasSubstr("<unnamed op>: the schema does not parse: \"(\""));
}

// SCENARIOS S1.
TEST(Schema, UnqualifiedNameRejected) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("s1_unqualified(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg, HasSubstr("s1_unqualified: expected a qualified name \"namespace::name\""));
  expect_not_registered("s1_unqualified");
}

// ---- S2 ----------------------------------------------------------------------------------

// SCENARIOS S2.
TEST(Schema, OverloadNameRejected) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("core_schema::s2_foo.bar(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s2_foo.bar: overloads are not supported"),
                         HasSubstr("'bar'")));
  EXPECT_FALSE(c10::Dispatcher::singleton().findSchema({"core_schema::s2_foo", "bar"}));
  expect_not_registered("core_schema::s2_foo");
}

// ---- S3 ----------------------------------------------------------------------------------

// SCENARIOS S3, extended by mutable ops: a mutation the args struct does not declare (a plain
// at::Tensor field for a Tensor(a!) argument) is rejected; a declared one is accepted
// (mutation_test.cpp).
TEST(Schema, MutatingSchemaRejected) {
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<XArgs>("core_schema::s3_mutates(Tensor(a!) x) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s3_mutates: the schema mutates argument 'x' "
                                   "(Tensor(a!))"),
                         HasSubstr("must have C++ type customop::MutableTensor"),
                         HasSubstr("the args struct has at::Tensor")));
  expect_not_registered("core_schema::s3_mutates");
}

// SCENARIOS S3.
TEST(Schema, MutatingTensorListRejected) {
  struct Args {
    std::vector<at::Tensor> xs;
  };
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<Args>("core_schema::s3_mutates_list(Tensor(a!)[] xs) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("mutates argument 'xs'"),
                         HasSubstr("only a Tensor argument can be written in place")));
  expect_not_registered("core_schema::s3_mutates_list");
}

// SCENARIOS S3.
TEST(Schema, ViewReturnRejected) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("core_schema::s3_view(Tensor(a) x) -> Tensor(a)"); });
  EXPECT_THAT(msg, HasSubstr("core_schema::s3_view: the schema returns an alias or view"));
  expect_not_registered("core_schema::s3_view");
}

// SCENARIOS S3.
TEST(Schema, SchemaReturningNothingRejected) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("core_schema::s3_nothing(Tensor x) -> ()"); });
  EXPECT_THAT(msg, HasSubstr("core_schema::s3_nothing: the schema returns nothing"));
  expect_not_registered("core_schema::s3_nothing");
}

// ---- S4 ----------------------------------------------------------------------------------

// SCENARIOS S4.
TEST(Schema, ArgumentNamedSelfRejected) {
  struct Args {
    at::Tensor self;
  };
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<Args>("core_schema::s4_self(Tensor self) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s4_self: an argument is named 'self'"),
                         HasSubstr("rename")));
  expect_not_registered("core_schema::s4_self");
}

// ---- S5 ----------------------------------------------------------------------------------

// SCENARIOS S5.
TEST(Schema, ReservedNamespacesRejected) {
  for (std::string ns : {"aten", "prim", "prims", "at", "torch", "pytorch"}) {
    const std::string name = ns + "::core_schema_s5_probe";
    const auto msg = error_message<c10::ValueError>(
        [&] { customop::define<XArgs>(name + "(Tensor x) -> Tensor"); });
    EXPECT_THAT(msg, HasSubstr(name + ": the namespace '" + ns + "' is reserved")) << ns;
    expect_not_registered(name.c_str());
  }
}

// SCENARIOS S5.
TEST(Schema, DotInNamespaceRejected) {
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<XArgs>("core_schema.sub::s5_dot(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg, HasSubstr("core_schema.sub::s5_dot: the namespace 'core_schema.sub' "
                             "contains a '.'"));
}

// ---- S6 ----------------------------------------------------------------------------------

// SCENARIOS S6.
TEST(Schema, DefinedTwiceRefusedAndFirstKeepsWorking) {
  // clang-format off
  auto& first = customop::define<XArgs>("core_schema::s6_twice(Tensor x) -> Tensor"); const int first_line = __LINE__;
  // clang-format on
  first.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x + 1; });
  const auto msg =
      error_message([] { customop::define<XArgs>("core_schema::s6_twice(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr("core_schema::s6_twice: defined multiple times"),
                    HasSubstr("the first definition is at " + CUSTOMOP_TEST_LOCATION(first_line))));
  EXPECT_EQ(customop::find_op("core_schema::s6_twice"), &first);
  auto x = at::zeros({2}, at::kDouble);
  EXPECT_TRUE(at::equal(first(XArgs{x}), x + 1));
}

TORCH_LIBRARY_FRAGMENT(core_schema, m) { m.def("s6_from_library(Tensor x) -> Tensor"); }

// SCENARIOS S6.
TEST(Schema, AlreadyInTheDispatcherRefused) {
  const auto msg = error_message(
      [] { customop::define<XArgs>("core_schema::s6_from_library(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s6_from_library: defined multiple times"),
                         HasSubstr("already exists in the dispatcher")));
  EXPECT_EQ(customop::find_op("core_schema::s6_from_library"), nullptr);
}

// ---- S7 ----------------------------------------------------------------------------------

// SCENARIOS S7.
TEST(Schema, DoubleFieldForTensorRejected) {
  struct Args {
    double x;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_schema::s7_double(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg,
              HasSubstr("core_schema::s7_double: args struct field 0 'x' (schema argument "
                        "'x' of type Tensor) must have C++ type at::Tensor, but the args struct "
                        "has double"));
  expect_not_registered("core_schema::s7_double");
}

// SCENARIOS S7.
TEST(Schema, TensorFieldForOptionalTensorRejected) {
  struct Args {
    at::Tensor x;
    at::Tensor bias;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_schema::s7_optional(Tensor x, Tensor? bias) -> Tensor"); });
  EXPECT_THAT(msg,
              HasSubstr("args struct field 1 'bias' (schema argument 'bias' of type Tensor?) must "
                        "have C++ type std::optional<at::Tensor>, but the args struct has "
                        "at::Tensor"));
  expect_not_registered("core_schema::s7_optional");
}

// SCENARIOS S7.
TEST(Schema, MissingFieldNamesTheArgument) {
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<XArgs>("core_schema::s7_missing(Tensor x, float alpha) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::s7_missing: the args struct has 1 fields but "
                                   "the schema has 2 arguments"),
                         HasSubstr("field 1 (schema argument 'alpha' of type float, C++ type "
                                   "double) is missing")));
  expect_not_registered("core_schema::s7_missing");
}

// SCENARIOS S7.
TEST(Schema, ExtraFieldNamesTheField) {
  struct Args {
    at::Tensor x;
    int64_t extra;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_schema::s7_extra(Tensor x) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("the args struct has 2 fields but the schema has 1 arguments"),
                         HasSubstr("field 1 (C++ type int64_t) has no schema argument")));
  expect_not_registered("core_schema::s7_extra");
}

// SCENARIOS S7.
TEST(Schema, FieldsInTheWrongOrderRejected) {
  struct Args {
    double alpha;
    at::Tensor x;
  };
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<Args>("core_schema::s7_order(Tensor x, float alpha) -> Tensor"); });
  EXPECT_THAT(msg, HasSubstr("args struct field 0 'alpha' (schema argument 'x' of type Tensor)"));
}

// Same-typed fields in the wrong order pass the type check; the names catch them (else a
// keyword call from Python would fill the other field).
TEST(Schema, SwappedSameTypedFieldsRejectedByName) {
  struct Args {
    at::Tensor x;
    double scale;
    double negative_slope;
  };
  const auto msg = error_message<c10::ValueError>([] {
    customop::define<Args>(
        "core_schema::swapped(Tensor x, float negative_slope, float scale) -> Tensor");
  });
  EXPECT_THAT(msg, HasSubstr("core_schema::swapped: args struct field 1 is named 'scale' but "
                             "schema argument 1 is 'negative_slope'; each field must have its "
                             "argument's name, in schema order"));
  expect_not_registered("core_schema::swapped");
}

TEST(Schema, StructDefaultDisagreeingWithTheSchemaDefaultRejected) {
  struct Args {
    at::Tensor x;
    double negative_slope = 0.3;
  };
  const auto msg = error_message<c10::ValueError>([] {
    customop::define<Args>("core_schema::defaults(Tensor x, float negative_slope=0.2) -> Tensor");
  });
  EXPECT_THAT(msg, HasSubstr("core_schema::defaults: argument 'negative_slope' has the default "
                             "0.2 in the schema but the args struct's member initializer gives "
                             "0.3"));
  expect_not_registered("core_schema::defaults");
}

TEST(Schema, StructDefaultWithoutASchemaDefaultRejected) {
  struct Args {
    at::Tensor x;
    std::string mode = "fast";
  };
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<Args>("core_schema::no_default(Tensor x, str mode) -> Tensor"); });
  EXPECT_THAT(msg, HasSubstr("argument 'mode' has no default in the schema, but the args "
                             "struct's member initializer gives it \"fast\""));
}

TEST(Schema, TypedGradsFieldsMustBeNamedAfterTheirArguments) {
  struct Args {
    at::Tensor x;
    double alpha;
    at::Tensor bias;
  };
  struct Saved {
    double alpha;
  };
  struct SwappedGrads {
    at::Tensor bias;
    at::Tensor x;
  };
  auto& op = customop::define<Args>(
      "core_schema::typed_names(Tensor x, float alpha, Tensor bias) -> Tensor");
  const auto msg = error_message<c10::ValueError>([&] {
    op.impl_backward([](const Saved&, const at::Tensor& g) { return SwappedGrads{g, g}; });
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("core_schema::typed_names: the typed grads struct"),
                         HasSubstr("has field 0 named 'bias' but tensor-like argument 0 is 'x'")));
  EXPECT_FALSE(op.has_autograd());
}

// ---- the schema inferred from the args struct --------------------------------------------

TEST(Schema, InferredFromEveryFieldTypeWithDefaultsAsWritten) {
  struct Args {
    at::Tensor x;
    std::vector<at::Tensor> xs;
    int64_t required_int;  // no initializer: a required argument
    std::optional<at::Tensor> bias;
    double negative_slope = 0.2;
    double scale = 2.0;
    int64_t dim = -1;
    bool keepdim = true;
    std::string mode = "tanh";
    std::vector<int64_t> dims = {0, 1};
    std::vector<double> weights = {0.5, 1.5};
    std::vector<bool> flags = {true, false};
    std::optional<double> clip;
    std::optional<int64_t> groups = 4;
    std::optional<std::string> tag;
    std::optional<bool> flag;
  };
  auto& op = customop::define<Args>("core_schema::inferred");
  EXPECT_EQ(op.schema_text(),
            "core_schema::inferred(Tensor x, Tensor[] xs, int required_int, Tensor? bias=None, "
            "float negative_slope=0.2, float scale=2.0, int dim=-1, bool keepdim=True, "
            "str mode=\"tanh\", int[] dims=[0, 1], float[] weights=[0.5, 1.5], "
            "bool[] flags=[True, False], float? clip=None, int? groups=4, str? tag=None, "
            "bool? flag=None) -> Tensor");
  // The dispatcher holds the same schema: names, types and defaults.
  const auto& args = op.schema().arguments();
  ASSERT_EQ(args.size(), 16u);
  EXPECT_EQ(args[4].name(), "negative_slope");
  EXPECT_EQ(args[4].default_value()->toDouble(), 0.2);
  EXPECT_EQ(args[8].default_value()->toStringRef(), "tanh");
  EXPECT_FALSE(args[2].default_value().has_value());
  EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({"core_schema::inferred", ""}).has_value());
}

TEST(Schema, InferredRefusesARequiredFieldAfterADefaultedOne) {
  struct Args {
    at::Tensor x;
    double alpha = 0.5;
    at::Tensor y;
  };
  const auto msg =
      error_message<c10::ValueError>([] { customop::define<Args>("core_schema::inferred_order"); });
  EXPECT_THAT(msg, HasSubstr("core_schema::inferred_order: cannot infer the schema: field 'y' "
                             "has no default but comes after 'alpha'"));
  expect_not_registered("core_schema::inferred_order");
}

TEST(Schema, InferredReturnsFollowRet) {
  struct Args {
    at::Tensor x;
  };
  auto& op = customop::define<Args, std::tuple<at::Tensor, std::vector<at::Tensor>>>(
      "core_schema::inferred_returns");
  EXPECT_EQ(op.schema_text(), "core_schema::inferred_returns(Tensor x) -> (Tensor, Tensor[])");
}

TEST(Schema, InferredOpRunsWithTheStructDefaultsFromPython) {
  struct Args {
    at::Tensor x;
    double negative_slope = 0.2;
  };
  auto& op = customop::define<Args>("core_schema::inferred_leaky");
  op.impl(c10::DeviceType::CPU,
          [](const Args& a) { return at::where(a.x > 0, a.x, a.x * a.negative_slope); });
  const auto x = at::tensor({-1.0, 2.0}, at::kDouble);
  // A boxed call that leaves the argument out gets the schema's default, as Python does.
  auto h = c10::Dispatcher::singleton().findSchemaOrThrow("core_schema::inferred_leaky", "");
  torch::jit::Stack stack{x};
  const auto& sargs = h.schema().arguments();
  stack.push_back(*sargs[1].default_value());
  h.callBoxed(stack);
  EXPECT_TRUE(at::allclose(stack.back().toTensor(), op(Args{x})));
  EXPECT_DOUBLE_EQ(stack.back().toTensor()[0].item<double>(), -0.2);
}

TEST(Schema, AgreeingDefaultsAndPlainFieldsAccepted) {
  struct Args {
    at::Tensor x;
    double negative_slope = 0.2;
    std::vector<int64_t> dims = {0, 1};
    bool keepdim;  // no initializer: the schema's default is the only one
  };
  auto& op = customop::define<Args>(
      "core_schema::agree(Tensor x, float negative_slope=0.2, int[] dims=[0, 1], "
      "bool keepdim=True) -> Tensor");
  EXPECT_EQ(op.args()[1].name, "negative_slope");
}

// SCENARIOS S7.
TEST(Schema, UnsupportedSchemaArgumentTypeRejected) {
  struct Args {
    at::Tensor x;
    int64_t n;
  };
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<Args>("core_schema::s7_device(Tensor x, Device n) -> Tensor"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("argument 'n' has the schema type Device"),
                         HasSubstr("customop does not support")));
  expect_not_registered("core_schema::s7_device");
}

// SCENARIOS S7.
TEST(Schema, ReturnCountMismatchRejected) {
  const auto msg = error_message<c10::TypeError>(
      [] { customop::define<XArgs>("core_schema::s7_nret(Tensor x) -> (Tensor, Tensor)"); });
  EXPECT_THAT(msg, HasSubstr("the schema has 2 returns but the C++ return type (Ret) has 1"));
  expect_not_registered("core_schema::s7_nret");
}

// SCENARIOS S7.
TEST(Schema, ReturnTypeMismatchRejected) {
  const auto msg = error_message<c10::TypeError>([] {
    customop::define<XArgs, std::tuple<at::Tensor, double>>(
        "core_schema::s7_rettype(Tensor x) -> (Tensor, int)");
  });
  EXPECT_THAT(msg, HasSubstr("return 1 is int in the schema, so Ret element 1 must be int64_t, "
                             "but it is double"));
  expect_not_registered("core_schema::s7_rettype");
}

// A5 at the schema level: a return type that cannot take a backward formula is refused when
// the op is defined (Ret itself cannot even name such a type: see compile_fail/).
TEST(Schema, UnsupportedReturnTypeRejectedAtDefinition) {
  const std::pair<const char*, const char*> cases[] = {
      {"str", "str"}, {"Scalar", "scalar"}, {"Tensor?", "opt"}, {"int[]", "ints"}};
  for (const auto& [ret, suffix] : cases) {
    const std::string name = std::string("core_schema::a5_returns_") + suffix;
    const auto msg = error_message<c10::TypeError>(
        [&] { customop::define<XArgs>(name + "(Tensor x) -> " + ret); });
    EXPECT_THAT(msg, AllOf(HasSubstr(name + ": return 0 has the schema type"),
                           HasSubstr("customop ops return Tensor, Tensor[], int, float or bool")))
        << ret;
    expect_not_registered(name.c_str());
  }
}

// ---- S8 ----------------------------------------------------------------------------------

// One field per supported schema type, in schema order; the kw-only ones have defaults.
struct EveryArgs {
  at::Tensor t;
  std::optional<at::Tensor> opt_t;
  std::optional<at::Tensor> none_t;
  std::vector<at::Tensor> ts;
  int64_t i;
  std::optional<int64_t> oi;
  std::vector<int64_t> il;
  double f;
  std::optional<double> of;
  std::vector<double> fl;
  bool b;
  std::optional<bool> ob;
  std::vector<bool> bl;
  std::string s;
  std::optional<std::string> os;
  c10::Scalar sc;
  std::optional<c10::Scalar> osc;
  c10::ScalarType st;
  std::optional<c10::ScalarType> ost;
  int64_t kw;
  std::string mode;
  double scale;
  std::vector<int64_t> dims;
  bool flag;
  std::optional<at::Tensor> w;
};

constexpr const char* kEverySchema =
    "core_schema::s8_every(Tensor t, Tensor? opt_t, Tensor? none_t, Tensor[] ts, int i, int? oi, "
    "int[] il, float f, float? of, float[] fl, bool b, bool? ob, bool[] bl, str s, str? os, "
    "Scalar sc, Scalar? osc, ScalarType st, ScalarType? ost, *, int kw=7, str mode=\"mean\", "
    "float scale=0.5, int[] dims=[1, 2], bool flag=True, Tensor? w=None) -> (Tensor, int, float)";

using EveryRet = std::tuple<at::Tensor, int64_t, double>;

// What the s8_every kernel received on its last call.
std::optional<EveryArgs> g_every_seen;

customop::Op<EveryArgs, EveryRet>& every_op() {
  static auto& op = []() -> customop::Op<EveryArgs, EveryRet>& {
    auto& o = customop::define<EveryArgs, EveryRet>(kEverySchema);
    o.impl(c10::DeviceType::CPU, [](const EveryArgs& a) {
      g_every_seen = a;
      return EveryRet{a.t * 2, a.i + 1, a.f * 2};
    });
    return o;
  }();
  g_every_seen.reset();
  return op;
}

EveryArgs sample_every_args() {
  return EveryArgs{
      .t = at::arange(3, at::kDouble),
      .opt_t = at::ones({2}, at::kFloat),
      .none_t = std::nullopt,
      .ts = {at::zeros({1}), at::ones({2, 2}, at::kLong), at::full({3}, 7.0, at::kDouble)},
      .i = std::numeric_limits<int64_t>::min(),
      .oi = int64_t{-3},
      .il = {std::numeric_limits<int64_t>::max(), 0, -1},
      .f = 0.1 + 0.2,
      .of = std::nullopt,
      .fl = {1e-300, -0.0, std::numeric_limits<double>::infinity()},
      .b = true,
      .ob = false,
      .bl = {true, false, true},
      .s = std::string("h\xc3\xa9llo w\0rld", 13),
      .os = std::string(),
      .sc = c10::Scalar(2.5),
      .osc = c10::Scalar(int64_t{4}),
      .st = c10::ScalarType::Half,
      .ost = std::nullopt,
      .kw = 11,
      .mode = "sum",
      .scale = -1.25,
      .dims = {},
      .flag = false,
      .w = at::eye(2, at::kDouble),
  };
}

void expect_same_args(const EveryArgs& got, const EveryArgs& want) {
  EXPECT_TRUE(got.t.is_same(want.t));
  ASSERT_TRUE(got.opt_t.has_value());
  EXPECT_TRUE(got.opt_t->is_same(*want.opt_t));
  EXPECT_FALSE(got.none_t.has_value());
  ASSERT_EQ(got.ts.size(), want.ts.size());
  for (size_t k = 0; k < got.ts.size(); ++k) EXPECT_TRUE(got.ts[k].is_same(want.ts[k])) << k;
  EXPECT_EQ(got.i, want.i);
  EXPECT_EQ(got.oi, want.oi);
  EXPECT_EQ(got.il, want.il);
  EXPECT_EQ(got.f, want.f);  // bit-exact: 0.1 + 0.2 != 0.3
  EXPECT_EQ(got.of, want.of);
  ASSERT_EQ(got.fl.size(), want.fl.size());
  for (size_t k = 0; k < got.fl.size(); ++k) {
    EXPECT_EQ(got.fl[k], want.fl[k]) << k;
    EXPECT_EQ(std::signbit(got.fl[k]), std::signbit(want.fl[k])) << k;
  }
  EXPECT_EQ(got.b, want.b);
  EXPECT_EQ(got.ob, want.ob);
  EXPECT_EQ(got.bl, want.bl);
  EXPECT_EQ(got.s, want.s);
  EXPECT_EQ(got.os, want.os);
  EXPECT_TRUE(got.sc.isFloatingPoint());
  EXPECT_EQ(got.sc.toDouble(), want.sc.toDouble());
  ASSERT_TRUE(got.osc.has_value());
  EXPECT_TRUE(got.osc->isIntegral(/*includeBool=*/false));
  EXPECT_EQ(got.osc->toLong(), want.osc->toLong());
  EXPECT_EQ(got.st, want.st);
  EXPECT_EQ(got.ost, want.ost);
  EXPECT_EQ(got.kw, want.kw);
  EXPECT_EQ(got.mode, want.mode);
  EXPECT_EQ(got.scale, want.scale);
  EXPECT_EQ(got.dims, want.dims);
  EXPECT_EQ(got.flag, want.flag);
  EXPECT_EQ(got.w.has_value(), want.w.has_value());
  if (got.w.has_value() && want.w.has_value()) {
    EXPECT_TRUE(got.w->is_same(*want.w));
  }
}

// SCENARIOS S8.
TEST(Schema, EverySupportedTypeReachesTheKernelUnchanged) {
  auto& op = every_op();
  auto& seen = g_every_seen;
  const auto args = sample_every_args();
  auto [out, i, f] = op(args);
  ASSERT_TRUE(seen.has_value());
  expect_same_args(*seen, args);
  EXPECT_TRUE(at::equal(out, args.t * 2));
  EXPECT_EQ(i, std::numeric_limits<int64_t>::min() + 1);
  EXPECT_EQ(f, (0.1 + 0.2) * 2);
}

// SCENARIOS S8.
TEST(Schema, RegisteredSchemaKeepsKwOnlyArgsAndDefaults) {
  auto& op = every_op();
  const auto parsed = torch::jit::parseSchema(kEverySchema);
  EXPECT_EQ(op.handle().schema(), parsed) << op.handle().schema() << "\nvs\n" << parsed;
  const auto& args = op.handle().schema().arguments();
  ASSERT_EQ(args.size(), 25u);
  EXPECT_FALSE(args[18].kwarg_only());
  for (size_t k = 19; k < args.size(); ++k) {
    EXPECT_TRUE(args[k].kwarg_only()) << args[k].name();
    EXPECT_TRUE(args[k].default_value().has_value()) << args[k].name();
  }
  EXPECT_EQ(op.args().size(), 25u);
  EXPECT_EQ(op.args()[3].name, "ts");
  EXPECT_EQ(op.args()[3].kind, customop::ArgKind::kTensorList);
  EXPECT_EQ(op.args()[3].type, "Tensor[]");
}

// SCENARIOS S8.
TEST(Schema, DefaultsReachTheKernelUnchanged) {
  auto& op = every_op();
  auto& seen = g_every_seen;
  auto args = sample_every_args();
  // A caller that omits the kw-only arguments: the schema's defaults fill them in, as
  // TorchScript and torch.ops do.
  torch::jit::Stack stack = customop::Op<EveryArgs, EveryRet>::to_stack(args);
  const auto& schema = op.handle().schema();
  stack.resize(19);
  for (size_t k = 19; k < schema.arguments().size(); ++k) {
    stack.push_back(*schema.arguments()[k].default_value());
  }
  op.handle().callBoxed(stack);
  ASSERT_EQ(stack.size(), 3u);
  ASSERT_TRUE(seen.has_value());
  args.kw = 7;
  args.mode = "mean";
  args.scale = 0.5;
  args.dims = {1, 2};
  args.flag = true;
  args.w = std::nullopt;
  expect_same_args(*seen, args);
  EXPECT_EQ(stack[1].toInt(), args.i + 1);
}

// SCENARIOS S8.
TEST(Schema, OneTwoAndThreeReturnsAccepted) {
  struct Args {
    at::Tensor x;
    int64_t n;
  };
  auto& one = customop::define<Args, std::vector<at::Tensor>>(
      "core_schema::s8_one(Tensor x, int n) -> Tensor[]");
  one.impl(c10::DeviceType::CPU, [](const Args& a) { return a.x.clone().chunk(a.n); });
  auto& two = customop::define<Args, std::tuple<double, bool>>(
      "core_schema::s8_two(Tensor x, int n) -> (float, bool)");
  two.impl(c10::DeviceType::CPU, [](const Args& a) {
    return std::tuple<double, bool>{a.x.sum().item<double>(), a.n > 0};
  });
  auto& three = customop::define<Args, std::tuple<at::Tensor, std::vector<at::Tensor>, int64_t>>(
      "core_schema::s8_three(Tensor x, int n) -> (Tensor a, Tensor[] b, int c)");
  three.impl(c10::DeviceType::CPU, [](const Args& a) {
    return std::tuple<at::Tensor, std::vector<at::Tensor>, int64_t>{
        a.x + 1, {a.x.clone(), a.x * 2}, a.n};
  });
  const auto x = at::arange(6, at::kDouble);
  const auto parts = one(Args{x, 3});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(at::equal(parts[2], x.slice(0, 4, 6)));
  const auto [sum, positive] = two(Args{x, -1});
  EXPECT_EQ(sum, 15.0);
  EXPECT_FALSE(positive);
  const auto [a, b, c] = three(Args{x, 42});
  EXPECT_TRUE(at::equal(a, x + 1));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(at::equal(b[1], x * 2));
  EXPECT_EQ(c, 42);
  EXPECT_EQ(three.returns(), (std::vector<customop::ArgKind>{customop::ArgKind::kTensor,
                                                             customop::ArgKind::kTensorList,
                                                             customop::ArgKind::kInt}));
}

// ---- the schema as a template argument (customop/static_schema.h) ------------------------

TEST(Schema, StaticSchemaStringDefaultsMayHoldCommasAndParentheses) {
  struct Args {
    at::Tensor x;
    std::string sep;
    std::string close;
    int64_t n;
  };
  auto& op = customop::define<Args,
                              "core_schema::static_strings(Tensor x, str sep=\",\", "
                              "str close=\")\", int n=2) -> Tensor">();
  static_assert(std::is_same_v<std::decay_t<decltype(op)>::ReturnType, at::Tensor>);
  op.impl(c10::DeviceType::CPU, [](const Args& a) {
    return a.x * static_cast<double>(a.sep.size() + a.close.size() + a.n);
  });
  const auto& schema_args = op.handle().schema().arguments();
  ASSERT_EQ(schema_args.size(), 4u);
  EXPECT_EQ(schema_args[1].default_value()->toStringRef(), ",");
  EXPECT_EQ(schema_args[2].default_value()->toStringRef(), ")");
  const auto x = at::ones({2});
  EXPECT_TRUE(at::equal(op(Args{x, ",", ")", 2}), x * 4));
}

// Tensor(a!) with a customop::MutableTensor field: the static form defines a writing op whose
// Ret is void ("-> ()"), and a call writes the argument and bumps its version.
TEST(Schema, StaticSchemaDefinesAnOpThatWritesAnArgument) {
  struct Args {
    customop::MutableTensor acc;
    at::Tensor x;
    double alpha;
  };
  auto& op = customop::define<Args,
                              "core_schema::static_add_into(Tensor(a!) acc, Tensor x, "
                              "float alpha=1.0) -> ()">();
  static_assert(std::is_same_v<std::decay_t<decltype(op)>::ReturnType, void>);
  op.impl(c10::DeviceType::CPU, [](const Args& a) { a.acc.add_(a.x, a.alpha); });
  const auto& schema_args = op.handle().schema().arguments();
  ASSERT_EQ(schema_args.size(), 3u);
  ASSERT_NE(schema_args[0].alias_info(), nullptr);
  EXPECT_TRUE(schema_args[0].alias_info()->isWrite());
  EXPECT_EQ(schema_args[1].alias_info(), nullptr);
  EXPECT_TRUE(op.handle().schema().returns().empty());
  const auto acc = at::zeros({3});
  const auto version = acc._version();
  op(Args{acc, at::ones({3}), 2.0});
  EXPECT_TRUE(at::equal(acc, at::full({3}, 2.0)));
  EXPECT_GT(acc._version(), version);
}

// What the compile-time reader leaves alone still gets the runtime's error: a reads-only
// annotation (Tensor(a), no '!') and an alias set shared by two written arguments.
TEST(Schema, StaticSchemaLeavesReadOnlyAliasesAndSharedSetsToTheRuntimeCheck) {
  struct Args {
    at::Tensor x;
  };
  const auto read_only = error_message<c10::ValueError>(
      [] { customop::define<Args, "core_schema::static_read_alias(Tensor(a) x) -> Tensor">(); });
  EXPECT_THAT(read_only, HasSubstr("argument 'x' is annotated as an alias (Tensor(a))"));
  expect_not_registered("core_schema::static_read_alias");
  struct TwoArgs {
    customop::MutableTensor x;
    customop::MutableTensor y;
  };
  const auto shared = error_message<c10::ValueError>([] {
    customop::define<TwoArgs, "core_schema::static_shared_set(Tensor(a!) x, Tensor(a!) y) -> ()">();
  });
  EXPECT_THAT(shared, HasSubstr("argument 'y' is written in the alias set 'a'"));
  expect_not_registered("core_schema::static_shared_set");
}

TEST(Schema, StaticSchemaLeavesUnsupportedTypesToTheRuntimeCheck) {
  struct Args {
    at::Tensor x;
    int64_t n;
  };
  // Device is not in the table of customop/arg_types.h: both define() forms refuse it.
  const auto msg = error_message<c10::ValueError>(
      [] { customop::define<Args, "core_schema::static_device(Tensor x, Device n) -> Tensor">(); });
  EXPECT_THAT(msg, HasSubstr("argument 'n' has the schema type Device"));
  expect_not_registered("core_schema::static_device");
}

}  // namespace
