// The C++ transforms check (GradcheckOptions::check_transforms, transforms_check.cpp) on the
// transforms corpus (mutants/transform_bugs.cpp): every planted bug fails it, naming the
// transform, and every correct twin passes it, in float64 and float32, with torch's vmap
// fallback off. The same corpus through the Python check: tests/python/test_transforms_corpus.py.

#include "mutants/corpus.h"
#include "support/gradcheck_samples.h"

#include <customop/gradcheck/gradcheck.h>

#include <ATen/functorch/BatchedFallback.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace gc = customop::gradcheck;
using ::testing::Contains;
using ::testing::HasSubstr;

struct Case {
  const char* op;
  const char* twin;  // "" for a correct op
  const char* step;  // the transform that catches the bug
};

const Case kCases[] = {
    {"customop_mutants::xs_mul", "", ""},
    {"customop_mutants::center", "", ""},
    {"customop_mutants::swap01", "", ""},
    {"customop_mutants::swap01_general", "", ""},
    {"customop_mutants::xs_mul_wrong_jvp", "customop_mutants::xs_mul", "jvp"},
    {"customop_mutants::center_rows_rule", "customop_mutants::center", "vmap over 'x'"},
    {"customop_mutants::swap01_rows_rule", "customop_mutants::swap01", "vmap over 'x'"},
    {"customop_mutants::swap01_general_wrong_dims", "customop_mutants::swap01_general",
     "vmap over 'x'"},
    {"customop_mutants::xs_mul_backward_reads_memory", "customop_mutants::xs_mul", "vmap(vjp)"},
};

std::vector<gc::GradcheckResult> check(const std::string& name, c10::ScalarType dtype,
                                       bool transforms = true) {
  (void)customop_mutants::corpus();  // registers the ops
  const customop::OpCore* op = customop::find_op(name);
  if (op == nullptr) throw std::runtime_error("not registered: " + name);
  std::vector<gc::GradcheckResult> out;
  for (const auto& s :
       customop::testing::differentiable_samples(*op, c10::Device(at::kCPU), dtype, 3)) {
    gc::GradcheckOptions o;
    o.raise_exception = false;
    o.check_transforms = transforms;
    out.push_back(gc::gradcheck(*op, s.args, o));
  }
  return out;
}

std::string failures(const gc::GradcheckResult& r) {
  std::string s;
  for (const auto& f : r.failures) {
    s += std::string(gc::check_name(f.check)) + ": " + f.headline + "\n" + f.detail + "\n";
  }
  return s;
}

class TransformsCorpus : public ::testing::TestWithParam<c10::ScalarType> {};

TEST_P(TransformsCorpus, EveryBugIsCaughtNamingTheTransformAndEveryTwinPasses) {
  for (const Case& c : kCases) {
    for (const auto& r : check(c.op, GetParam())) {
      SCOPED_TRACE(c.op);
      if (std::string(c.twin).empty()) {
        EXPECT_TRUE(r.passed) << failures(r);
        EXPECT_THAT(r.notes, Contains(HasSubstr("transforms: passed jvp, vmap, vmap(vjp)")));
        continue;
      }
      ASSERT_FALSE(r.passed);
      ASSERT_EQ(r.failures.size(), 1u) << failures(r);
      EXPECT_EQ(r.failures[0].check, gc::Check::kTransforms);
      EXPECT_THAT(r.failures[0].headline,
                  HasSubstr(std::string(c.op) + " fails torch.func's " + c.step));
      // Off, the bug goes unseen: the gradient checks pass it (forward and backward are right).
      for (const auto& off : check(c.op, GetParam(), false)) EXPECT_TRUE(off.passed) << c.op;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TransformsCorpus, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) {
                           return info.param == at::kDouble ? "Float64" : "Float32";
                         });

TEST(TransformsCheck, WhatTheOpLacksIsANoteAndTheFallbackIsRestored) {
  // cube has a backward but no JVP and no batching rule.
  at::functorch::setVmapFallbackEnabled(true);
  for (const auto& r : check("customop_mutants::cube", at::kDouble)) {
    EXPECT_TRUE(r.passed) << failures(r);
    EXPECT_THAT(r.notes, Contains(HasSubstr("transforms: forward-mode AD: no JVP")));
    EXPECT_THAT(r.notes, Contains(HasSubstr("transforms: vmap: no batching rule")));
  }
  EXPECT_TRUE(at::functorch::isVmapFallbackEnabled());
}

TEST(TransformsCheck, FailureDetailNamesTheElement) {
  const auto r = check("customop_mutants::center_rows_rule", at::kDouble).at(0);
  ASSERT_FALSE(r.passed);
  EXPECT_THAT(r.failures[0].detail, HasSubstr("output 0 element ["));
  EXPECT_THAT(r.failures[0].detail, HasSubstr("passed before it: jvp"));
}

}  // namespace
