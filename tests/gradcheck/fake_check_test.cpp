// The harness's fake-kernel check (GradcheckOptions::check_fake_kernel): a fake kernel that
// disagrees with the real one in shape, dtype, strides or device fails the check with a report
// naming the output and both values; a correct one passes; without a fake kernel nothing runs.

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

namespace {

namespace gc = customop::gradcheck;
using ::testing::HasSubstr;

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  double unused;
};

// y = 2 x with the given fake kernel (or none), a backward formula, and CPU kernel.
customop::Op<XArgs>& twice(const std::string& name, std::function<at::Tensor(const XArgs&)> fake) {
  auto& op = customop::define<XArgs>("gc_fake::" + name + "(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x * 2; });
  if (fake) op.impl_fake(std::move(fake));
  op.impl_autograd([](const XArgs&, const at::Tensor&) { return XSaved{0}; },
                   [](const XSaved&, const at::Tensor& g) {
                     return customop::Grads{{"x", g * 2}};
                   });
  return op;
}

gc::GradcheckResult check(const customop::Op<XArgs>& op, const at::Tensor& x) {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  return gc::gradcheck(op, XArgs{x.detach().requires_grad_()}, o);
}

std::string fake_failures(const gc::GradcheckResult& r) {
  std::string out;
  for (const auto& f : r.failures) {
    if (f.check == gc::Check::kFakeKernel) out += f.headline + "\n" + f.detail + "\n";
  }
  return out;
}

const at::Tensor kX = at::randn({4, 6}, at::kDouble).t();  // non-contiguous [6, 4]

TEST(FakeCheck, CorrectFakeKernelPasses) {
  // a.x * 2 keeps the input's (transposed) layout, as empty_like does.
  auto& op = twice("correct", [](const XArgs& a) { return at::empty_like(a.x); });
  const auto r = check(op, kX);
  EXPECT_TRUE(r.passed) << r.message();
  EXPECT_EQ(fake_failures(r), "");
}

TEST(FakeCheck, WrongShapeFailsNamingOutputAndBothShapes) {
  auto& op = twice("wrong_shape", [](const XArgs& a) { return at::empty({3}, a.x.options()); });
  const auto r = check(op, kX);
  EXPECT_FALSE(r.passed);
  const std::string f = fake_failures(r);
  EXPECT_THAT(f, HasSubstr("Fake kernel mismatch for output 0: shape"));
  EXPECT_THAT(f, HasSubstr("fake (Meta) kernel: [3]"));
  EXPECT_THAT(f, HasSubstr("real kernel:        [6, 4]"));
  EXPECT_THAT(r.message(), HasSubstr("Fake kernel mismatch"));
}

TEST(FakeCheck, WrongDtypeFails) {
  auto& op = twice("wrong_dtype", [](const XArgs& a) {
    return at::empty_like(a.x, a.x.options().dtype(at::kFloat));
  });
  const std::string f = fake_failures(check(op, kX));
  EXPECT_THAT(f, HasSubstr("dtype"));
  EXPECT_THAT(f, HasSubstr("fake (Meta) kernel: Float"));
  EXPECT_THAT(f, HasSubstr("real kernel:        Double"));
}

TEST(FakeCheck, WrongStridesFail) {
  // A contiguous fake output, where the real kernel keeps the input's transposed layout.
  auto& op = twice("wrong_strides",
                   [](const XArgs& a) { return at::empty_symint(a.x.sym_sizes(), a.x.options()); });
  const std::string f = fake_failures(check(op, kX));
  EXPECT_THAT(f, HasSubstr("Fake kernel mismatch for output 0: strides"));
  EXPECT_THAT(f, HasSubstr("fake (Meta) kernel: [4, 1]"));
  EXPECT_THAT(f, HasSubstr("real kernel:        [1, 6]"));
}

TEST(FakeCheck, FakeKernelThatRaisesFails) {
  auto& op = twice("raises", [](const XArgs&) -> at::Tensor { TORCH_CHECK(false, "boom"); });
  const std::string f = fake_failures(check(op, kX));
  EXPECT_THAT(f, HasSubstr("Fake kernel raised"));
  EXPECT_THAT(f, HasSubstr("boom"));
}

TEST(FakeCheck, OffByOptionOrWithoutAFakeKernel) {
  auto& wrong =
      twice("wrong_shape_off", [](const XArgs& a) { return at::empty({3}, a.x.options()); });
  gc::GradcheckOptions o;
  o.raise_exception = false;
  o.check_fake_kernel = false;
  EXPECT_TRUE(gc::gradcheck(wrong, XArgs{kX.detach().requires_grad_()}, o).passed);
  auto& none = twice("no_fake", nullptr);
  EXPECT_EQ(fake_failures(check(none, kX)), "");
}

}  // namespace
