// SCENARIOS E (O1-O10): output_differentiability and ops with several returns, including
// grads materialized as zeros for outputs the loss does not use.
// O1 (output_differentiability that is not a list of bools) is a compile error: see
// tests/compile_fail/output_differentiability_not_bools.cpp.
// NB: "clang-format off" regions keep a registration and its __LINE__ on one line: the
// tests compare the file:line that error messages report.

#include "support/error_message.h"
#include "support/finite_difference.h"

#include <customop/customop.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <vector>

namespace {

using customop::testing::error_message;
using customop::testing::matches_finite_differences;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};
struct NoSaved {};

using TensorInt = std::tuple<at::Tensor, int64_t>;
using TwoTensors = std::tuple<at::Tensor, at::Tensor>;

// ---- O2 ------------------------------------------------------------------------------------

// SCENARIOS O2.
TEST(OutputDifferentiability, LengthMustMatchTheReturnsAtRegistration) {
  auto& op =
      customop::define<XArgs, TwoTensors>("core_outdiff::o2_length(Tensor x) -> (Tensor, Tensor)");
  auto backward = [](const NoSaved&, const at::Tensor& g, const at::Tensor&) {
    return customop::Grads{{"x", g}};
  };
  int line = 0;
  // clang-format off
  const auto msg = error_message<c10::ValueError>([&] { line = __LINE__; op.impl_backward(backward, {true}); });
  // clang-format on
  EXPECT_THAT(msg, AllOf(HasSubstr("core_outdiff::o2_length: output_differentiability has 1 "
                                   "entries but the op has 2 returns"),
                         HasSubstr(CUSTOMOP_TEST_LOCATION(line))));
  EXPECT_THAT(error_message<c10::ValueError>([&] {
                op.impl_backward(backward, std::vector<bool>{true, false, true});
              }),
              HasSubstr("has 3 entries but the op has 2 returns"));
  EXPECT_FALSE(op.has_autograd());
  EXPECT_NO_THROW(op.impl_backward(backward, std::vector<bool>{true, false}));
  EXPECT_EQ(op.output_differentiability(), (std::vector<bool>{true, false}));
}

// ---- O5 ------------------------------------------------------------------------------------

// SCENARIOS O5.
TEST(OutputDifferentiability, NonTensorMarkedDifferentiableFailsAtForward) {
  auto& op = customop::define<XArgs, TensorInt>("core_outdiff::o5_int(Tensor x) -> (Tensor, int)");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return TensorInt{a.x * 2, a.x.numel()}; });
  op.impl_save_for_backward([](const XArgs&, const TensorInt&) { return NoSaved{}; });
  ASSERT_NO_THROW(op.impl_backward(
      [](const NoSaved&, const at::Tensor& g, customop::NoGrad) {
        return customop::Grads{{"x", g * 2}};
      },
      {true, true}));
  const auto x = at::ones({3}, at::kDouble).requires_grad_();
  EXPECT_THAT(error_message([&] { op(XArgs{x}); }),
              AllOf(HasSubstr("core_outdiff::o5_int: With output_differentiability=[True, True]. "
                              "At idx 1, we received an object of type int that is not a Tensor, "
                              "so it cannot be marked as differentiable"),
                    HasSubstr("output_differentiability")));
  // As in the reference, the check belongs to the forward and so also fires without grad.
  EXPECT_THAT(error_message([&] { op(XArgs{x.detach()}); }), HasSubstr("At idx 1"));
}

TEST(OutputDifferentiability, NonTensorReturnMarkedNonDifferentiableComesBack) {
  auto& op =
      customop::define<XArgs, TensorInt>("core_outdiff::tensor_int(Tensor x) -> (Tensor, int)");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return TensorInt{a.x * 2, a.x.numel()}; });
  op.impl_save_for_backward([](const XArgs&, const TensorInt&) { return NoSaved{}; });
  op.impl_backward(
      [](const NoSaved&, const at::Tensor& g, customop::NoGrad) {
        return customop::Grads{{"x", g * 2}};
      },
      {true, false});
  const auto x = at::ones({5}, at::kDouble).requires_grad_();
  const auto [y, n] = op(XArgs{x});
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({5}, 2.0, at::kDouble)));
}

// ---- O7: a max-like op, (values, indices) with [true, false] --------------------------------

struct MaxArgs {
  at::Tensor x;
  int64_t dim;
};
struct MaxSaved {
  int64_t dim;                 // non-tensor state: must come back intact
  at::Tensor indices;          // an output marked non-differentiable
  std::vector<int64_t> sizes;  // of x
};

struct O7Seen {
  std::vector<int64_t> dims;
  bool indices_grad_is_zero = true;
};
O7Seen g_o7;

customop::Op<MaxArgs, TwoTensors>& max_op() {
  static auto& op = []() -> customop::Op<MaxArgs, TwoTensors>& {
    auto& o = customop::define<MaxArgs, TwoTensors>(
        "core_outdiff::o7_max(Tensor x, int dim) -> (Tensor values, Tensor indices)");
    o.impl(c10::DeviceType::CPU, [](const MaxArgs& a) {
      auto [values, indices] = at::max(a.x, a.dim);
      return TwoTensors{values, indices};
    });
    o.impl_save_for_backward([](const MaxArgs& a, const TwoTensors& out) {
      return MaxSaved{a.dim, std::get<1>(out), a.x.sizes().vec()};
    });
    o.impl_backward(
        [](const MaxSaved& s, const at::Tensor& grad_values, const at::Tensor& grad_indices) {
          g_o7.dims.push_back(s.dim);
          g_o7.indices_grad_is_zero = g_o7.indices_grad_is_zero && grad_indices.defined() &&
                                      grad_indices.count_nonzero().item<int64_t>() == 0;
          auto grad_x =
              at::zeros(s.sizes, grad_values.options())
                  .scatter(s.dim, s.indices.unsqueeze(s.dim), grad_values.unsqueeze(s.dim));
          return customop::Grads{{"x", grad_x}};
        },
        {true, false});
    return o;
  }();
  return op;
}

// SCENARIOS O7.
TEST(OutputDifferentiability, MaxLikeOpIndicesNeverRequireGrad) {
  auto& op = max_op();
  const auto x = at::randn({3, 4}, at::kDouble).requires_grad_();
  const auto [values, indices] = op(MaxArgs{x, 1});
  EXPECT_TRUE(values.requires_grad());
  EXPECT_FALSE(indices.requires_grad());
  EXPECT_EQ(indices.scalar_type(), at::kLong);
  const auto [want_values, want_indices] = at::max(x.detach(), 1);
  EXPECT_TRUE(at::equal(values.detach(), want_values));
  EXPECT_TRUE(at::equal(indices, want_indices));
  // Still not differentiable when indices flow into a differentiable computation.
  EXPECT_FALSE((indices * 2).requires_grad());
}

// SCENARIOS O7.
TEST(OutputDifferentiability, MaxLikeOpMatchesFiniteDifferencesAndDimComesBackIntact) {
  auto& op = max_op();
  g_o7 = {};
  for (int64_t dim : {0, 1, -1}) {
    const auto x = at::randperm(12, at::kDouble).reshape({3, 4}) / 7.0;  // distinct: no ties
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<at::Tensor>& in) {
          return std::get<0>(op(MaxArgs{in[0], dim}));
        },
        {x},
        /*seed=*/static_cast<uint64_t>(dim + 10)))
        << "dim " << dim;
  }
  EXPECT_EQ(g_o7.dims, (std::vector<int64_t>{0, 1, -1}));
  EXPECT_TRUE(g_o7.indices_grad_is_zero);
}

// SCENARIOS O7.
TEST(OutputDifferentiability, MaxLikeOpGradMatchesTorchMax) {
  auto& op = max_op();
  const auto base = at::randn({4, 5}, at::kDouble);
  const auto w = at::randn({4}, at::kDouble);
  const auto x = base.clone().requires_grad_();
  (std::get<0>(op(MaxArgs{x, 1})) * w).sum().backward();
  const auto ref = base.clone().requires_grad_();
  (std::get<0>(at::max(ref, 1)) * w).sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), ref.grad()));
}

// ---- O10: a Tensor[] return --------------------------------------------------------------

struct SplitSaved {
  int64_t n;
};
std::vector<size_t> g_o10_grad_counts;

customop::Op<XArgs, std::vector<at::Tensor>>& split_op(const char* name,
                                                       std::optional<bool> differentiable) {
  auto& op = customop::define<XArgs, std::vector<at::Tensor>>(std::string("core_outdiff::") + name +
                                                              "(Tensor x) -> Tensor[]");
  // A functional op returns new tensors, not views of its input (the schema has no alias).
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) {
    std::vector<at::Tensor> parts;
    for (const auto& p : a.x.chunk(4)) parts.push_back(p.clone());
    return parts;
  });
  op.impl_save_for_backward([](const XArgs&, const std::vector<at::Tensor>& out) {
    return SplitSaved{static_cast<int64_t>(out.size())};
  });
  auto backward = [](const SplitSaved& s, const std::vector<at::Tensor>& grads) {
    g_o10_grad_counts.push_back(grads.size());
    for (const auto& g : grads) EXPECT_TRUE(g.defined());
    return customop::Grads{{"x", at::cat(grads)}};
  };
  if (differentiable) {
    op.impl_backward(backward, {*differentiable});
  } else {
    op.impl_backward(backward);
  }
  return op;
}

// SCENARIOS O10.
TEST(OutputDifferentiability, TensorListReturnGetsOneGradPerElement) {
  auto& op = split_op("o10_split", std::nullopt);
  g_o10_grad_counts.clear();
  const auto x = at::arange(8, at::kDouble).requires_grad_();
  const auto parts = op(XArgs{x});
  ASSERT_EQ(parts.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_TRUE(parts[k].requires_grad()) << k;
    EXPECT_TRUE(at::equal(parts[k].detach(), x.detach().slice(0, 2 * k, 2 * k + 2))) << k;
  }
  // Only parts 0 and 2 are used: the grads of 1 and 3 arrive as zeros.
  (parts[0] * 3 + parts[2]).sum().backward();
  EXPECT_EQ(g_o10_grad_counts, (std::vector<size_t>{4}));
  EXPECT_TRUE(at::equal(x.grad(), at::tensor({3., 3., 0., 0., 1., 1., 0., 0.}, at::kDouble)));
}

// SCENARIOS O10.
TEST(OutputDifferentiability, TensorListMarkedNonDifferentiableNeverRequiresGrad) {
  auto& op = split_op("o10_split_nondiff", false);
  const auto x = at::arange(8, at::kDouble).requires_grad_();
  const auto parts = op(XArgs{x});
  ASSERT_EQ(parts.size(), 4u);
  for (const auto& p : parts) EXPECT_FALSE(p.requires_grad());
}

// SCENARIOS O10.
TEST(OutputDifferentiability, TensorListReturnMatchesFiniteDifferences) {
  auto& op = split_op("o10_split_gradcheck", true);
  EXPECT_TRUE(matches_finite_differences(
      [&](const std::vector<at::Tensor>& in) {
        const auto parts = op(XArgs{in[0]});
        return at::stack({parts[0] * parts[1], parts[2].exp(), parts[3]});
      },
      {at::randn({8}, at::kDouble)}, /*seed=*/3));
}

// ---- several returns; unused outputs get zero grads ----------------------------------------

struct PairSeen {
  int calls = 0;
  bool second_defined = false;
  bool second_zero = false;
};
PairSeen g_pair;

TEST(MultiReturn, UnusedOutputGradArrivesAsZeros) {
  auto& op =
      customop::define<XArgs, TwoTensors>("core_outdiff::pair(Tensor x) -> (Tensor a, Tensor b)");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return TwoTensors{a.x * 2, a.x * 3}; });
  op.impl_save_for_backward([](const XArgs&, const TwoTensors&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& ga, const at::Tensor& gb) {
    ++g_pair.calls;
    g_pair.second_defined = gb.defined();
    g_pair.second_zero =
        gb.defined() && gb.sizes() == ga.sizes() && gb.count_nonzero().item<int64_t>() == 0;
    return customop::Grads{{"x", ga * 2 + gb * 3}};
  });
  const auto x = at::ones({4}, at::kDouble).requires_grad_();
  const auto [a, b] = op(XArgs{x});
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(b.requires_grad());
  a.sum().backward();
  EXPECT_EQ(g_pair.calls, 1);
  EXPECT_TRUE(g_pair.second_defined);
  EXPECT_TRUE(g_pair.second_zero);
  EXPECT_TRUE(at::equal(x.grad(), at::full({4}, 2.0, at::kDouble)));
}

TEST(MultiReturn, TensorTensorListAndFloat) {
  using Ret = std::tuple<at::Tensor, std::vector<at::Tensor>, double>;
  auto& op =
      customop::define<XArgs, Ret>("core_outdiff::mixed(Tensor x) -> (Tensor, Tensor[], float)");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) {
    return Ret{a.x.sin(), {a.x * 2, a.x * 3}, a.x.sum().item<double>()};
  });
  op.impl_save_for_backward([](const XArgs& a, const Ret&) { return XArgs{a.x}; });
  op.impl_backward([](const XArgs& s, const at::Tensor& g0, const std::vector<at::Tensor>& g1,
                      customop::NoGrad) {
    EXPECT_EQ(g1.size(), 2u);
    return customop::Grads{{"x", g0 * s.x.cos() + g1[0] * 2 + g1[1] * 3}};
  });
  EXPECT_TRUE(matches_finite_differences(
      [&](const std::vector<at::Tensor>& in) {
        auto [a, list, total] = op(XArgs{in[0]});
        EXPECT_DOUBLE_EQ(total, in[0].sum().item<double>());
        return a + list[0] * list[1];
      },
      {at::randn({5}, at::kDouble)}, /*seed=*/4));
}

}  // namespace
