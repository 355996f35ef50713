// The low-precision rule at the edges of the dtype (issue 34): values below the normal range
// (underflow to 0 or to a subnormal), and a constant every element shares, rounded once.
// options.h: kLowPrecisionUnderflowFactor, kLowPrecisionSharedRounding.

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>

namespace {

namespace gc = customop::gradcheck;

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

gc::BoxedFunction boxed(const std::string& name, std::size_t inputs, Fn f) {
  gc::BoxedFunction fn;
  fn.name = name;
  for (std::size_t k = 0; k < inputs; ++k) fn.arg_names.push_back("x" + std::to_string(k));
  fn.return_names = {"y"};
  fn.call = [inputs, f](torch::jit::Stack& s) {
    std::vector<at::Tensor> xs;
    for (std::size_t k = 0; k < inputs; ++k) xs.push_back(s[s.size() - inputs + k].toTensor());
    s.resize(s.size() - inputs);
    s.emplace_back(f(xs));
  };
  return fn;
}

at::Tensor leaf(std::vector<int64_t> shape, double scale, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale + scale)
      .to(dtype)
      .requires_grad_(true);
}

gc::GradcheckOptions no_raise(uint64_t seed) {
  gc::GradcheckOptions o;
  o.raise_exception = false;
  o.seed = seed;
  o.mode = gc::Mode::kFast;
  return o;
}

constexpr at::ScalarType kLow[] = {at::kBFloat16, at::kHalf};

// x * y whose exact value is below the dtype's normal range (~1e-56 in bfloat16, ~1e-9 in
// float16): the kernel's 0 or subnormal is right to the subnormal spacing.
TEST(LowPrecisionRules, AProductThatUnderflowsIsNoFailure) {
  const auto mul = boxed("mul", 2, [](const auto& xs) { return xs[0] * xs[1]; });
  for (auto dtype : kLow) {
    const double scale = dtype == at::kBFloat16 ? 1e-28 : 3e-5;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const torch::jit::Stack args{leaf({4, 8}, scale, dtype, seed),
                                   leaf({4, 8}, scale, dtype, seed + 7)};
      const auto r = gc::gradcheck(mul, args, no_raise(seed));
      EXPECT_TRUE(r.passed) << c10::toString(dtype) << " seed " << seed << "\n" << r.message();
    }
  }
}

// A float16 loss that is itself a subnormal.
TEST(LowPrecisionRules, ASubnormalLossIsNoFailure) {
  const auto sum = boxed("sum", 1, [](const auto& xs) { return xs[0].sum(); });
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const torch::jit::Stack args{leaf({3}, 4e-8, at::kHalf, seed)};
    const auto r = gc::gradcheck(sum, args, no_raise(seed));
    EXPECT_TRUE(r.passed) << "seed " << seed << "\n" << r.message();
  }
}

// Every element equal to pi rounded to the dtype (fp16's pi is 3.1e-4 relative below pi):
// one rounding every element shares is not a bias of the kernel. A 1 % error in every
// element still is.
TEST(LowPrecisionRules, ARoundedConstantIsNoBiasButOnePercentIs) {
  const auto shifted =
      boxed("x_times_0_plus_pi", 1, [](const auto& xs) { return xs[0] * 0.25 + M_PI; });
  const auto scaled = boxed("x_times_1_01", 1, [](const auto& xs) {
    // values of 2 x, derivative 1 % too large
    const at::Tensor y = xs[0] * 2.0;
    return y + 0.01 * (y - y.detach());
  });
  for (auto dtype : kLow) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const torch::jit::Stack args{leaf({16, 16}, 1e-3, dtype, seed)};
      const auto ok = gc::gradcheck(shifted, args, no_raise(seed));
      EXPECT_TRUE(ok.passed) << c10::toString(dtype) << " seed " << seed << "\n" << ok.message();
      const torch::jit::Stack args2{leaf({16, 16}, 1.0, dtype, seed)};
      const auto bad = gc::gradcheck(scaled, args2, no_raise(seed));
      EXPECT_TRUE(bad.failed(gc::Check::kLowPrecision) || bad.failed(gc::Check::kJacobian))
          << c10::toString(dtype) << " seed " << seed << "\n"
          << bad.message();
    }
  }
}

}  // namespace
