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
  op.impl_save_for_backward([](const ScaleArgs& in, const at::Tensor&) { return ScaleSaved{in.alpha}; });
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
