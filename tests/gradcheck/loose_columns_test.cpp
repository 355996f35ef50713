// Entries that one central difference judges loosely, sampled again at eps / 2
// (gradcheck/src/detail/loose_columns.h): where the derivative is of the order of eps |f''|,
// a wrong backward fails; a correct one passes without the "may pass" note; kinks within the
// step keep the kink rule.

#include <customop/gradcheck/gradcheck.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

namespace gc = customop::gradcheck;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// y = g(x) elementwise, with a backward dy/dx = `slope`(x) * `factor`.
struct Elementwise : torch::autograd::Function<Elementwise> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t which,
                            double factor) {
    ctx->save_for_backward({x});
    ctx->saved_data["which"] = which;
    ctx->saved_data["factor"] = factor;
    switch (which) {
      case 0: return x * x;
      case 1: return x * x * x;
      case 2: return at::cos(x);
      case 3: return at::relu(x);
      default: return at::exp(x) - x;  // f'(0) = 0, f''(0) = 1
    }
  }
  static variable_list backward(AutogradContext* ctx, const variable_list& g) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const double factor = ctx->saved_data["factor"].toDouble();
    at::Tensor slope;
    switch (ctx->saved_data["which"].toInt()) {
      case 0: slope = 2 * x; break;
      case 1: slope = 3 * x * x; break;
      case 2: slope = -at::sin(x); break;
      case 3: slope = (x >= 0).to(x.scalar_type()); break;
      default: slope = at::exp(x) - 1; break;
    }
    return {g[0] * slope * factor, at::Tensor(), at::Tensor()};
  }
};

const char* const kNames[] = {"square", "cube", "cos", "relu", "expm1_minus_x"};

gc::BoxedFunction elementwise(int64_t which, double factor) {
  gc::BoxedFunction fn;
  fn.name = kNames[which];
  fn.arg_names = {"x"};
  fn.return_names = {"y"};
  fn.call = [which, factor](torch::jit::Stack& s) {
    s.back() = Elementwise::apply(s.back().toTensor(), which, factor);
  };
  return fn;
}

torch::jit::Stack at_values(std::vector<double> x) {
  return {at::tensor(x, at::kDouble).requires_grad_(true)};
}

gc::GradcheckOptions slow() {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  o.mode = gc::Mode::kSlow;
  return o;
}

bool warns_loose(const gc::GradcheckResult& r) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [](const std::string& n) { return n.find("may pass") != std::string::npos; });
}

// Within a few eps of a stationary point, f' ~ eps |f''|: the one-step bound (eps |f''| / 2
// and the row's median of it, times the safety) took a backward off by 2x or 0.5x, or 0.
TEST(LooseColumns, AWrongBackwardNearAStationaryPointFails) {
  const std::vector<std::vector<double>> points{
      {1e-6, -2e-6, 5e-7}, {3e-7}, {-1e-7, 2e-6}, {1.5e-6, 1e-1}};
  for (const int64_t which : {0, 2, 4}) {
    for (const double factor : {2.2, 0.5, 0.0, -1.0}) {
      for (const auto& p : points) {
        // cos: its stationary point is 0 too.
        const auto r = gc::gradcheck(elementwise(which, factor), at_values(p), slow());
        EXPECT_FALSE(r.passed) << kNames[which] << " x" << factor << " at " << p[0];
        if (!r.failures.empty()) {
          EXPECT_EQ(r.failures[0].check, gc::Check::kJacobian) << r.message();
        }
      }
    }
  }
}

TEST(LooseColumns, ACorrectBackwardThereStillPassesWithoutTheNote) {
  const std::vector<std::vector<double>> points{{1e-6, -2e-6, 5e-7}, {3e-7},         {0.0},
                                                {-1e-7, 2e-6},       {1.5e-6, 1e-1}, {1e-9, -1e-8}};
  for (const int64_t which : {0, 1, 2, 4}) {
    for (const auto& p : points) {
      const auto r = gc::gradcheck(elementwise(which, 1.0), at_values(p), slow());
      EXPECT_TRUE(r.passed) << kNames[which] << " at " << p[0] << "\n" << r.message();
      // x^2 leaves nothing loose at eps / 2. The note stays where it is true: cos and e^x - x
      // are ~1 there, so their rounding (~1e-16 / eps) is above 1 % of f' ~ x; the truncation
      // of x^3, h^2 f''' / 6, is as large as its f' = 3 x^2.
      if (which == 0) EXPECT_FALSE(warns_loose(r)) << kNames[which] << " at " << p[0];
    }
  }
  // Sums of such terms over many inputs: a row of curvature-sized entries (||x||^2 at tiny x).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (const double scale : {1e-7, 1e-6, 1e-5}) {
    const at::Tensor x = (at::randn({12}, gen, at::kDouble) * scale).requires_grad_(true);
    gc::BoxedFunction sumsq;
    sumsq.name = "sum_of_squares";
    sumsq.arg_names = {"x"};
    sumsq.return_names = {"y"};
    sumsq.call = [](torch::jit::Stack& s) {
      const at::Tensor t = s.back().toTensor();
      s.back() = (t * t).sum().unsqueeze(0) * t.sum();
    };
    const auto r = gc::gradcheck(sumsq, {x}, slow());
    EXPECT_TRUE(r.passed) << "scale " << scale << "\n" << r.message();
  }
}

// A kink within the step is not refined: a subgradient passes, a value outside the one-sided
// derivatives fails as before, whether the kink lies within eps / 2 or between eps / 2 and eps.
TEST(LooseColumns, KinksWithinTheStepKeepTheKinkRule) {
  // NB: more than one element, so that the row's median of the spreads is not the kink's own;
  // the others negative, where relu's grad is 0 whatever the factor.
  for (const double x : {3e-7, -3e-7, 7e-7, -7e-7}) {
    const auto ok = gc::gradcheck(elementwise(3, 1.0), at_values({x, -0.7, -0.2}), slow());
    EXPECT_TRUE(ok.passed) << "relu at " << x << "\n" << ok.message();
    if (x < 0) continue;
    const auto bad = gc::gradcheck(elementwise(3, 1.8), at_values({x, -0.7, -0.2}), slow());
    ASSERT_FALSE(bad.passed) << "relu x1.8 at " << x;
    EXPECT_EQ(bad.failures[0].check, gc::Check::kNotDifferentiable) << bad.message();
  }
}

// ATen's selu near its kink at 0 (slopes 1.0507 and 1.7581): the analytical value is the
// one-sided derivative of x's side, h f'' / 2 ~ 9e-7 beyond that side's one-sided difference.
// The kink rule, which took the values between the one-sided differences only, failed these
// samples (and, before the measured noise kept kinks out, passed them by a wide margin).
TEST(LooseColumns, AOneSidedDerivativeAtAKinkWithinTheStepPasses) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::selu", "");
  for (const double x : {-8.061695751754154e-08, -8.061695751754154e-07, -5.508909868646991e-07,
                         8.351213312931838e-08, -3.0e-07}) {
    torch::jit::Stack args{at::tensor({x, -0.7, 0.3}, at::kDouble).requires_grad_(true)};
    const auto r = gc::gradcheck(op, args, slow());
    EXPECT_TRUE(r.passed) << "selu at " << x << "\n" << r.message();
  }
}

// The second step costs two forward calls per refined column, and only there.
TEST(LooseColumns, TwoForwardCallsPerRefinedColumn) {
  const auto far = gc::gradcheck(elementwise(0, 1.0), at_values({0.5, -0.7, 0.9}), slow());
  const auto near = gc::gradcheck(elementwise(0, 1.0), at_values({0.5, -2e-6, 0.9}), slow());
  ASSERT_TRUE(far.passed && near.passed) << far.message() << near.message();
  EXPECT_EQ(near.counts.forward_calls, far.counts.forward_calls + 2);
}

}  // namespace
