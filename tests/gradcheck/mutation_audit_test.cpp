// The mutation audit (GradcheckOptions::check_mutation) on planted bugs and their correct
// twins: an undeclared write (customop op and a plain torch::Library op), a declared write
// outside the argument's view, an output aliasing its input, a declared write that never
// happens; and an op that declares its writes, which gets the audit instead of the gradient
// checks.

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace {

namespace gc = customop::gradcheck;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};

std::string messages(const gc::GradcheckResult& r) {
  std::string all;
  for (const auto& f : r.failures) {
    if (f.check == gc::Check::kMutation) all += f.headline + "\n" + f.detail + "\n";
  }
  return all;
}
std::string notes(const gc::GradcheckResult& r) {
  std::string all;
  for (const auto& n : r.notes) all += n + "\n";
  return all;
}

const customop::OpCore& define_unary(const char* schema, bool write_input, bool alias_output) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, [write_input, alias_output](const XArgs& a) {
    if (write_input) a.x.mul_(2);  // the planted bug: a write the schema does not declare
    return alias_output ? a.x : a.x * 2;
  });
  op.impl_autograd([](const XArgs&, const at::Tensor&) { return XArgs{}; },
                   [](const XArgs&, const at::Tensor& g) {
                     return customop::Grads{{"x", g * 2}};
                   });
  return op;
}

// Reports, not exceptions: the tests read the failures.
gc::GradcheckOptions report_only() {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  return o;
}

torch::jit::Stack leaf_sample() {
  return {at::tensor({0.5, -1.5, 2.0}, at::kDouble).requires_grad_()};
}

TEST(MutationAudit, UndeclaredWriteFailsNamingArgumentAndElement) {
  const auto& op = define_unary("gc_mut::writes_input(Tensor x) -> Tensor", true, false);
  const auto r = gc::gradcheck(op, leaf_sample(), report_only());
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(r.failed(gc::Check::kMutation));
  EXPECT_THAT(messages(r),
              AllOf(HasSubstr("undeclared write: argument 'x'"), HasSubstr("element [0]: 0.5 -> 1"),
                    HasSubstr("3 element(s) changed")));
}

TEST(MutationAudit, CorrectTwinPassesTheAudit) {
  const auto& op = define_unary("gc_mut::twin(Tensor x) -> Tensor", false, false);
  const auto r = gc::gradcheck(op, leaf_sample(), report_only());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_FALSE(r.failed(gc::Check::kMutation));
  EXPECT_THAT(notes(r), HasSubstr("mutation: 1 tensor argument(s) audited byte for byte; "
                                  "written: none"));
}

// A plain torch::Library op (not customop's), `ns::name(Tensor x) -> Tensor`, with `fn` as its
// CPU kernel; defined on the first call.
c10::OperatorHandle plain_op(const std::string& ns, const std::string& name,
                             at::Tensor (*fn)(const at::Tensor&)) {
  const std::string qualified = ns + "::" + name;
  if (auto h = c10::Dispatcher::singleton().findSchema({qualified, ""})) return *h;
  static std::vector<std::unique_ptr<torch::Library>> libs;
  libs.push_back(
      std::make_unique<torch::Library>(torch::Library::DEF, ns, std::nullopt, __FILE__, __LINE__));
  libs.back()->def((name + "(Tensor x) -> Tensor").c_str());
  libs.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::CPU,
                                                  __FILE__, __LINE__));
  libs.back()->impl(name.c_str(), fn);
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "");
}

// A plain TORCH_LIBRARY op whose output is a view of its input: the audit names it. (A
// customop op cannot get that far: its kernel's return is refused by the core, and the
// harness reports that error.)
at::Tensor plain_returns_view(const at::Tensor& x) { return x.view({-1}); }

TEST(MutationAudit, OutputAliasingItsInputFails) {
  const auto h = plain_op("gc_mut_alias", "returns_view", &plain_returns_view);
  gc::GradcheckOptions o = report_only();
  o.check_mutation = true;
  const auto r = gc::gradcheck(h, leaf_sample(), o);
  EXPECT_THAT(messages(r),
              HasSubstr("undeclared alias: output 0 shares storage with argument 'x'"));

  const auto& op = define_unary("gc_mut::returns_input(Tensor x) -> Tensor", false, true);
  const auto refused = gc::gradcheck(op, leaf_sample(), o);
  EXPECT_FALSE(refused.passed);
  EXPECT_THAT(refused.message(), HasSubstr("gc_mut::returns_input: the CPU kernel at"));
  EXPECT_THAT(refused.message(), HasSubstr("returned output 0 sharing memory with argument 'x'"));
}

TEST(MutationAudit, AuditCanBeTurnedOff) {
  const auto& op = define_unary("gc_mut::writes_unaudited(Tensor x) -> Tensor", true, false);
  gc::GradcheckOptions o = report_only();
  o.check_mutation = false;
  const auto r = gc::gradcheck(op, leaf_sample(), o);
  EXPECT_FALSE(r.failed(gc::Check::kMutation));
  EXPECT_THAT(notes(r), HasSubstr("mutation: not checked (check_mutation off)"));
}

// A plain TORCH_LIBRARY-style op (not customop's) with the same undeclared write: the audit
// works on any dispatcher op.
at::Tensor plain_writes(const at::Tensor& x) {
  x.add_(1);
  return x + 1;
}

TEST(MutationAudit, WorksOnAnyDispatcherOp) {
  const auto h = plain_op("gc_mut_plain", "writes", &plain_writes);
  gc::GradcheckOptions o = report_only();
  const auto r = gc::gradcheck(h, {at::tensor({1.0, 2.0}, at::kDouble).requires_grad_()}, o);
  EXPECT_THAT(messages(r),
              AllOf(HasSubstr("undeclared write: argument 'x'"), HasSubstr("element [0]: 1 -> 2")));
}

struct AccArgs {
  customop::MutableTensor acc;
  at::Tensor x;
};

const customop::OpCore& define_acc(const char* name, int mode) {
  auto& op =
      customop::define<AccArgs, void>(std::string(name) + "(Tensor(a!) acc, Tensor x) -> ()");
  op.impl(c10::DeviceType::CPU, [mode](const AccArgs& a) {
    if (mode == 0) a.acc.add_(a.x);  // correct
    if (mode == 1) {                 // planted: writes acc's memory as if contiguous
      double* p = a.acc.data_ptr<double>();
      const double* q = a.x.contiguous().const_data_ptr<double>();
      for (int64_t i = 0; i < a.acc.numel(); ++i) p[i] += q[i];
    }
    // mode 2: the declared write never happens
    if (mode == 3) TORCH_CHECK(false, "acc_throws: planted kernel error");
  });
  return op;
}

torch::jit::Stack strided_acc_sample() {
  const auto base = at::zeros({3, 2}, at::kDouble);
  return {base.select(1, 0), at::tensor({1.0, 2.0, 3.0}, at::kDouble)};  // acc strided [3]
}

TEST(MutationAudit, DeclaredWriteGetsTheAuditInsteadOfGradientChecks) {
  const auto& op = define_acc("gc_mut::acc_ok", 0);
  const auto r = gc::gradcheck(op, strided_acc_sample(), report_only());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_TRUE(r.pairs.empty());
  EXPECT_THAT(notes(r), AllOf(HasSubstr("no gradient check: gc_mut::acc_ok writes arguments"),
                              HasSubstr("written: 'acc' (declared)")));
}

TEST(MutationAudit, DeclaredWriteOutsideTheViewFails) {
  const auto& op = define_acc("gc_mut::acc_contiguous_bug", 1);
  const auto r = gc::gradcheck(op, strided_acc_sample(), report_only());
  EXPECT_FALSE(r.passed);
  EXPECT_THAT(messages(r), AllOf(HasSubstr("write outside the view: argument 'acc'"),
                                 HasSubstr("storage element 1 (outside its view): 0 -> 2")));
}

TEST(MutationAudit, DeclaredWriteThatNeverHappensIsANote) {
  const auto& op = define_acc("gc_mut::acc_never", 2);
  const auto r = gc::gradcheck(op, strided_acc_sample(), report_only());
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_THAT(notes(r), HasSubstr("argument 'acc' is declared written (Tensor(a!)) but this "
                                  "sample left it unchanged"));
}

TEST(MutationAudit, MutatingOpThatRaisesFailsWithItsMessage) {
  const auto& op = define_acc("gc_mut::acc_throws", 3);
  const auto r = gc::gradcheck(op, strided_acc_sample(), report_only());
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(r.failed(gc::Check::kForwardError));
  EXPECT_THAT(r.message(), HasSubstr("acc_throws: planted kernel error"));
}

TEST(MutationAudit, AuditedCallLeavesTheCallersTensorsAlone) {
  const auto& op = define_acc("gc_mut::acc_private", 0);
  const auto sample = strided_acc_sample();
  const auto acc = sample[0].toTensor();
  gc::gradcheck(op, sample, report_only());
  EXPECT_TRUE(at::equal(acc, at::zeros({3}, at::kDouble)));  // the audit wrote a private copy
}

}  // namespace
