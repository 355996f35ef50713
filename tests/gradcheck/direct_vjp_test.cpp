// The harness's VJP without torch's autograd engine (detail/vjp.h): where it applies, its grads
// are the engine's bit for bit; where the engine would do more than run one Node (hooks,
// anomaly mode, a graph past the Node, a pruned grad, a user autograd::Function, a backward
// already running), it steps aside and the engine runs.

#include "detail/vjp.h"
#include "mutants/corpus.h"
#include "support/gradcheck_samples.h"

#include <customop/op_core.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace {

namespace gd = customop::gradcheck::detail;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor leaf(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).requires_grad_(true);
}

std::vector<at::Tensor> engine(const std::vector<at::Tensor>& ys, const std::vector<at::Tensor>& gs,
                               const std::vector<at::Tensor>& xs) {
  return torch::autograd::grad(ys, xs, gs, /*retain_graph=*/true, false, /*allow_unused=*/true);
}

::testing::AssertionResult same_grads(const std::vector<at::Tensor>& a,
                                      const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " grads against " << b.size();
  }
  for (std::size_t j = 0; j < a.size(); ++j) {
    if (a[j].defined() != b[j].defined()) {
      return ::testing::AssertionFailure() << "grad " << j << " defined in one only";
    }
    if (!a[j].defined()) continue;
    if (a[j].sizes() != b[j].sizes() || a[j].dtype() != b[j].dtype()) {
      return ::testing::AssertionFailure()
             << "grad " << j << ": " << a[j].sizes() << " " << a[j].dtype() << " against "
             << b[j].sizes() << " " << b[j].dtype();
    }
    // Bit for bit, NaN where NaN.
    if (!at::equal(a[j].isnan(), b[j].isnan()) ||
        !at::equal(a[j].nan_to_num(0, 0, 0), b[j].nan_to_num(0, 0, 0))) {
      return ::testing::AssertionFailure() << "grad " << j << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Every floating tensor of `stack` that requires grad, lists included, in order.
std::vector<at::Tensor> grad_leaves(const torch::jit::Stack& stack) {
  std::vector<at::Tensor> out;
  for (const auto& v : stack) {
    if (v.isTensor() && v.toTensor().requires_grad()) out.push_back(v.toTensor());
    if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (std::size_t k = 0; k < list.size(); ++k) {
        const at::Tensor t = list.get(k);
        if (t.defined() && t.requires_grad()) out.push_back(t);
      }
    }
  }
  return out;
}

// Every corpus op (correct ones and their mutants) on its samples: the direct route gives the
// engine's grads, or the engine's error; on every correct op it applies.
TEST(DirectVjp, MatchesTheEngineOnEveryCorpusOp) {
  int applied = 0, compared = 0;
  for (const auto& e : customop_mutants::corpus()) {
    const auto* op = customop::find_op(e.op);
    ASSERT_NE(op, nullptr) << e.op;
    const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(e.op.c_str(), "");
    const auto dtype = e.float32_only ? at::kFloat : at::kDouble;
    for (auto& s : customop::testing::differentiable_samples(*op, at::kCPU, dtype, 0)) {
      const std::vector<at::Tensor> xs = grad_leaves(s.args);
      torch::jit::Stack stack = s.args;
      handle.callBoxed(stack);
      std::vector<at::Tensor> ys, gs;
      for (const auto& v : stack) {
        if (v.isTensor() && v.toTensor().grad_fn()) ys.push_back(v.toTensor());
      }
      if (ys.empty() || xs.empty()) continue;
      for (std::size_t i = 0; i < ys.size(); ++i) {
        gs.push_back(at::randn(ys[i].sizes(), ys[i].options().requires_grad(false)));
      }
      const std::string where = e.op + " " + s.label;
      std::optional<std::vector<at::Tensor>> direct;
      std::string direct_error, engine_error;
      std::vector<at::Tensor> want;
      try {
        direct = gd::direct_vjp(ys, gs, xs);
      } catch (const std::exception& ex) {
        direct_error = ex.what();
      }
      try {
        want = engine(ys, gs, xs);
      } catch (const std::exception& ex) {
        engine_error = ex.what();
      }
      if (!direct_error.empty()) {
        // The Node's own error: the engine raises it too.
        EXPECT_THAT(engine_error, ::testing::HasSubstr(direct_error.substr(0, 60))) << where;
        continue;
      }
      if (e.twin.empty()) {
        EXPECT_TRUE(direct.has_value()) << where << ": not direct";
      }
      if (!direct) continue;
      ++applied;
      EXPECT_TRUE(engine_error.empty()) << where << ": the engine raised " << engine_error;
      if (!engine_error.empty()) continue;
      // A nondeterministic backward (the jitter mutants) differs from itself: no reference.
      if (!same_grads(engine(ys, gs, xs), want)) continue;
      ++compared;
      EXPECT_TRUE(same_grads(*direct, want)) << where;
    }
  }
  EXPECT_GT(compared, 20);
}

TEST(DirectVjp, MatchesTheEngineOnAtenOps) {
  const auto x = leaf({3, 4}, 1), w = leaf({3, 4}, 2);
  const auto g = at::randn({3, 4}, at::kDouble);
  for (const auto& [name, y] : std::vector<std::pair<std::string, at::Tensor>>{
           {"sin", at::sin(x)}, {"mul", at::mul(x, w)}, {"sgn", at::sgn(x)}}) {
    const auto d = gd::direct_vjp({y}, {g}, {x, w});
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_TRUE(same_grads(*d, engine({y}, {g}, {x, w}))) << name;
  }
  // Two outputs, one of them not differentiable (max's indices).
  const auto [values, indices] = at::max(x, 1);
  const auto gv = at::randn({3}, at::kDouble);
  const auto d = gd::direct_vjp({values}, {gv}, {x});
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(same_grads(*d, engine({values}, {gv}, {x})));
}

/// y = 2 x, whose backward returns its grad as [1, n] for an input [n] (the engine reduces it),
/// or, with `extra`, one grad too many (the engine refuses it).
struct OddGrads : torch::autograd::Function<OddGrads> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, bool extra) {
    ctx->saved_data["extra"] = extra;
    return x * 2;
  }
  static variable_list backward(AutogradContext* ctx, const variable_list& g) {
    if (ctx->saved_data["extra"].toBool()) return {g[0] * 2, at::Tensor(), g[0]};
    return {(g[0] * 2).unsqueeze(0), at::Tensor()};
  }
};

TEST(DirectVjp, LeavesToTheEngineWhatOnlyItDoes) {
  const auto x = leaf({5}, 3);
  const auto g = at::randn({5}, at::kDouble);
  customop::gradcheck::OpCounts counts;
  auto check = [&](const char* what, const at::Tensor& y, const std::vector<at::Tensor>& xs,
                   const at::Tensor& gy) {
    EXPECT_FALSE(gd::direct_vjp({y}, {gy}, xs).has_value()) << what;
    EXPECT_TRUE(same_grads(gd::vjp({y}, {gy}, xs, counts), engine({y}, {gy}, xs))) << what;
  };
  {
    const auto y = at::sin(x);
    y.register_hook([](const at::Tensor& gy) { return gy * 3; });
    check("a hook on the output", y, {x}, g);
  }
  check("a view between the input and the op", at::sin(x.view({5, 1})).view({5}), {x}, g);
  check("the input is a non-leaf's input", at::sin(x * 2), {x}, g);
  check("one input twice", at::mul(x, x), {x}, g);
  check("a float32 grad_output of a float64 output", at::sin(x), {x}, g.to(at::kFloat));
  check("a C++ autograd::Function", OddGrads::apply(x, false), {x}, g);
  {
    // A hook on the requested leaf: the engine runs it on the grad it hands back.
    const auto h = leaf({5}, 5);
    h.register_hook([](const at::Tensor& gh) { return gh * 3; });
    check("a hook on the input", at::sin(h), {h}, g);
  }
  {
    // An input that requires grad but is not asked for: the engine prunes its grad, which
    // igamma cannot compute for its first argument.
    const auto a = leaf({5}, 6).abs().detach().add(1).requires_grad_(true);
    const auto z = leaf({5}, 7).abs().detach().add(1).requires_grad_(true);
    const auto y = at::igamma(a, z);
    EXPECT_FALSE(gd::direct_vjp({y}, {g}, {z}).has_value());
    EXPECT_TRUE(same_grads(gd::vjp({y}, {g}, {z}, counts), engine({y}, {g}, {z})));
  }
  {
    const torch::autograd::DetectAnomalyGuard anomaly(/*check_nan=*/false);
    check("anomaly mode", at::sin(x), {x}, g);
  }
  // A wrong grad count: the Node's own error, through the engine.
  const auto y = OddGrads::apply(x, true);
  EXPECT_FALSE(gd::direct_vjp({y}, {g}, {x}).has_value());
  EXPECT_THAT([&] { gd::vjp({y}, {g}, {x}, counts); },
              ::testing::ThrowsMessage<c10::Error>(::testing::HasSubstr("incorrect number")));
  EXPECT_THAT([&] { engine({y}, {g}, {x}); },
              ::testing::ThrowsMessage<c10::Error>(::testing::HasSubstr("incorrect number")));
}

/// Two outputs (x, 10 x) whose backward sees undefined grads as they come: an undefined grad
/// of output 0 counts as 7 per element, so the grads tell whether it arrived undefined.
struct SeesUndefined : torch::autograd::Function<SeesUndefined> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->set_materialize_grads(false);
    return {x.clone(), x * 10};
  }
  static variable_list backward(AutogradContext*, const variable_list& g) {
    at::Tensor first = g[0].defined() ? g[0] : at::full_like(g[1], 7.0);
    at::Tensor second = g[1].defined() ? g[1] * 10 : at::zeros_like(first);
    return {first + second};
  }
};

/// y = 2 x, whose backward asks direct_vjp for a VJP of another graph (while the engine runs
/// it) and records whether the direct route was taken there.
struct Nested : torch::autograd::Function<Nested> {
  static inline bool direct_inside = true;
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return x * 2; }
  static variable_list backward(AutogradContext*, const variable_list& g) {
    const at::Tensor u = at::randn({3}, at::kDouble).requires_grad_(true);
    const at::AutoGradMode on(true);
    direct_inside = gd::direct_vjp({at::sin(u)}, {at::ones({3}, at::kDouble)}, {u}).has_value();
    return {g[0] * 2};
  }
};

TEST(DirectVjp, NotInsideAnotherBackward) {
  const auto x = leaf({4}, 8);
  const auto y = Nested::apply(x);
  engine({y}, {at::ones({4}, at::kDouble)}, {x});
  EXPECT_FALSE(Nested::direct_inside);
  // Outside a backward, the same call is direct.
  const at::Tensor u = at::randn({3}, at::kDouble).requires_grad_(true);
  EXPECT_TRUE(gd::direct_vjp({at::sin(u)}, {at::ones({3}, at::kDouble)}, {u}).has_value());
}

TEST(DirectVjp, UndefinedGradsReachTheBackwardUndefined) {
  const auto x = leaf({4}, 4);
  const auto ys = SeesUndefined::apply(x);
  const auto g0 = at::randn({4}, at::kDouble), g1 = at::randn({4}, at::kDouble);
  customop::gradcheck::OpCounts counts;
  const auto grads = gd::vjp_undefined(ys, {at::zeros_like(g0), g1}, {true, false}, {x}, counts);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(at::allclose(grads[0], 7.0 + g1 * 10));
  const auto both = gd::vjp_undefined(ys, {g0, g1}, {false, false}, {x}, counts);
  EXPECT_TRUE(at::allclose(both[0], g0 + g1 * 10));
  {
    // The engine's route (anomaly mode keeps the direct one off): the same grads.
    const torch::autograd::DetectAnomalyGuard anomaly(/*check_nan=*/false);
    const auto via_engine =
        gd::vjp_undefined(ys, {at::zeros_like(g0), g1}, {true, false}, {x}, counts);
    EXPECT_TRUE(at::allclose(via_engine[0], 7.0 + g1 * 10));
  }
  EXPECT_EQ(counts.vjp_calls, 3);
  // A generated ATen Node (the direct route) and the engine's route agree.
  const auto z = leaf({3, 4}, 9);
  const auto [values, indices] = at::max(z, 1);
  const auto zeros = at::zeros({3}, at::kDouble);
  const auto direct = gd::vjp_undefined({values}, {zeros}, {true}, {z}, counts);
  const torch::autograd::DetectAnomalyGuard anomaly(/*check_nan=*/false);
  EXPECT_TRUE(same_grads(direct, gd::vjp_undefined({values}, {zeros}, {true}, {z}, counts)));
}

}  // namespace
