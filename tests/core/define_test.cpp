#include <customop/customop.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

struct ScaleArgs {
  at::Tensor x;
  double alpha;
};
struct ScaleSaved {
  double alpha;
};

TEST(Define, ScaleForwardBackward) {
  auto& op = customop::define<ScaleArgs>("smoke::scale(Tensor x, float alpha) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  op.impl_save_for_backward(
      [](const ScaleArgs& in, const at::Tensor&) { return ScaleSaved{in.alpha}; });
  op.impl_backward([](const ScaleSaved& s, const at::Tensor& grad) {
    return customop::Grads{{"x", grad * s.alpha}};
  });
  auto t = torch::randn({3}, torch::kDouble).requires_grad_();
  at::Tensor y = op(ScaleArgs{.x = t, .alpha = 2.0});
  EXPECT_TRUE(torch::allclose(y, t.detach() * 2));
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(t.grad(), torch::full({3}, 2.0, torch::kDouble)));
}

}  // namespace

#include <customop/static_schema.h>

namespace {
struct StaticArgs {
  at::Tensor x;
  std::optional<at::Tensor> mask;
  int64_t dim;
  double eps;
  std::vector<at::Tensor> xs;
};

TEST(StaticSchema, DeducesRetAndRegisters) {
  auto& op = customop::define<StaticArgs,
                              "smoke::static_op(Tensor x, Tensor? mask, int dim=1, "
                              "*, float eps=1e-6, Tensor[] xs) -> (Tensor, int)">();
  static_assert(
      std::is_same_v<std::decay_t<decltype(op)>::ReturnType, std::tuple<at::Tensor, int64_t>>);
  op.impl(c10::DeviceType::CPU, [](const StaticArgs& a) {
    return std::tuple<at::Tensor, int64_t>{a.x + a.eps, a.dim + static_cast<int64_t>(a.xs.size())};
  });
  auto [y, n] = op(StaticArgs{.x = torch::zeros({2}),
                              .mask = std::nullopt,
                              .dim = 3,
                              .eps = 0.5,
                              .xs = {torch::ones({1}), torch::ones({1})}});
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(torch::equal(y, torch::full({2}, 0.5)));
}
}  // namespace
