// SCENARIOS G (GC1, GC6, GC8, GC11, GC14, GC17, GC18, GC29) and the harness's other
// behaviours: reports, JSON, heatmaps, non-differentiable points, float32 rules, fast mode,
// second order, op-evaluation counts, the runner, input specs and the gtest helper.

#include "mutants/corpus.h"
#include "support/error_message.h"
#include "support/gradcheck_samples.h"

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/gtest.h>
#include <customop/gradcheck/report.h>
#include <customop/gradcheck/runner.h>

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace {

namespace gc = customop::gradcheck;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- test-local ops ------------------------------------------------------------------------

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  at::Tensor x;
};
struct ScaleArgs {
  at::Tensor x;
  double alpha;
};
struct ScaleSaved {
  double alpha;
};

// f(x) = alpha * x, typed (for EXPECT_GRADCHECK).
customop::Op<ScaleArgs>& typed_scale() {
  static auto& op = []() -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("gradcheck_test::scale(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl(c10::DeviceType::CUDA, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_save_for_backward(
        [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
    o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", g * s.alpha}};
    });
    return o;
  }();
  return op;
}

// Its forward raises its own error.
customop::Op<XArgs>& raising_op() {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("gradcheck_test::raises(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) -> at::Tensor {
      TORCH_CHECK_VALUE(false, "raises: x must be empty, but got shape ", a.x.sizes());
    });
    o.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    o.impl_backward([](const XSaved& s, const at::Tensor& g) { return customop::Grads{{"x", g}}; });
    return o;
  }();
  return op;
}

// x^3 whose backward detaches x: first order right, second order wrong.
customop::Op<XArgs>& cube_detached_backward() {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("gradcheck_test::cube_detached_backward(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * a.x * a.x; });
    o.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    o.impl_backward([](const XSaved& s, const at::Tensor& g) {
      const at::Tensor x = s.x.detach();
      return customop::Grads{{"x", 3 * x * x * g}};
    });
    return o;
  }();
  return op;
}

// The positive entries of x: the output's length depends on the values.
customop::Op<XArgs>& positive_part() {
  static auto& op = []() -> customop::Op<XArgs>& {
    auto& o = customop::define<XArgs>("gradcheck_test::positive_part(Tensor x) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x.masked_select(a.x > 0); });
    o.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    o.impl_backward([](const XSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", at::zeros_like(s.x).masked_scatter(s.x > 0, g)}};
    });
    return o;
  }();
  return op;
}

const customop::OpCore& corpus_op(const std::string& name) {
  customop_mutants::corpus();
  const auto* op = customop::find_op("customop_mutants::" + name);
  if (op == nullptr) throw std::runtime_error("missing corpus op " + name);
  return *op;
}

torch::jit::Stack stack_of(std::initializer_list<c10::IValue> values) {
  return torch::jit::Stack(values);
}

at::Tensor leaf(std::vector<double> values, c10::ScalarType dtype = at::kDouble) {
  return torch::tensor(values, torch::dtype(at::kDouble)).to(dtype).requires_grad_(true);
}

gc::GradcheckOptions no_raise(gc::Mode mode = gc::Mode::kSlow) {
  gc::GradcheckOptions o;
  o.mode = mode;
  o.raise_exception = false;
  return o;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// ---- SCENARIOS G ---------------------------------------------------------------------------

// GC1: f(x) = 5x in float64 passes, slow and fast, and costs what the cost model says.
TEST(Gradcheck, PassesFiveXInFloat64AtTheModelledCost) {
  const at::Tensor x = leaf({0.5, -1.0, 2.0, 3.0});
  for (auto mode : {gc::Mode::kSlow, gc::Mode::kFast}) {
    gc::GradcheckOptions o;
    o.mode = mode;
    const gc::GradcheckResult r = gc::gradcheck(typed_scale(), ScaleArgs{x, 5.0}, o);
    EXPECT_TRUE(r.passed) << r.message();
    EXPECT_EQ(first_line(r.message()), "gradcheck passed");
    EXPECT_EQ(r.method, "central");
    // Slow: 1 forward with grad + 1 numerical base + 2 per input element; 1 VJP per output
    // element, 2 per output for reentrancy (one dense grad_output), then one for the zero
    // grad_output and one for undefined grads (torch: 2 per output element + 2).
    // Fast: 1 + 1 + 2 per input; 2 per output, + 2.
    if (mode == gc::Mode::kSlow) {
      EXPECT_EQ(r.counts.forward_calls, 2 + 2 * 4);
      EXPECT_EQ(r.counts.vjp_calls, 4 + 2 + 2);
    } else {
      EXPECT_EQ(r.counts.forward_calls, 2 + 2);
      EXPECT_EQ(r.counts.vjp_calls, 2 + 2);
    }
  }
}

// GC6: no input requires grad: an error, even in no-raise mode.
TEST(Gradcheck, NoInputRequiringGradRaisesEvenWithoutRaise) {
  const at::Tensor x = torch::randn({3}, torch::kDouble);
  for (bool raise : {true, false}) {
    gc::GradcheckOptions o;
    o.raise_exception = raise;
    try {
      gc::gradcheck(typed_scale(), ScaleArgs{x, 5.0}, o);
      ADD_FAILURE() << "expected c10::ValueError";
    } catch (const c10::ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("at least one input must require grad"));
      EXPECT_THAT(e.what(), HasSubstr("gradcheck_test::scale"));
    }
  }
}

// GC8: an input with a stride-0 dimension: an error naming the input, even in no-raise mode.
TEST(Gradcheck, Stride0InputRaisesNamingTheInput) {
  const at::Tensor base = torch::randn({1}, torch::kDouble).requires_grad_(true);
  const at::Tensor x = base.expand({4});
  for (bool raise : {true, false}) {
    gc::GradcheckOptions o;
    o.raise_exception = raise;
    try {
      gc::gradcheck(typed_scale(), ScaleArgs{x, 5.0}, o);
      ADD_FAILURE() << "expected c10::ValueError";
    } catch (const c10::ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("input 0 ('x')"));
      EXPECT_THAT(e.what(), HasSubstr("stride 0"));
    }
  }
}

// GC11: an output not connected to the input (marked non-differentiable, yet it depends on
// x): the numerical gradient was expected to be zero.
TEST(Gradcheck, OutputDisconnectedFromItsInputFails) {
  const auto& op = corpus_op("scale_disconnected");
  for (auto mode : {gc::Mode::kSlow, gc::Mode::kFast}) {
    const auto r = gc::gradcheck(op, stack_of({leaf({1.0, 2.0}), 5.0}), no_raise(mode));
    EXPECT_FALSE(r.passed);
    EXPECT_TRUE(r.failed(gc::Check::kNonDifferentiableOutput)) << r.message();
    EXPECT_THAT(first_line(r.message()), HasSubstr("expected to be zero"));
    EXPECT_THAT(first_line(r.message()), HasSubstr("input 0 ('x')"));
  }
}

// GC14: backward adds a constant instead of scaling by grad_output.
TEST(Gradcheck, BackwardNotMultipliedByGradOutputFails) {
  const auto& op = corpus_op("scale_ignores_grad_output");
  const auto r = gc::gradcheck(op, stack_of({leaf({1.0, 2.0, 3.0}), 5.0}), no_raise());
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(r.failed(gc::Check::kGradOutputScaling));
  EXPECT_THAT(r.message(), HasSubstr("backward not multiplied by grad_output"));
  EXPECT_THAT(r.message(), HasSubstr("the grad of input 0 ('x') is not zero"));
}

// GC17: backward crashes on an undefined output grad.
TEST(Gradcheck, BackwardCrashingOnUndefinedGradFails) {
  const auto& op = corpus_op("cube_crash_on_undefined");
  for (auto mode : {gc::Mode::kSlow, gc::Mode::kFast}) {
    const auto r = gc::gradcheck(op, stack_of({leaf({1.0, -2.0, 0.5})}), no_raise(mode));
    EXPECT_FALSE(r.passed);
    EXPECT_TRUE(r.failed(gc::Check::kUndefinedGrad)) << r.message();
    EXPECT_THAT(r.message(), HasSubstr("must handle undefined output grads"));
    EXPECT_THAT(r.message(), HasSubstr("cannot handle it"));  // the backward's own message
    EXPECT_FALSE(r.failed(gc::Check::kJacobian)) << r.message();
  }
}

// GC18: backward off by +0.01 everywhere: "Jacobian mismatch for output i with respect to
// input j", the schema name, then the worst element.
TEST(Gradcheck, OffByAHundredthReportsTheWorstElement) {
  const auto& op = corpus_op("scale_off_by_hundredth");
  gc::GradcheckOptions o;  // raise_exception on: the report is the exception's message
  o.seed = 11;
  try {
    gc::gradcheck(op, stack_of({leaf({1.0, 2.0, 3.0}), 5.0}), o);
    FAIL() << "expected GradcheckError";
  } catch (const gc::GradcheckError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(first_line(msg), "Jacobian mismatch for output 0 with respect to input 0 ('x')");
    EXPECT_THAT(msg, HasSubstr("worst element: d output 0["));
    EXPECT_THAT(msg, HasSubstr("/ d x["));
    EXPECT_THAT(msg, HasSubstr("numerical "));
    EXPECT_THAT(msg, HasSubstr("analytical "));
    EXPECT_THAT(msg, HasSubstr("abs error 1.000000e-02"));
    EXPECT_THAT(msg, HasSubstr("rel error "));
    EXPECT_THAT(msg, HasSubstr("(error estimate "));
    EXPECT_THAT(msg, HasSubstr("(rounding bound "));
    EXPECT_THAT(msg, HasSubstr("from error estimates, safety 4; eps 1e-06, seed 11"));
    EXPECT_THAT(msg, HasSubstr("bad entries: 9 of 9"));
    EXPECT_THAT(msg, HasSubstr("per argument"));
    EXPECT_FALSE(e.result().passed);
    ASSERT_EQ(e.result().arguments.size(), 1u);
    EXPECT_EQ(e.result().arguments[0].name, "x");
    EXPECT_EQ(e.result().arguments[0].bad_entries, 9);
    const auto& w = e.result().pairs.at(0).worst;
    EXPECT_NEAR(w.abs_error, 0.01, 1e-6);
    EXPECT_NEAR(w.analytical - w.numerical, 0.01, 1e-6);
  }
}

// GC29: the function's own error propagates unchanged, even in no-raise mode.
// The Jacobian check takes differences without grad mode and the VJP with it, so the forward
// must not depend on grad mode: a difference beyond atol + rtol |b| fails kForwardGradMode
// with the largest |difference|, an infinite one included; one within them passes.
TEST(Gradcheck, ForwardThatDependsOnGradModeFails) {
  auto shifted_without_grad = [](double off) {
    return gc::BoxedFunction{.name = "grad_mode_dependent",
                             .arg_names = {"x"},
                             .return_names = {"y"},
                             .call =
                                 [off](torch::jit::Stack& s) {
                                   const at::Tensor x = s.back().toTensor();
                                   s.back() = at::GradMode::is_enabled() ? x * 2 : x * 2 + off;
                                 },
                             .call_cpu = {}};
  };
  const at::Tensor x = torch::tensor({1.0, -2.0, 3.0}, torch::kDouble).requires_grad_(true);
  const auto within = gc::gradcheck(shifted_without_grad(1e-6), {x}, no_raise());
  EXPECT_FALSE(within.failed(gc::Check::kForwardGradMode)) << within.message();
  const auto off = gc::gradcheck(shifted_without_grad(0.1), {x}, no_raise());
  EXPECT_TRUE(off.failed(gc::Check::kForwardGradMode)) << off.message();
  EXPECT_THAT(off.message(),
              HasSubstr("forward output 0 ('y') differs with and without grad mode"));
  EXPECT_THAT(off.message(), HasSubstr("max |difference| 1.000000e-01"));
  const auto inf = gc::gradcheck(shifted_without_grad(INFINITY), {x}, no_raise());
  EXPECT_TRUE(inf.failed(gc::Check::kForwardGradMode)) << inf.message();
  EXPECT_THAT(inf.message(), HasSubstr("max |difference| inf"));
}

TEST(Gradcheck, FunctionErrorIsAFailedCheckWithItsMessage) {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  const auto r = gc::gradcheck(raising_op(), XArgs{leaf({1.0, 2.0})}, o);
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.failures.size(), 1u) << r.message();
  EXPECT_EQ(r.failures[0].check, gc::Check::kForwardError);
  EXPECT_EQ(r.failures[0].headline, "the function raised an error");
  EXPECT_NE(r.failures[0].detail.find("raises: x must be empty, but got shape [2]"),
            std::string::npos)
      << r.failures[0].detail;
  o.raise_exception = true;
  try {
    gc::gradcheck(raising_op(), XArgs{leaf({1.0, 2.0})}, o);
    ADD_FAILURE() << "expected a GradcheckError";
  } catch (const gc::GradcheckError& e) {
    EXPECT_TRUE(e.result().failed(gc::Check::kForwardError));
    EXPECT_NE(std::string(e.what()).find("x must be empty, but got shape [2]"), std::string::npos)
        << e.what();
  }
}

// ---- the other checks ------------------------------------------------------------------------

// The argument's schema name: j counts inputs that require grad (w is input 0 when x does not
// require grad).
TEST(Checks, InputIndexCountsInputsThatRequireGrad) {
  const auto& op = corpus_op("weighted_square_swapped");
  const at::Tensor x = torch::tensor({1.0, 2.0, -1.0}, torch::kDouble);
  const auto r = gc::gradcheck(op, stack_of({x, leaf({0.5, 1.5, 2.0})}), no_raise());
  EXPECT_EQ(first_line(r.message()),
            "Jacobian mismatch for output 0 with respect to input 0 ('w')");
  const auto r2 =
      gc::gradcheck(op, stack_of({leaf({1.0, 2.0, -1.0}), leaf({0.5, 1.5, 2.0})}), no_raise());
  EXPECT_EQ(first_line(r2.message()),
            "Jacobian mismatch for output 0 with respect to input 0 ('x')");
  EXPECT_EQ(r2.failures.at(1).headline,
            "Jacobian mismatch for output 0 with respect to input 1 ('w')");
}

// i counts differentiable outputs; the wrong output's grad shows up for the pair it breaks.
TEST(Checks, MultiOutputMismatchNamesTheOutput) {
  const auto& op = corpus_op("sincos_swapped_grads");
  const auto r = gc::gradcheck(op, stack_of({leaf({0.3, 1.1})}), no_raise());
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.outputs, (std::vector<std::string>{"sin", "cos"}));
  // Named like the inputs: index and the schema's return name.
  EXPECT_THAT(r.message(),
              HasSubstr("Jacobian mismatch for output 0 ('sin') with respect to input 0 ('x')"));
  EXPECT_THAT(r.message(),
              HasSubstr("Jacobian mismatch for output 1 ('cos') with respect to input 0 ('x')"));
  EXPECT_THAT(r.message(), HasSubstr("d sin["));
}

// Tensor[] inputs are named element by element.
TEST(Checks, TensorListInputsAreNamedByElement) {
  const auto& op = corpus_op("sum_list");
  c10::List<at::Tensor> xs({leaf({1.0, 2.0}), leaf({-1.0, 0.5}), leaf({3.0, 4.0})});
  const auto r = gc::gradcheck(op, stack_of({xs}), no_raise());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_EQ(r.inputs, (std::vector<std::string>{"xs[0]", "xs[1]", "xs[2]"}));
}

// At a kink within the step, an analytical value between the one-sided derivatives (a
// subgradient, what relu's backward gives at 0) passes with a note; one outside them is
// reported as a non-differentiable point, not a Jacobian mismatch.
TEST(Checks, KinkAcceptsSubgradientsAndReportsOthers) {
  const auto& op = corpus_op("relu");
  for (double at_kink : {0.0, 3e-7, -3e-7}) {
    const auto r = gc::gradcheck(op, stack_of({leaf({-1.0, at_kink, 2.0})}), no_raise());
    EXPECT_TRUE(r.passed) << at_kink << ": " << r.message();
    EXPECT_THAT(r.notes, Contains(HasSubstr("1 entries lie at a kink within the step"))) << at_kink;
    EXPECT_EQ(r.pairs.at(0).kink_entries, 1);
  }
  const auto bad = gc::gradcheck(corpus_op("relu_bad_subgradient"),
                                 stack_of({leaf({-1.0, 0.0, 2.0})}), no_raise());
  ASSERT_FALSE(bad.passed);
  EXPECT_TRUE(bad.failed(gc::Check::kNotDifferentiable)) << bad.message();
  EXPECT_FALSE(bad.failed(gc::Check::kJacobian)) << bad.message();
  EXPECT_THAT(first_line(bad.message()), HasSubstr("not differentiable at x[1]"));
  // Detection off: the central difference alone judges, a plain mismatch (torch's behaviour).
  auto o = no_raise();
  o.detect_nondifferentiable = false;
  const auto r2 = gc::gradcheck(op, stack_of({leaf({-1.0, 0.0, 2.0})}), o);
  EXPECT_TRUE(r2.failed(gc::Check::kJacobian));
  // The fixed rule (atol/rtol given) reports a kink as before: a failure naming the point.
  auto fixed = no_raise();
  fixed.rtol = 1e-3;
  const auto r3 = gc::gradcheck(op, stack_of({leaf({-1.0, 3e-7, 2.0})}), fixed);
  EXPECT_THAT(first_line(r3.message()), HasSubstr("not differentiable at x[1]"));
  // A real bug at a smooth point stays a mismatch.
  const auto r4 =
      gc::gradcheck(corpus_op("cube_sign_flip"), stack_of({leaf({-1.0, 0.5, 2.0})}), no_raise());
  EXPECT_TRUE(r4.failed(gc::Check::kJacobian));
  EXPECT_FALSE(r4.failed(gc::Check::kNotDifferentiable));
}

// Perturbing the input changes the output's shape: reported, not a crash.
TEST(Checks, OutputShapeChangeUnderPerturbationFails) {
  const auto r = gc::gradcheck(positive_part(), XArgs{leaf({1.0, 2e-7, -3.0})}, no_raise());
  EXPECT_TRUE(r.failed(gc::Check::kOutputStability)) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("same count, shape and dtype when inputs are perturbed"));
  EXPECT_THAT(r.message(), HasSubstr("changed from [2] float64 to [1] float64"));
}

// A backward returning a grad of the wrong shape: the engine refuses it; reported as such.
TEST(Checks, WrongGradShapeIsABackwardError) {
  const auto& op = corpus_op("mul_grad_wrong_shape");
  const auto r = gc::gradcheck(
      op,
      stack_of({leaf({1, 2, 3, 4, 5, 6}).detach().view({3, 2}).requires_grad_(), leaf({1.0, 2.0})}),
      no_raise());
  EXPECT_TRUE(r.failed(gc::Check::kBackwardError)) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("the grad for 'w' has shape [3] but 'w' has shape [2]"));
}

// Slow mode above max_jacobian_entries judges the sample in fast mode, with a note naming the
// sizes; a wrong backward is still a failure there, compared entry by entry where the pair
// fits and on the projection alone where it does not (refusing is not a verdict).
TEST(Checks, SlowModeAboveTheLimitIsJudgedInFastMode) {
  const auto& op = corpus_op("cube");
  auto o = no_raise();
  o.max_jacobian_entries = 15;  // 4 input elements x 4 output elements = 16 entries
  const auto r = gc::gradcheck(op, stack_of({leaf({1.0, -2.0, 3.0, 0.5})}), o);
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_THAT(r.message(), HasSubstr("slow mode would build Jacobians of 4 input elements x 4 "
                                     "output elements = 16 entries, above max_jacobian_entries "
                                     "= 15: judged in fast mode instead"));
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_TRUE(r.pairs[0].projected);
  o.max_jacobian_entries = 16;
  const auto slow = gc::gradcheck(op, stack_of({leaf({1.0, -2.0, 3.0, 0.5})}), o);
  EXPECT_FALSE(slow.pairs.at(0).projected);
  EXPECT_THAT(slow.message(), Not(HasSubstr("judged in fast mode instead")));

  const auto& bad = corpus_op("cube_sign_flip");
  const auto rb = gc::gradcheck(bad, stack_of({leaf({1.0, -2.0, 3.0, 0.5})}), o = no_raise());
  ASSERT_TRUE(rb.failed(gc::Check::kJacobian));
  o.max_jacobian_entries = 15;
  const auto rf = gc::gradcheck(bad, stack_of({leaf({1.0, -2.0, 3.0, 0.5})}), o);
  EXPECT_TRUE(rf.failed(gc::Check::kJacobian)) << rf.message();
  EXPECT_THAT(rf.message(), HasSubstr("fast mode: v^T J u numerical"));
  EXPECT_THAT(rf.message(),
              HasSubstr("not compared entry by entry: the pair's Jacobian (4 input "
                        "elements x 4 output elements) is above "
                        "max_jacobian_entries = 15; the projection's verdict stands"));
  o.max_jacobian_entries = 1;
  o.mode = gc::Mode::kFast;
  EXPECT_TRUE(gc::gradcheck(op, stack_of({leaf({1.0, -2.0, 3.0, 0.5})}), o).passed);
}

// Reentrancy: jitter fails at nondet_tol 0 and passes when the tolerance allows it.
TEST(Checks, ReentrancyHonoursNondetTol) {
  const auto& op = corpus_op("cube_jitter");
  const auto r = gc::gradcheck(op, stack_of({leaf({1.0, -2.0})}), no_raise());
  EXPECT_TRUE(r.failed(gc::Check::kReentrancy));
  EXPECT_THAT(r.message(), HasSubstr("Backward is not reentrant"));
  auto o = no_raise();
  o.nondet_tol = 1e-3;
  EXPECT_TRUE(gc::gradcheck(op, stack_of({leaf({1.0, -2.0})}), o).passed);
}

// Fast mode: a failing projection is re-checked in slow mode for the report.
TEST(Checks, FastModeFailureReportsSlowWorstElement) {
  const auto& op = corpus_op("cube_scale_1pct");
  const auto r = gc::gradcheck(op, stack_of({leaf({1.0, -2.0, 0.5})}), no_raise(gc::Mode::kFast));
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(first_line(r.message()),
            "Jacobian mismatch for output 0 with respect to input 0 ('x')");
  EXPECT_THAT(r.message(), HasSubstr("fast mode: v^T J u numerical"));
  EXPECT_THAT(r.message(), HasSubstr("worst element: d output 0[1] / d x[1]"));
  ASSERT_TRUE(r.pairs.at(0).numerical.defined());
  EXPECT_EQ(r.pairs.at(0).numerical.sizes(), (c10::IntArrayRef{3, 3}));
}

// Fast mode does not scale atol by sum(u) * sum(v) (pytorch#59650: that made torch's fast mode
// too lenient): the projection's tolerance is its error estimates', or with atol/rtol given,
// atol + rtol * |numerical|, as an entry's.
TEST(Checks, FastModeToleranceIsNotScaledByProjectionSums) {
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({40}, torch::kDouble).requires_grad_(true);
  const auto r = gc::gradcheck(corpus_op("cube"), stack_of({x}), no_raise(gc::Mode::kFast));
  ASSERT_TRUE(r.passed) << r.message();
  const auto& w = r.pairs.at(0).worst;
  EXPECT_TRUE(r.pairs.at(0).projected);
  EXPECT_DOUBLE_EQ(w.tolerance, w.error_estimate + w.rounding_bound);
  EXPECT_LT(w.tolerance, 1e-6 * std::abs(w.numerical));  // float64: far below a 0.1 % error
  auto fixed = no_raise(gc::Mode::kFast);
  fixed.atol = 1e-5;
  fixed.rtol = 1e-3;
  const auto rf = gc::gradcheck(corpus_op("cube"), stack_of({x}), fixed);
  const auto& wf = rf.pairs.at(0).worst;
  EXPECT_DOUBLE_EQ(wf.tolerance, 1e-5 + 1e-3 * std::abs(wf.numerical));
  // And a constant added to every grad (a rank-1 error along 1 1^T) is seen at every seed.
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    auto o = no_raise(gc::Mode::kFast);
    o.seed = seed;
    EXPECT_TRUE(gc::gradcheck(corpus_op("scale_off_by_hundredth"), stack_of({x, 0.001}), o)
                    .failed(gc::Check::kJacobian))
        << "seed " << seed;
  }
}

// Fast mode's guarantee (options.h, Mode::kFast): a Jacobian wrong in one entry E of m x n is
// caught on every seed when |E| > 8 sqrt(m n) tau, tau the projection's tolerance, because every
// entry of u and v is at least 1 / (2 sqrt(count)). Checked on SIMD tail slips (the last of 15
// grads; the last of 4096): the premise holds with tau read off the correct twin, and the slip
// fails on every seed.
TEST(Checks, FastModeCatchesOneWrongEntryOnEverySeed) {
  const std::pair<const char*, const char*> ops[] = {{"cube_tail", "cube_tail_slip"},
                                                     {"sum_4096", "sum_4096_tail_slip"}};
  for (const auto& [correct, slip] : ops) {
    const auto& good = corpus_op(correct);
    const auto& bad = corpus_op(slip);
    const bool big = std::string(correct) == "sum_4096";
    for (std::uint64_t seed = 0; seed < (big ? 10u : 100u); ++seed) {
      for (const auto& s : customop::testing::differentiable_samples(good, c10::Device(at::kCPU),
                                                                     at::kDouble, seed)) {
        auto o = no_raise(gc::Mode::kFast);
        o.seed = seed;
        o.check_layout_variants = false;
        const auto ok = gc::gradcheck(good, s.args, o);
        ASSERT_TRUE(ok.passed) << correct << " seed " << seed << ": " << ok.message();
        const at::Tensor x = s.args[0].toTensor().detach().contiguous().reshape({-1});
        const double n = static_cast<double>(x.numel());
        const double m = big ? 1.0 : n;
        const double last = x[x.numel() - 1].item<double>();
        const double dropped = big ? 1.0 : 3 * last * last;  // the entry the slip leaves out
        const double tau = ok.pairs.at(0).worst.tolerance;
        EXPECT_GT(dropped, 8 * std::sqrt(m * n) * tau) << correct << " seed " << seed;
        EXPECT_TRUE(gc::gradcheck(bad, s.args, o).failed(gc::Check::kJacobian))
            << slip << " seed " << seed << " sample " << s.label;
      }
    }
  }
}

// float32: plain central differences (torch's way) raise false alarms on a correct op; the
// float64 reference and Ridders' extrapolation do not.
TEST(Checks, Float32RulesAvoidFalseAlarms) {
  const auto& op = corpus_op("cube");
  torch::manual_seed(3);
  const at::Tensor x = (torch::randn({6}) * 3).requires_grad_(true);
  auto central = no_raise();  // torch's way: eps 1e-6 in float32, fixed atol/rtol
  central.low_precision = gc::LowPrecisionMethod::kCentral;
  central.atol = 1e-5;
  central.rtol = 1e-3;
  EXPECT_FALSE(gc::gradcheck(op, stack_of({x}), central).passed);
  // The error estimates see that those differences cannot judge anything: no false alarm,
  // and a note saying so.
  central.atol.reset();
  central.rtol.reset();
  const auto est = gc::gradcheck(op, stack_of({x}), central);
  EXPECT_TRUE(est.passed) << est.message();
  EXPECT_THAT(est.notes, Contains(HasSubstr("a wrong value there may pass")));
  const auto ref = gc::gradcheck(op, stack_of({x}), no_raise());
  EXPECT_TRUE(ref.passed) << ref.message();
  EXPECT_EQ(ref.method, "central (float64 reference)");
  EXPECT_EQ(ref.dtype, "float32");
  EXPECT_DOUBLE_EQ(ref.tolerances.rtol, 2e-3);
  auto ridders = no_raise();
  ridders.low_precision = gc::LowPrecisionMethod::kRidders;
  const auto rr = gc::gradcheck(op, stack_of({x}), ridders);
  EXPECT_TRUE(rr.passed) << rr.message();
  EXPECT_EQ(rr.method, "ridders");
}

// A float32-only kernel: no float64 reference, so Ridders, with a note saying why.
TEST(Checks, Float32OnlyKernelFallsBackToRidders) {
  const auto& op = corpus_op("f32_softplus");
  const auto r = gc::gradcheck(op, stack_of({leaf({0.5, -1.0, 2.0}, at::kFloat)}), no_raise());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_EQ(r.method, "ridders");
  ASSERT_FALSE(r.notes.empty());
  EXPECT_THAT(r.notes[0], HasSubstr("float64 reference unavailable"));
  EXPECT_THAT(r.notes[0], HasSubstr("must be float32"));
  const auto bad = gc::gradcheck(corpus_op("f32_softplus_scale_1pct"),
                                 stack_of({leaf({0.5, -1.0, 2.0}, at::kFloat)}), no_raise());
  EXPECT_TRUE(bad.failed(gc::Check::kJacobian)) << bad.message();
}

// Second order: a backward that is right but not differentiable (it detaches x) passes the
// first order and fails gradgradcheck; a correct one passes both.
TEST(Checks, SecondOrderCatchesNonDifferentiableBackward) {
  auto o = no_raise();
  const auto first = gc::gradcheck(cube_detached_backward(), XArgs{leaf({1.0, -2.0})}, o);
  EXPECT_TRUE(first.passed) << first.message();
  const auto second = gc::gradgradcheck(cube_detached_backward(), XArgs{leaf({1.0, -2.0})}, o);
  ASSERT_FALSE(second.passed);
  EXPECT_EQ(first_line(second.message()),
            "second order: Jacobian mismatch for output 0 ('grad of x') with respect to input 0 "
            "('x')");
  EXPECT_FALSE(second.second_order_pairs.empty());
  for (auto mode : {gc::Mode::kSlow, gc::Mode::kFast}) {
    const auto good =
        gc::gradgradcheck(corpus_op("cube"), stack_of({leaf({1.0, -2.0})}), no_raise(mode));
    EXPECT_TRUE(good.passed) << good.message();
    const auto good32 = gc::gradgradcheck(
        corpus_op("sincos"), stack_of({leaf({1.0, -2.0}, at::kFloat)}), no_raise(mode));
    EXPECT_TRUE(good32.passed) << good32.message();
  }
}

// ---- reports -------------------------------------------------------------------------------

TEST(Reports, JsonCarriesVerdictFailuresAndCounts) {
  const auto r =
      gc::gradcheck(corpus_op("cube_sign_flip"), stack_of({leaf({1.0, 2.0})}), no_raise());
  const auto j = nlohmann::json::parse(gc::to_json(r));
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["op"], "customop_mutants::cube_sign_flip");
  EXPECT_EQ(j["dtype"], "float64");
  EXPECT_EQ(j["failures"][0]["check"], "jacobian");
  EXPECT_EQ(j["failures"][0]["input"], 0);
  EXPECT_EQ(j["pairs"][0]["input_name"], "x");
  EXPECT_EQ(j["pairs"][0]["bad_entries"], 2);
  EXPECT_GT(j["forward_calls"].get<int64_t>(), 0);
  EXPECT_GT(j["vjp_calls"].get<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(j["pairs"][0]["worst"]["analytical"].get<double>(), -12.0);
}

TEST(Reports, HeatmapPngOfAFailingPair) {
  const auto r = gc::gradcheck(corpus_op("drop_first_off_by_one"),
                               stack_of({leaf({1.0, 2.0, 3.0, 4.0, 5.0})}), no_raise());
  ASSERT_FALSE(r.passed);
  const auto dir = std::filesystem::temp_directory_path() / "customop_gradcheck_heatmap_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "pair.png").string();
  gc::write_heatmap_png(r.pairs.at(0), r.tolerances, path);
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(path), 50u);
  const auto ok =
      gc::gradcheck(corpus_op("drop_first"), stack_of({leaf({1.0, 2.0, 3.0})}), no_raise());
  EXPECT_THROW(gc::write_heatmap_png(ok.pairs.at(0), ok.tolerances, path), c10::ValueError);
}

// ---- runner and specs ----------------------------------------------------------------------

TEST(Runner, RunsRegisteredOpsBySampleAndSkipsCudaWithoutGpu) {
  customop_mutants::corpus();
  gc::RunOptions run;
  run.op_glob = "customop_mutants::cube*";
  run.modes = {gc::Mode::kSlow, gc::Mode::kFast};
  std::vector<std::string> lines;
  run.progress = [&](const std::string& l) { lines.push_back(l); };
  const auto s = gc::run_registered_ops(run);
  EXPECT_FALSE(s.ok());
  // cube passes everything; each mutant fails every sample.
  int cube_passed = 0;
  for (const auto& c : s.cases) {
    if (c.op == "customop_mutants::cube" && c.device == "cpu") {
      EXPECT_EQ(c.status, gc::CaseStatus::kPassed) << c.result.message();
      ++cube_passed;
    }
    if (c.op == "customop_mutants::cube_sign_flip" && c.device == "cpu") {
      EXPECT_EQ(c.status, gc::CaseStatus::kFailed);
    }
  }
  EXPECT_EQ(cube_passed, 2 /*dtypes*/ * 2 /*modes*/ * 2 /*samples*/);
  if (!torch::cuda::is_available()) {
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0], "cuda: no GPU, skipped");
  }
  // Every corpus op whose name starts with "cube" ran, one progress line each.
  const auto& ops = customop_mutants::corpus();
  const auto cubes = std::count_if(ops.begin(), ops.end(), [](const auto& e) {
    return e.op.rfind("customop_mutants::cube", 0) == 0;
  });
  const std::string n = std::to_string(cubes);
  EXPECT_THAT(lines.back(), HasSubstr("[" + n + "/" + n + "] customop_mutants::cube"));
  const std::string table = gc::format_summary(s);
  EXPECT_THAT(table, HasSubstr("customop_mutants::cube_sign_flip"));
  EXPECT_THAT(table, HasSubstr("FAILED customop_mutants::cube_sign_flip"));
  gc::RunOptions none;
  none.op_glob = "nothing::*";
  EXPECT_THROW(gc::run_registered_ops(none), c10::ValueError);
}

TEST(Runner, GlobMatch) {
  EXPECT_TRUE(gc::glob_match("customop::*", "customop::rms_norm"));
  EXPECT_TRUE(gc::glob_match("*norm", "customop::rms_norm"));
  EXPECT_TRUE(gc::glob_match("c?stomop::*_norm", "customop::rms_norm"));
  EXPECT_FALSE(gc::glob_match("customop::", "customop::rms_norm"));
  EXPECT_FALSE(gc::glob_match("aten::*", "customop::rms_norm"));
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(Specs, AtenOpFromASpecFile) {
  const auto path = write_temp("customop_gradcheck_spec_mul.json", R"([
    {"op": "aten::mul.Tensor", "label": "broadcast",
     "args": [{"tensor": {"shape": [3, 4], "init": "randn"}},
              {"tensor": {"shape": [4], "init": "uniform", "low": 0.5, "high": 2}}]},
    {"op": "aten::sum.dim_IntList", "args": [{"tensor": {"shape": [2, 3], "noncontiguous": true}}, [1]]},
    {"op": "aten::pow.Tensor_Scalar", "args": {"self": {"tensor": {"shape": [4], "dtype": "float64", "init": "uniform", "low": 0.5, "high": 1.5}}, "exponent": 2.5}}
  ])");
  const auto cases = gc::load_spec_file(path);
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].label, "broadcast");
  EXPECT_FALSE(cases[0].dtype_fixed);
  EXPECT_TRUE(cases[2].dtype_fixed);
  gc::RunOptions run;
  run.devices = {c10::DeviceType::CPU};
  run.modes = {gc::Mode::kSlow, gc::Mode::kFast};
  const auto s = gc::run_spec_cases(cases, run);
  EXPECT_TRUE(s.ok()) << gc::format_summary(s);
  EXPECT_EQ(s.count(gc::CaseStatus::kPassed), 2 * 2 * 2 + 2);
  const auto& first = s.cases.front().result;
  EXPECT_EQ(first.op, "aten::mul.Tensor");
  EXPECT_EQ(first.inputs, (std::vector<std::string>{"self", "other"}));
}

TEST(Specs, BadSpecsGiveOneLineErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "not valid JSON"},
      {R"({"op": "aten::does_not_exist", "args": []})", "no such operator is registered"},
      {R"({"op": "aten::mul", "args": []})", "no such overload; registered: aten::mul."},
      {R"({"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": [2], "init": "gauss"}}]})",
       "unknown init"},
      {R"({"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": [2]}}]})",
       "argument 'other' is missing"},
      {R"({"op": "aten::sum.dim_IntList", "args": [{"tensor": {"shape": [2]}}, "x"]})",
       "expected a list"},
      {R"({"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": [2], "dtype": "int64", "requires_grad": true}}, {"tensor": {"shape": [2]}}]})",
       "cannot require grad"},
  };
  for (const auto& [text, expected] : cases) {
    const auto path = write_temp("customop_gradcheck_bad_spec.json", text);
    try {
      gc::load_spec_file(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const c10::ValueError& e) {
      const std::string msg = e.what_without_backtrace();
      EXPECT_THAT(msg, HasSubstr(expected)) << text;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
    }
  }
}

// ---- gtest helper ----------------------------------------------------------------------------

TEST(GtestHelper, ExpectGradcheckOnATypedOp) {
  EXPECT_GRADCHECK(typed_scale(), ScaleArgs{.x = leaf({1.0, 2.0}), .alpha = 5.0});
  gc::GradcheckOptions fast;
  fast.mode = gc::Mode::kFast;
  fast.seed = 3;
  EXPECT_GRADCHECK(typed_scale(), ScaleArgs{.x = leaf({1.0, 2.0}), .alpha = 5.0}, fast);
  ASSERT_GRADCHECK(typed_scale(), ScaleArgs{.x = leaf({1.0, 2.0}, at::kFloat), .alpha = 5.0});
}

const customop::OpCore* g_sign_flip = nullptr;
torch::jit::Stack g_sign_flip_args;

TEST(GtestHelper, ExpectGradcheckFailsWithTheReport) {
  g_sign_flip = &corpus_op("cube_sign_flip");
  g_sign_flip_args = stack_of({leaf({1.0, 2.0})});
  EXPECT_NONFATAL_FAILURE(EXPECT_GRADCHECK(*g_sign_flip, g_sign_flip_args),
                          "Jacobian mismatch for output 0 with respect to input 0 ('x')");
  EXPECT_NONFATAL_FAILURE(EXPECT_GRADCHECK(*g_sign_flip, g_sign_flip_args), "(seed 0)");
  g_sign_flip_args = stack_of({torch::ones({2}, torch::kDouble)});
  EXPECT_NONFATAL_FAILURE(EXPECT_GRADCHECK(*g_sign_flip, g_sign_flip_args), "rejected its inputs");
}

// ---- CUDA (GPU machines only) ---------------------------------------------------------------

TEST(Cuda, CompareWithCpuAndPass) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "cuda: no GPU, skipped";
  const at::Tensor x =
      torch::randn({4}, torch::dtype(torch::kFloat).device(torch::kCUDA)).requires_grad_(true);
  const auto r = gc::gradcheck(typed_scale(), ScaleArgs{x, 5.0}, no_raise());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_EQ(r.device, "cuda:0");
  for (const auto& e : customop_mutants::corpus()) {
    for (auto dtype : {at::kFloat, at::kDouble}) {
      if (e.float32_only && dtype != at::kFloat) continue;
      for (const auto& s : customop::testing::differentiable_samples(
               corpus_op(e.op.substr(18)), c10::Device(at::kCUDA), dtype, 0)) {
        const auto rr = gc::gradcheck(corpus_op(e.op.substr(18)), s.args, no_raise());
        EXPECT_EQ(rr.passed, e.twin.empty()) << e.op << " " << s.label << ": " << rr.message();
        EXPECT_FALSE(rr.failed(gc::Check::kCudaVsCpu)) << rr.message();
      }
    }
  }
}

}  // namespace
