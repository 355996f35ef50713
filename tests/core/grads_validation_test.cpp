// SCENARIOS D (G1-G9): validating the grads a backward formula returns, through each of the
// three ways to return them (customop::Grads by name, a c10::IValue dict, a typed aggregate).
// Every error fires at BACKWARD time (the forward succeeds) and starts with the op and the
// file:line of its backward registration.
//
// NB: the `mutation` test runs the GradsKeys suite against a mutant of the core without the
// key-set check (made by tests/core/CMakeLists.txt) and expects it to fail.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <source_location>
#include <vector>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};
struct XDimArgs {
  at::Tensor x;
  int64_t dim;
};
struct XBiasArgs {
  at::Tensor x;
  std::optional<at::Tensor> bias;
};
struct XsArgs {
  std::vector<at::Tensor> xs;
};
struct NoSaved {};

at::Tensor leaf(int64_t n = 3) { return at::arange(n, at::kDouble).requires_grad_(); }

// Defines `schema` with a CPU kernel, an empty save_for_backward and `backward`, registered
// at the caller's line.
template <class Args, class K, class B>
customop::Op<Args>& define_with_backward(
    const char* schema, K kernel, B backward,
    std::source_location loc = std::source_location::current()) {
  auto& op = customop::define<Args>(schema);
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl_save_for_backward([](const Args&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward(backward, {}, loc);
  return op;
}

at::Tensor double_x(const XArgs& a) { return a.x * 2; }
at::Tensor double_x_dim(const XDimArgs& a) { return a.x * 2; }
at::Tensor x_plus_bias(const XBiasArgs& a) { return a.bias ? a.x + *a.bias : a.x * 1; }
at::Tensor stack_xs(const XsArgs& a) { return at::stack(a.xs).sum(0); }

std::string prefix(const char* op, int line) {
  return std::string("In the backward function defined for ") + op + " at " +
         CUSTOMOP_TEST_LOCATION(line) + " using the CustomOp API, ";
}

// Runs forward (which must succeed) and backward; returns backward's error message.
template <class Args>
std::string backward_error(customop::Op<Args>& op, const Args& args) {
  at::Tensor y;
  EXPECT_NO_THROW(y = op(args)) << "the forward must succeed; the grads are checked in backward";
  if (!y.defined()) return "<forward failed>";
  return error_message([&] { y.sum().backward(); });
}

// ---- keys (G2, G3) -------------------------------------------------------------------------

// SCENARIOS G2.
TEST(GradsKeys, UnknownKeyListsExpectedAndReceived) {
  // clang-format off
  auto& op = define_with_backward<XArgs>("core_grads::g2_unknown(Tensor x) -> Tensor", double_x, [](const NoSaved&, const at::Tensor& g) { return customop::Grads{{"y", g}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              AllOf(HasSubstr(prefix("core_grads::g2_unknown", line) +
                              "expected the returned grad_input dict to have keys {'x'} but got "
                              "{'y'}"),
                    HasSubstr("must return a gradient (can be None) for each arg")));
}

// SCENARIOS G2.
TEST(GradsKeys, UnknownKeyThroughIValueDictRefused) {
  auto backward = [](const NoSaved&, const at::Tensor& g) {
    c10::Dict<std::string, at::Tensor> d;
    d.insert("x", g);
    d.insert("y", g);
    return c10::IValue(d);
  };
  // clang-format off
  auto& op = define_with_backward<XArgs>("core_grads::g2_unknown_dict(Tensor x) -> Tensor", double_x, backward); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              HasSubstr(prefix("core_grads::g2_unknown_dict", line) +
                        "expected the returned grad_input dict to have keys {'x'} but got "
                        "{'x', 'y'}"));
}

// SCENARIOS G3.
TEST(GradsKeys, NonTensorArgKeyRefusedEvenIfNone) {
  // clang-format off
  auto& op = define_with_backward<XDimArgs>("core_grads::g3_none(Tensor x, int dim) -> Tensor", double_x_dim, [](const NoSaved&, const at::Tensor& g) { return customop::Grads{{"x", g * 2}, {"dim", std::nullopt}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XDimArgs{leaf(), 0}),
              AllOf(HasSubstr(prefix("core_grads::g3_none", line) +
                              "expected the returned grad_input dict to have keys {'x'} but got "
                              "{'dim', 'x'}"),
                    HasSubstr("Args declared to be non-Tensor-like types should not appear")));
}

// SCENARIOS G3.
TEST(GradsKeys, NonTensorArgKeyRefusedWithATensor) {
  auto& op = define_with_backward<XDimArgs>("core_grads::g3_tensor(Tensor x, int dim) -> Tensor",
                                            double_x_dim, [](const NoSaved&, const at::Tensor& g) {
                                              return customop::Grads{{"x", g * 2}, {"dim", g}};
                                            });
  EXPECT_THAT(backward_error(op, XDimArgs{leaf(), 0}),
              HasSubstr("to have keys {'x'} but got {'dim', 'x'}"));
}

TEST(GradsKeys, MissingKeyRefused) {
  auto& op =
      define_with_backward<XBiasArgs>("core_grads::missing(Tensor x, Tensor? bias) -> Tensor",
                                      x_plus_bias, [](const NoSaved&, const at::Tensor& g) {
                                        return customop::Grads{{"x", g}};
                                      });
  EXPECT_THAT(backward_error(op, XBiasArgs{leaf(), std::nullopt}),
              HasSubstr("to have keys {'bias', 'x'} but got {'x'}"));
}

TEST(GradsKeys, DuplicateKeyRefused) {
  auto& op = define_with_backward<XArgs>("core_grads::duplicate(Tensor x) -> Tensor", double_x,
                                         [](const NoSaved&, const at::Tensor& g) {
                                           return customop::Grads{{"x", g}, {"x", g * 2}};
                                         });
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              HasSubstr("the returned grads hold input 'x' twice"));
}

// ---- values (G1, G6, G7, G9, None-optional) ---------------------------------------------

// SCENARIOS G1.
TEST(GradsValues, BackwardReturningNotAMappingRefused) {
  // clang-format off
  auto& op = define_with_backward<XArgs>("core_grads::g1_int(Tensor x) -> Tensor", double_x, [](const NoSaved&, const at::Tensor&) { return c10::IValue(int64_t{3}); }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              HasSubstr(prefix("core_grads::g1_int", line) +
                        "expected the output of the backward function to be a dict but got int"));
  auto& op2 = define_with_backward<XArgs>(
      "core_grads::g1_tensor(Tensor x) -> Tensor", double_x,
      [](const NoSaved&, const at::Tensor& g) { return c10::IValue(g); });
  EXPECT_THAT(
      backward_error(op2, XArgs{leaf()}),
      HasSubstr("expected the output of the backward function to be a dict but got Tensor"));
  auto& op3 = define_with_backward<XArgs>(
      "core_grads::g1_list(Tensor x) -> Tensor", double_x,
      [](const NoSaved&, const at::Tensor& g) { return c10::IValue(std::vector<at::Tensor>{g}); });
  EXPECT_THAT(backward_error(op3, XArgs{leaf()}), HasSubstr("to be a dict but got List[Tensor]"));
}

TEST(GradsValues, DictWithNonStringKeys) {
  auto& op = define_with_backward<XArgs>("core_grads::int_keys(Tensor x) -> Tensor", double_x,
                                         [](const NoSaved&, const at::Tensor& g) {
                                           c10::Dict<int64_t, at::Tensor> d;
                                           d.insert(0, g);
                                           return c10::IValue(d);
                                         });
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              HasSubstr("expected the grad_input dict to have str keys but got a key of type int"));
}

// SCENARIOS G6.
TEST(GradsValues, GradThatIsNotATensorRefused) {
  // clang-format off
  auto& op = define_with_backward<XArgs>("core_grads::g6_int(Tensor x) -> Tensor", double_x, [](const NoSaved&, const at::Tensor&) { return customop::Grads{{"x", int64_t{1}}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XArgs{leaf()}),
              HasSubstr(prefix("core_grads::g6_int", line) +
                        "got object of type int as the gradient for input 'x', but expected the "
                        "gradient to be either None or a Tensor"));
  auto& op2 = define_with_backward<XArgs>("core_grads::g6_str_dict(Tensor x) -> Tensor", double_x,
                                          [](const NoSaved&, const at::Tensor&) {
                                            c10::impl::GenericDict d(c10::StringType::get(),
                                                                     c10::AnyType::get());
                                            d.insert("x", c10::IValue(std::string("grad")));
                                            return c10::IValue(d);
                                          });
  EXPECT_THAT(backward_error(op2, XArgs{leaf()}),
              HasSubstr("got object of type str as the gradient for input 'x'"));
}

std::vector<at::Tensor> three_leaves() { return {leaf(), leaf(), leaf()}; }

// SCENARIOS G7.
TEST(GradsValues, WrongNumberOfListGradsByNameRefused) {
  // clang-format off
  auto& op = define_with_backward<XsArgs>("core_grads::g7_named(Tensor[] xs) -> Tensor", stack_xs, [](const NoSaved&, const at::Tensor& g) { return customop::Grads{{"xs", std::vector<at::Tensor>{g, g}}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XsArgs{three_leaves()}),
              HasSubstr(prefix("core_grads::g7_named", line) +
                        "for input 'xs' expected the grad_input dict to hold a list of 3 "
                        "gradients but got 2"));
}

// SCENARIOS G7.
TEST(GradsValues, WrongNumberOfListGradsTypedRefused) {
  struct XsGrads {
    std::vector<at::Tensor> xs;
  };
  // clang-format off
  auto& op = define_with_backward<XsArgs>("core_grads::g7_typed(Tensor[] xs) -> Tensor", stack_xs, [](const NoSaved&, const at::Tensor& g) { return XsGrads{{g, g}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XsArgs{three_leaves()}),
              HasSubstr(prefix("core_grads::g7_typed", line) +
                        "for input 'xs' expected the grad_input dict to hold a list of 3 "
                        "gradients but got 2"));
}

// SCENARIOS G7.
TEST(GradsValues, WrongNumberOfListGradsThroughIValueDictRefused) {
  auto& op = define_with_backward<XsArgs>(
      "core_grads::g7_dict(Tensor[] xs) -> Tensor", stack_xs,
      [](const NoSaved&, const at::Tensor& g) {
        c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
        d.insert("xs", c10::IValue(std::vector<at::Tensor>{g, g, g, g}));
        return c10::IValue(d);
      });
  EXPECT_THAT(backward_error(op, XsArgs{three_leaves()}),
              HasSubstr("for input 'xs' expected the grad_input dict to hold a list of 3 "
                        "gradients but got 4"));
}

// SCENARIOS G9.
TEST(GradsValues, NoneForATensorListRefused) {
  // clang-format off
  auto& op = define_with_backward<XsArgs>("core_grads::g9_none(Tensor[] xs) -> Tensor", stack_xs, [](const NoSaved&, const at::Tensor&) { return customop::Grads{{"xs", std::nullopt}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XsArgs{three_leaves()}),
              HasSubstr(prefix("core_grads::g9_none", line) +
                        "for input 'xs' expected the grad_input dict to hold a list of "
                        "gradients but got object of type NoneType."));
  auto& op2 = define_with_backward<XsArgs>("core_grads::g9_tensor(Tensor[] xs) -> Tensor", stack_xs,
                                           [](const NoSaved&, const at::Tensor& g) {
                                             return customop::Grads{{"xs", g}};
                                           });
  EXPECT_THAT(backward_error(op2, XsArgs{three_leaves()}),
              HasSubstr("hold a list of gradients but got object of type Tensor."));
}

TEST(GradsValues, ListElementThatIsNotATensor) {
  auto& op = define_with_backward<XsArgs>("core_grads::list_elem(Tensor[] xs) -> Tensor", stack_xs,
                                          [](const NoSaved&, const at::Tensor& g) {
                                            c10::impl::GenericList l(c10::AnyType::get());
                                            l.push_back(g);
                                            l.push_back(c10::IValue());
                                            l.push_back(c10::IValue(2.5));
                                            return customop::Grads{{"xs", c10::IValue(l)}};
                                          });
  EXPECT_THAT(backward_error(op, XsArgs{three_leaves()}),
              HasSubstr("for input 'xs' expected the grad_input dict to hold a list of None or "
                        "Tensor gradients but got object of float at index 2"));
}

TEST(GradsValues, TensorForAnOptionalThatWasNone) {
  // clang-format off
  auto& op = define_with_backward<XBiasArgs>("core_grads::none_bias(Tensor x, Tensor? bias) -> Tensor", x_plus_bias, [](const NoSaved&, const at::Tensor& g) { return customop::Grads{{"x", g}, {"bias", g}}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XBiasArgs{leaf(), std::nullopt}),
              HasSubstr(prefix("core_grads::none_bias", line) +
                        "got a Tensor as the gradient for input 'bias' but expected None as the "
                        "gradient because input 'bias' was not a Tensor (it was type NoneType)."));
  // The same formula is fine when bias was given.
  const auto x = leaf();
  const auto bias = leaf();
  op(XBiasArgs{x, bias}).sum().backward();
  EXPECT_TRUE(at::equal(bias.grad(), at::ones({3}, at::kDouble)));
}

TEST(GradsValues, TensorForAnOptionalThatWasNoneTyped) {
  struct Grads2 {
    at::Tensor x;
    std::optional<at::Tensor> bias;
  };
  // clang-format off
  auto& op = define_with_backward<XBiasArgs>("core_grads::none_bias_typed(Tensor x, Tensor? bias) -> Tensor", x_plus_bias, [](const NoSaved&, const at::Tensor& g) { return Grads2{g, g}; }); const int line = __LINE__;
  // clang-format on
  EXPECT_THAT(backward_error(op, XBiasArgs{leaf(), std::nullopt}),
              HasSubstr(prefix("core_grads::none_bias_typed", line) +
                        "got a Tensor as the gradient for input 'bias' but expected None"));
}

// Beyond the reference (whose check is torch's engine: "returned an invalid gradient at index
// 0", naming neither the op nor the argument): the glue names both, with both shapes.
TEST(GradsValues, GradOfTheWrongShapeRefusedNamingTheArgument) {
  auto& op = define_with_backward<XArgs>("core_grads::bad_shape(Tensor x) -> Tensor", double_x,
                                         [](const NoSaved&, const at::Tensor& g) {
                                           return customop::Grads{{"x", at::cat({g, g})}};
                                         });
  const at::Tensor x = leaf();
  const std::string n = std::to_string(x.size(0));
  EXPECT_THAT(backward_error(op, XArgs{x}),
              AllOf(HasSubstr("In the backward function defined for core_grads::bad_shape"),
                    HasSubstr("the grad for 'x' has shape [" + std::to_string(2 * x.size(0)) +
                              "] but 'x' has shape [" + n + "]")));
}

// A grad that sums to its input's shape (a broadcast one) is reduced, as torch's engine does.
TEST(GradsValues, GradThatSumsToTheInputShapeIsAccepted) {
  auto& op =
      define_with_backward<XArgs>("core_grads::broadcast_grad(Tensor x) -> Tensor", double_x,
                                  [](const NoSaved&, const at::Tensor& g) {
                                    return customop::Grads{{"x", 2 * g.expand({2, g.size(0)})}};
                                  });
  const at::Tensor x = leaf();
  op(XArgs{x}).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), at::full_like(x, 4.0)));
}

// ---- the three ways to return grads, on a mix of argument kinds ----------------------------

// out = 2 x + bias + sum_k (k + 1) xs[k]; dim is a non-tensor argument in between.
struct MixArgs {
  at::Tensor x;
  int64_t dim;
  std::optional<at::Tensor> bias;
  std::vector<at::Tensor> xs;
};
constexpr const char* kMixSchema = "(Tensor x, int dim, Tensor? bias, Tensor[] xs) -> Tensor";
at::Tensor mix_cpu(const MixArgs& a) {
  auto out = a.x * 2;
  if (a.bias) out = out + *a.bias;
  for (size_t k = 0; k < a.xs.size(); ++k) out = out + a.xs[k] * static_cast<double>(k + 1);
  return out;
}
struct MixSaved {
  bool has_bias;
  int64_t n;
};

template <class B>
customop::Op<MixArgs>& mix_op(const std::string& name, B backward) {
  auto& op = customop::define<MixArgs>("core_grads::" + name + kMixSchema);
  op.impl(c10::DeviceType::CPU, mix_cpu);
  op.impl_save_for_backward([](const MixArgs& a, const at::Tensor&) {
    return MixSaved{a.bias.has_value(), static_cast<int64_t>(a.xs.size())};
  });
  op.impl_backward(backward);
  return op;
}

// xs[1] gets None as its grad; the rest get (k + 1) g.
void expect_mix_grads(customop::Op<MixArgs>& op, bool with_bias) {
  const auto x = leaf();
  const auto bias = leaf();
  const std::vector<at::Tensor> xs = {leaf(), leaf(), leaf()};
  op(MixArgs{x, 0, with_bias ? std::optional<at::Tensor>(bias) : std::nullopt, xs})
      .sum()
      .backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({3}, 2.0, at::kDouble)));
  EXPECT_EQ(bias.grad().defined(), with_bias);
  if (with_bias) {
    EXPECT_TRUE(at::equal(bias.grad(), at::ones({3}, at::kDouble)));
  }
  EXPECT_TRUE(at::equal(xs[0].grad(), at::ones({3}, at::kDouble)));
  EXPECT_FALSE(xs[1].grad().defined());
  EXPECT_TRUE(at::equal(xs[2].grad(), at::full({3}, 3.0, at::kDouble)));
}

TEST(GradsPaths, ByNameInAnyOrder) {
  auto& op = mix_op("by_name", [](const MixSaved& s, const at::Tensor& g) {
    c10::List<std::optional<at::Tensor>> xs;
    for (int64_t k = 0; k < s.n; ++k) {
      xs.push_back(k == 1 ? std::nullopt
                          : std::optional<at::Tensor>(g * static_cast<double>(k + 1)));
    }
    customop::Grads grads{{"xs", xs}};
    grads.set("bias", s.has_bias ? c10::IValue(g) : c10::IValue());
    grads.set("x", g);
    grads.set("x", g * 2);  // set() replaces
    return grads;
  });
  expect_mix_grads(op, true);
  expect_mix_grads(op, false);
}

TEST(GradsPaths, IValueDict) {
  auto& op = mix_op("ivalue_dict", [](const MixSaved& s, const at::Tensor& g) {
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    d.insert("bias", s.has_bias ? c10::IValue(g) : c10::IValue());
    c10::impl::GenericList xs(c10::OptionalType::create(c10::TensorType::get()));
    for (int64_t k = 0; k < s.n; ++k) {
      xs.push_back(k == 1 ? c10::IValue() : c10::IValue(g * static_cast<double>(k + 1)));
    }
    d.insert("xs", c10::IValue(xs));
    d.insert("x", c10::IValue(g * 2));
    return c10::IValue(d);
  });
  expect_mix_grads(op, true);
  expect_mix_grads(op, false);
}

TEST(GradsPaths, TypedAggregate) {
  struct MixGrads {
    at::Tensor x;
    std::optional<at::Tensor> bias;
    std::vector<std::optional<at::Tensor>> xs;
  };
  auto& op = mix_op("typed", [](const MixSaved& s, const at::Tensor& g) {
    MixGrads out{g * 2, s.has_bias ? std::optional<at::Tensor>(g) : std::nullopt, {}};
    for (int64_t k = 0; k < s.n; ++k) {
      out.xs.push_back(k == 1 ? std::nullopt
                              : std::optional<at::Tensor>(g * static_cast<double>(k + 1)));
    }
    return out;
  });
  expect_mix_grads(op, true);
  expect_mix_grads(op, false);
}

TEST(GradsPaths, TypedAggregateWithPlainTensors) {
  struct MixGrads {
    at::Tensor x;
    at::Tensor bias;  // undefined means None
    std::vector<at::Tensor> xs;
  };
  auto& op = mix_op("typed_plain", [](const MixSaved& s, const at::Tensor& g) {
    MixGrads out{g * 2, s.has_bias ? g : at::Tensor(), {}};
    for (int64_t k = 0; k < s.n; ++k)
      out.xs.push_back(k == 1 ? at::Tensor() : g * static_cast<double>(k + 1));
    return out;
  });
  expect_mix_grads(op, true);
  expect_mix_grads(op, false);
}

TEST(GradsPaths, NoneForEveryInput) {
  auto& op = define_with_backward<XArgs>("core_grads::all_none(Tensor x) -> Tensor", double_x,
                                         [](const NoSaved&, const at::Tensor&) {
                                           return customop::Grads{{"x", std::nullopt}};
                                         });
  const auto x = leaf();
  ASSERT_NO_THROW(op(XArgs{x}).sum().backward());
  EXPECT_FALSE(x.grad().defined());
}

}  // namespace
