// Sample points at a singularity (issue 34): reported as "not differentiable here", skipped
// and moved, never a failure; a wrong derivative away from them still fails. Kinks are judged
// where they are, by subgradients (detail/singular_points.h).

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

namespace {

namespace gc = customop::gradcheck;
using ::testing::HasSubstr;

gc::GradcheckOptions no_raise(gc::Mode mode) {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  o.mode = mode;
  return o;
}

constexpr gc::Mode kModes[] = {gc::Mode::kSlow, gc::Mode::kFast};

at::Tensor values(std::vector<double> v) { return at::tensor(v, at::kDouble).requires_grad_(true); }

/// The notes that say "not differentiable here".
std::vector<std::string> moved_notes(const gc::GradcheckResult& r) {
  std::vector<std::string> out;
  std::copy_if(r.notes.begin(), r.notes.end(), std::back_inserter(out),
               [](const std::string& n) { return n.rfind("not differentiable here", 0) == 0; });
  return out;
}

/// relu whose backward gives `at_zero` at x == 0 exactly and `scale` times the derivative
/// elsewhere.
struct Relu : torch::autograd::Function<Relu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double at_zero, double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["at_zero"] = at_zero;
    ctx->saved_data["scale"] = scale;
    return x.clamp_min(0.0);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& g) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const double z = ctx->saved_data["at_zero"].toDouble();
    const double s = ctx->saved_data["scale"].toDouble();
    const at::Tensor d = at::where(x > 0, at::full_like(x, s),
                                   at::where(x == 0, at::full_like(x, z), at::zeros_like(x)));
    return {g[0] * d, at::Tensor(), at::Tensor()};
  }
};

gc::BoxedFunction relu(double at_zero, double scale) {
  gc::BoxedFunction fn;
  fn.name = "relu_at_zero";
  fn.arg_names = {"x"};
  fn.return_names = {"y"};
  fn.call = [at_zero, scale](torch::jit::Stack& s) {
    s.back() = Relu::apply(s.back().toTensor(), at_zero, scale);
  };
  return fn;
}

/// log(x) whose backward is `scale` / x.
struct Log : torch::autograd::Function<Log> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    return at::log(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 const torch::autograd::variable_list& g) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * ctx->saved_data["scale"].toDouble() / x, at::Tensor()};
  }
};

gc::BoxedFunction log_scaled(double scale) {
  gc::BoxedFunction fn;
  fn.name = "log_scaled";
  fn.arg_names = {"x"};
  fn.return_names = {"y"};
  fn.call = [scale](torch::jit::Stack& s) { s.back() = Log::apply(s.back().toTensor(), scale); };
  return fn;
}

// A kink exactly at a sample point: a value between the one-sided derivatives (a
// subgradient) passes with a note; one outside them is a value no limit of f supports, a
// failure where it is (the mutant corpus's relu_bad_subgradient), not moved.
TEST(SingularPoints, AKinkIsJudgedWhereItIsBySubgradients) {
  for (auto mode : kModes) {
    const auto ok = gc::gradcheck(relu(0.5, 1.0), {values({0.0, 1.5, -2.0})}, no_raise(mode));
    EXPECT_TRUE(ok.passed) << ok.message();
    EXPECT_TRUE(moved_notes(ok).empty()) << ok.message();
    const auto bad = gc::gradcheck(relu(5.0, 1.0), {values({0.0, 1.5, -2.0})}, no_raise(mode));
    EXPECT_TRUE(bad.failed(gc::Check::kNotDifferentiable)) << bad.message();
    EXPECT_TRUE(moved_notes(bad).empty()) << bad.message();
  }
  const auto slow =
      gc::gradcheck(relu(0.5, 1.0), {values({0.0, 1.5, -2.0})}, no_raise(gc::Mode::kSlow));
  EXPECT_TRUE(std::any_of(slow.notes.begin(), slow.notes.end(), [](const std::string& n) {
    return n.find("lie at a kink within the step") != std::string::npos;
  })) << slow.message();
}

// Singularities: f not finite within the step (log and sqrt at 0 up, asin at 1 down).
TEST(SingularPoints, ASingularityAtTheSampleIsSkippedAndThePointMoved) {
  auto& d = c10::Dispatcher::singleton();
  struct Case {
    const char* op;
    std::vector<double> x;
    const char* moved_to;
  };
  for (const Case& c : {Case{"aten::log", {0.0, 2.0}, "moved to 1.000000e-03"},
                        Case{"aten::sqrt", {0.0, 2.0}, "moved to 1.000000e-03"},
                        Case{"aten::asin", {1.0, 0.25}, "moved to 9.990000e-01"}}) {
    const auto op = d.findSchemaOrThrow(c.op, "");
    for (auto mode : kModes) {
      const auto r = gc::gradcheck(op, {values(c.x)}, no_raise(mode));
      EXPECT_TRUE(r.passed) << c.op << "\n" << r.message();
      const auto notes = moved_notes(r);
      ASSERT_EQ(notes.size(), 1u) << c.op << "\n" << r.message();
      EXPECT_THAT(notes[0], HasSubstr("is at a singularity"));
      EXPECT_THAT(notes[0], HasSubstr(c.moved_to));
    }
  }
}

// Never a pass that hides a wrong derivative elsewhere: a relu 1 % too steep with one element
// on the kink, and a log whose derivative is 1 % too large with one at the singularity.
TEST(SingularPoints, AWrongDerivativeAwayFromThePointStillFails) {
  for (auto mode : kModes) {
    const auto r1 = gc::gradcheck(relu(0.0, 1.01), {values({0.0, 1.5, -2.0})}, no_raise(mode));
    EXPECT_TRUE(r1.failed(gc::Check::kJacobian)) << r1.message();
    const auto r2 = gc::gradcheck(log_scaled(1.01), {values({0.0, 2.0})}, no_raise(mode));
    EXPECT_TRUE(r2.failed(gc::Check::kJacobian)) << r2.message();
    // Only the singular element: it is judged at the moved point.
    const auto r3 = gc::gradcheck(log_scaled(1.01), {values({0.0})}, no_raise(mode));
    EXPECT_TRUE(r3.failed(gc::Check::kJacobian)) << r3.message();
    EXPECT_EQ(moved_notes(r3).size(), 1u) << r3.message();
  }
}

}  // namespace

// A singular element that is not the first: the one-hot cotangents of the other outputs give
// 0 * inf = nan in its column, and that nan is the worst entry; the element is still blamed
// and moved (asin at 1 and -1, the 16-bit run's float64 check included: rounding to bfloat16
// puts samples there, and the 16-bit kernel is not at fault).
TEST(SingularPoints, ASingularElementAnywhereInTheInputIsMoved) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::asin", "");
  for (auto dtype : {at::kDouble, at::kBFloat16}) {
    for (auto mode : kModes) {
      const at::Tensor x =
          at::tensor({0.25, 1.0, -1.0, 0.5}, at::kDouble).to(dtype).requires_grad_(true);
      const auto r = gc::gradcheck(op, {x}, no_raise(mode));
      EXPECT_TRUE(r.passed) << dtype << "\n" << r.message();
      std::size_t moved = 0;
      for (const auto& n : r.notes) {
        moved += n.find("not differentiable here") != std::string::npos ? 1 : 0;
      }
      EXPECT_EQ(moved, 2u) << dtype << "\n" << r.message();
    }
  }
}

// Singular elements feeding a reduction (every output depends on them: a NaN there makes the
// error estimates of its row NaN, and healthy entries look worst), and an output that is
// itself not finite (log1p at -1: its row is NaN in every column): the element is found by
// its column, moved, and the check passes; the same functions with a wrong factor still fail.
TEST(SingularPoints, ReductionsAndNonFiniteOutputsAreMovedToo) {
  auto sum_of = [](double factor) {
    gc::BoxedFunction fn;
    fn.name = "asin_sum";
    fn.arg_names = {"x"};
    fn.return_names = {"y"};
    fn.call = [factor](torch::jit::Stack& s) {
      const at::Tensor x = s.back().toTensor();
      // The wrong factor only in the backward: a custom scale of the grad.
      s.back() = (at::asin(x) * factor + (at::asin(x) * (1 - factor)).detach()).sum() * 2;
    };
    return fn;
  };
  const auto log1p = c10::Dispatcher::singleton().findSchemaOrThrow("aten::log1p", "");
  for (auto mode : kModes) {
    const auto r = gc::gradcheck(sum_of(1.0), {values({0.25, 0.5, 1.0, -0.3})}, no_raise(mode));
    EXPECT_TRUE(r.passed) << r.message();
    EXPECT_EQ(moved_notes(r).size(), 1u) << r.message();
    const auto bad = gc::gradcheck(sum_of(1.02), {values({0.25, 0.5, 1.0, -0.3})}, no_raise(mode));
    EXPECT_TRUE(bad.failed(gc::Check::kJacobian)) << bad.message();
    const auto l = gc::gradcheck(log1p, {values({0.1, -1.0, 0.5, -1.0, 0.3})}, no_raise(mode));
    EXPECT_TRUE(l.passed) << l.message();
    EXPECT_EQ(moved_notes(l).size(), 2u) << l.message();
  }
}
