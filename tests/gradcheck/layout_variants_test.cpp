// The layout variants: each input and grad_output also strided and transposed, compared with
// the given layout. Kernels that read memory as if it were contiguous (the corpus's
// cube_contiguous_input and scale_contiguous_grad_output) pass finite differences on contiguous
// samples and fail here, naming the variant and the argument.

#include "mutants/corpus.h"

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace {

namespace gc = customop::gradcheck;
using ::testing::HasSubstr;

const customop::OpCore& corpus_op(const std::string& name) {
  customop_mutants::corpus();  // registers the ops
  const auto* op = customop::find_op("customop_mutants::" + name);
  if (op == nullptr) throw std::runtime_error("corpus op not registered: " + name);
  return *op;
}

gc::GradcheckResult check(const std::string& name, torch::jit::Stack args, gc::Mode mode,
                          bool variants = true) {
  gc::GradcheckOptions o;
  o.mode = mode;
  o.raise_exception = false;
  o.check_layout_variants = variants;
  return gc::gradcheck(corpus_op(name), args, o);
}

at::Tensor leaf(std::vector<int64_t> shape, c10::ScalarType dtype = at::kDouble) {
  torch::manual_seed(3);
  return at::randn(shape, at::TensorOptions().dtype(dtype)).requires_grad_(true);
}

const gc::Failure* layout_failure(const gc::GradcheckResult& r) {
  for (const auto& f : r.failures) {
    if (f.check == gc::Check::kLayout) return &f;
  }
  return nullptr;
}

class LayoutVariants : public ::testing::TestWithParam<gc::Mode> {};

TEST_P(LayoutVariants, ForwardThatIgnoresInputStridesFailsNamingTheInputAndTheLayout) {
  for (const auto& shape : {std::vector<int64_t>{4}, std::vector<int64_t>{2, 3}}) {
    const auto r = check("cube_contiguous_input", {leaf(shape)}, GetParam());
    ASSERT_FALSE(r.passed);
    const gc::Failure* f = layout_failure(r);
    ASSERT_NE(f, nullptr) << r.message();
    EXPECT_THAT(f->headline, HasSubstr("differs with input 0 ('x') as a strided view"));
    EXPECT_THAT(f->detail, HasSubstr("instead of"));
    EXPECT_THAT(f->detail, HasSubstr("as if it were contiguous"));
    EXPECT_EQ(f->input, 0);
    // The Jacobian itself is right on the contiguous sample: only the variant sees the bug.
    EXPECT_FALSE(r.failed(gc::Check::kJacobian)) << r.message();
  }
}

TEST_P(LayoutVariants, BackwardThatIgnoresGradOutputStridesFailsNamingTheOutput) {
  // Transposed input: the output of x * alpha keeps the transposed layout.
  const auto r = check("scale_contiguous_grad_output",
                       {leaf({2, 3}).detach().t().requires_grad_(true), 2.0}, GetParam());
  ASSERT_FALSE(r.passed);
  const gc::Failure* f = layout_failure(r);
  ASSERT_NE(f, nullptr) << r.message();
  EXPECT_THAT(f->headline, HasSubstr("the grad of input 0 ('x') differs with the grad_output of "
                                     "output 0"));
  EXPECT_THAT(f->headline, HasSubstr("strided view"));
  EXPECT_EQ(f->output, 0);
  EXPECT_FALSE(r.failed(gc::Check::kJacobian)) << r.message();
}

TEST_P(LayoutVariants, OptingOutSkipsThemAndTheBugsPass) {
  EXPECT_TRUE(check("cube_contiguous_input", {leaf({2, 3})}, GetParam(), false).passed);
  const auto r = check("scale_contiguous_grad_output", {leaf({4}), 2.0}, GetParam(), false);
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_TRUE(r.layout_variants.empty());
  EXPECT_EQ(r.layout_counts.forward_calls, 0);
}

TEST_P(LayoutVariants, CorrectOpPassesAndTheReportListsVariantsWithTheirCostApart) {
  const auto with = check("cube", {leaf({2, 3})}, GetParam());
  const auto without = check("cube", {leaf({2, 3})}, GetParam(), false);
  ASSERT_TRUE(with.passed) << with.message();
  // 2-D input and output: strided and transposed each.
  EXPECT_THAT(with.layout_variants,
              ::testing::ElementsAre("x: strided", "x: transposed", HasSubstr(": strided"),
                                     HasSubstr(": transposed")));
  EXPECT_THAT(with.layout_variants[2], HasSubstr("grad_output"));
  // One forward per input variant; one VJP for the reference grads, one per variant.
  EXPECT_EQ(with.layout_counts.forward_calls, 2);
  EXPECT_EQ(with.layout_counts.vjp_calls, 5);
  // The first-order counts stay those of the checks torch makes.
  EXPECT_EQ(with.counts.forward_calls, without.counts.forward_calls);
  EXPECT_EQ(with.counts.vjp_calls, without.counts.vjp_calls);
  EXPECT_THAT(with.message(), HasSubstr("layout variants: 4 (x: strided, x: transposed"));
  const auto j = nlohmann::json::parse(gc::to_json(with));
  EXPECT_EQ(j.at("layout_variants").size(), 4U);
  EXPECT_EQ(j.at("layout_forward_calls"), 2);
}

TEST_P(LayoutVariants, ZeroDimAndSingleElementDimsHaveNoTransposedVariant) {
  const auto scalar = check("cube", {leaf({})}, GetParam());
  EXPECT_TRUE(scalar.passed) << scalar.message();
  EXPECT_TRUE(scalar.layout_variants.empty());
  const auto column = check("cube", {leaf({3, 1})}, GetParam());
  EXPECT_TRUE(column.passed) << column.message();
  EXPECT_THAT(column.layout_variants, ::testing::Contains("x: strided"));
}

INSTANTIATE_TEST_SUITE_P(Modes, LayoutVariants, ::testing::Values(gc::Mode::kSlow, gc::Mode::kFast),
                         [](const auto& info) {
                           return std::string(info.param == gc::Mode::kSlow ? "Slow" : "Fast");
                         });

}  // namespace
