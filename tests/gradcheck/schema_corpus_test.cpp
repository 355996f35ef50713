// The schema corpus (mutants/schema_bugs.cpp): the harness catches every planted bug it can see
// from C++ with the check its entry names, and passes every correct twin. The locked size is
// the Python API's check (C++ meta tensors have no symbolic sizes): here that op must pass, and
// tests/python/test_schema_corpus.py catches it.

#include "mutants/corpus.h"
#include "support/gradcheck_samples.h"

#include <customop/gradcheck/gradcheck.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace gc = customop::gradcheck;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

gc::GradcheckOptions report_only() {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  return o;
}

// The entry's samples (its twin's for an op registered without customop), float64 on CPU.
std::vector<customop::Sample> samples_of(const customop_mutants::SchemaCorpusEntry& e) {
  const customop::OpCore* op = customop::find_op(e.op);
  if (op == nullptr) op = customop::find_op(e.twin);
  if (op == nullptr) {  // an op and twin registered by hand (scale3): one matrix
    at::manual_seed(0);
    return {{"matrix [3, 4]", {at::randn({3, 4}, at::kDouble).requires_grad_()}}};
  }
  return customop::testing::differentiable_samples(*op, c10::Device(at::kCPU), at::kDouble, 0);
}

c10::OperatorHandle handle_of(const std::string& name) {
  const auto h = c10::Dispatcher::singleton().findSchema({name, ""});
  TORCH_CHECK(h.has_value(), name, " is not registered");  // a test failure, not a crash
  return *h;
}

std::string failed_checks(const gc::GradcheckResult& r) {
  std::string out;
  for (const auto& f : r.failures) out += std::string(gc::check_name(f.check)) + " ";
  return out;
}

gc::GradcheckResult check_first_sample(const std::string& name) {
  for (const auto& e : customop_mutants::schema_corpus()) {
    if (e.op == name)
      return gc::gradcheck(handle_of(name), samples_of(e).at(0).args, report_only());
  }
  ADD_FAILURE() << name << " is not in the schema corpus";
  return {};
}

TEST(SchemaCorpus, EveryBugCaughtByItsCheckAndNoFalseAlarm) {
  int bugs = 0;
  for (const auto& e : customop_mutants::schema_corpus()) {
    SCOPED_TRACE(e.op);
    const auto samples = samples_of(e);
    ASSERT_FALSE(samples.empty());
    for (const auto& s : samples) {
      const auto r = gc::gradcheck(handle_of(e.op), s.args, report_only());
      if (e.expected.empty() || e.expected == "shape_lock") {
        EXPECT_TRUE(r.passed) << r.message();
      } else {
        EXPECT_FALSE(r.passed);
        EXPECT_THAT(failed_checks(r), HasSubstr(e.expected)) << r.message();
        ++bugs;
      }
    }
  }
  EXPECT_EQ(bugs, 9);
}

TEST(SchemaCorpus, InplaceVariantThatLosesTheGradNamesArgumentAndElement) {
  const auto r = check_first_sample("customop_mutants::halve_loses_grad");
  EXPECT_THAT(r.message(),
              AllOf(HasSubstr("customop_mutants::halve_loses_grad_ gives a grad of argument 'x' "
                              "that disagrees with the functional op's"),
                    HasSubstr("element [0, 0]")));
  // The twin, differentiable through halve's backward: the grads agree.
  const auto twin = check_first_sample("customop_mutants::halve");
  EXPECT_TRUE(twin.passed) << twin.message();
  EXPECT_THAT(twin.notes, Contains("inplace variant: customop_mutants::halve_'s grads of 'x' "
                                   "match the functional op's (VJP, same cotangent)"));
}

TEST(SchemaCorpus, MissingVersionBumpNamesTheArgument) {
  const auto r = check_first_sample("customop_mutants::add_one_no_bump_");
  EXPECT_THAT(r.message(),
              AllOf(HasSubstr("missing version bump: argument 'x'"), HasSubstr("ADInplaceOrView")));
}

TEST(SchemaCorpus, UndeclaredWriteNamesTheArgument) {
  const auto r = check_first_sample("customop_mutants::double_it_writes_input");
  EXPECT_THAT(r.message(), HasSubstr("undeclared write: argument 'x'"));
}

TEST(SchemaCorpus, FakeStridesWrongOnOtherShapesFoundBySweep) {
  const auto r = check_first_sample("customop_mutants::tall_copy_fake_contiguous");
  EXPECT_THAT(r.message(), AllOf(HasSubstr("strides (on a variant of the sample: every dim of "
                                           "size 3 (first: 'x' dim 0) set to 6)"),
                                 HasSubstr("[4, 1]"), HasSubstr("[1, 6]")));
}

TEST(SchemaCorpus, OutOverloadThatDisagreesNamesArgumentAndElement) {
  const auto r = check_first_sample("customop_mutants::scale3_out_off");
  EXPECT_THAT(r.message(),
              AllOf(HasSubstr("customop_mutants::scale3_out_off.out disagrees with the functional "
                              "op in out argument 'out' with out buffers pre-filled with NaN"),
                    HasSubstr("element [0, 0]"), HasSubstr("12 of 12 elements differ")));
}

TEST(SchemaCorpus, OutKernelThatReadsItsBufferCaughtByThePoison) {
  const auto r = check_first_sample("customop_mutants::scale3_out_reads");
  EXPECT_THAT(r.message(), AllOf(HasSubstr("pre-filled with NaN"),
                                 HasSubstr("a kernel that reads its out buffer does this")));
}

TEST(SchemaCorpus, OutOverloadsOfCorrectOpsAgreeOnEveryBufferKind) {
  for (const char* name : {"customop_mutants::scale3", "customop_mutants::pad_row"}) {
    const auto r = check_first_sample(name);
    std::string notes;
    for (const auto& n : r.notes) notes += n + "\n";
    EXPECT_THAT(notes, HasSubstr(std::string("out variant: ") + name +
                                 ".out agreed with the functional op on 5 out buffer kinds"))
        << r.message();
  }
}

TEST(SchemaCorpus, SweepCountedInTheNotes) {
  const auto r = check_first_sample("customop_mutants::tall_copy");
  std::string notes;
  for (const auto& n : r.notes) notes += n + "\n";
  // [3, 4] float64: sizes 3 and 4, each to 0, 1 and n + 3; float32, bfloat16, float16; then
  // transposed, then offset.
  EXPECT_THAT(notes, HasSubstr("fake kernel: agreed with the real kernel on the sample and on 11 "
                               "of 11 variants"));
}

TEST(SchemaCorpus, FakeDtypeWrongOnLowPrecisionFoundBySweep) {
  const auto r = check_first_sample("customop_mutants::halve_upcasts");
  EXPECT_THAT(r.message(), AllOf(HasSubstr("dtype (on a variant of the sample: every floating "
                                           "tensor as BFloat16)"),
                                 HasSubstr("Float")));
}

}  // namespace
