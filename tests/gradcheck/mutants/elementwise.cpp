// Elementwise ops of the corpus: scale, cube, relu, f32_softplus, and their mutants.

#include "mutants/register.h"

#include <customop/customop.h>

namespace customop_mutants::detail {

namespace {

using customop::Grads;

struct ScaleArgs {
  at::Tensor x;
  double alpha;
};
struct ScaleSaved {
  double alpha;
};

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  at::Tensor x;
};

std::vector<std::pair<std::string, ScaleArgs>> scale_samples(c10::Device d, c10::ScalarType t) {
  return {{"vector [4]", {sample({4}, d, t), 5.0}},
          {"transposed [3, 2]", {sample({2, 3}, d, t).t(), -1.5}}};
}

std::vector<std::pair<std::string, XArgs>> x_samples(c10::Device d, c10::ScalarType t) {
  return {{"vector [4]", {sample({4}, d, t)}}, {"transposed [3, 2]", {sample({2, 3}, d, t).t()}}};
}

// Contiguous inputs only, as many users' samples are.
std::vector<std::pair<std::string, XArgs>> contiguous_x_samples(c10::Device d, c10::ScalarType t) {
  return {{"vector [4]", {sample({4}, d, t)}}, {"matrix [2, 3]", {sample({2, 3}, d, t)}}};
}

std::vector<std::pair<std::string, XArgs>> x_samples_away_from_zero(c10::Device d,
                                                                    c10::ScalarType t) {
  return {{"vector [5] away from the kink", {sample({5}, d, t, true)}},
          {"sliced [2, 3] away from the kink", {sample({2, 6}, d, t, true).slice(1, 0, 6, 2)}}};
}

void define_scale(const char* schema, at::Tensor (*backward)(double, const at::Tensor&),
                  customop::OutputDifferentiability od = {}) {
  auto& op = customop::define<ScaleArgs>(schema);
  auto kernel = [](const ScaleArgs& a) { return a.x * a.alpha; };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward(
      [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
  op.impl_backward(
      [backward](const ScaleSaved& s, const at::Tensor& g) {
        return Grads{{"x", backward(s.alpha, g)}};
      },
      std::move(od));
  op.samples(&scale_samples);
}

void define_cube(const char* schema, at::Tensor (*backward)(const at::Tensor&, const at::Tensor&)) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [](const XArgs& a) { return a.x * a.x * a.x; };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
  op.impl_backward([backward](const XSaved& s, const at::Tensor& g) {
    return Grads{{"x", backward(s.x, g)}};
  });
  op.samples(&x_samples);
}

at::Tensor f32_softplus_kernel(const XArgs& a) {
  TORCH_CHECK_TYPE(a.x.scalar_type() == at::kFloat,
                   "f32_softplus: x must be float32 (the kernel has no other dtype), but got ",
                   a.x.scalar_type());
  return at::log1p(at::exp(a.x));
}

std::vector<std::pair<std::string, XArgs>> f32_samples(c10::Device d, c10::ScalarType t) {
  if (t != at::kFloat) return {};
  return {{"vector [4]", {sample({4}, d, t)}},
          {"transposed [3, 2]", {sample({2, 3}, d, t).t() * 2}}};
}

void define_f32_softplus(const char* schema, double factor) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, &f32_softplus_kernel);
  op.impl(c10::DeviceType::CUDA, &f32_softplus_kernel);
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
  op.impl_backward([factor](const XSaved& s, const at::Tensor& g) {
    return Grads{{"x", g * at::sigmoid(s.x) * factor}};
  });
  op.samples(&f32_samples);
}

}  // namespace

void register_elementwise() {
  static const bool done = [] {
    // f(x) = alpha * x.
    define_scale("customop_mutants::scale(Tensor x, float alpha) -> Tensor",
                 [](double alpha, const at::Tensor& g) { return g * alpha; });
    // Adds the constant instead of scaling by grad_output.
    define_scale("customop_mutants::scale_ignores_grad_output(Tensor x, float alpha) -> Tensor",
                 [](double alpha, const at::Tensor& g) { return g + alpha; });
    // Every Jacobian entry off by +0.01 (still linear in grad_output).
    define_scale("customop_mutants::scale_off_by_hundredth(Tensor x, float alpha) -> Tensor",
                 [](double alpha, const at::Tensor& g) { return g * alpha + 0.01 * g.sum(); });
    // The output is marked non-differentiable, yet it depends on x.
    define_scale("customop_mutants::scale_disconnected(Tensor x, float alpha) -> Tensor",
                 [](double alpha, const at::Tensor& g) { return g * alpha; }, {false});

    // f(x) = x^3.
    define_cube("customop_mutants::cube(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) { return 3 * x * x * g; });
    define_cube("customop_mutants::cube_sign_flip(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) { return -3 * x * x * g; });
    define_cube("customop_mutants::cube_missing_factor(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) { return x * x * g; });
    define_cube("customop_mutants::cube_scale_1pct(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) { return 3.03 * x * x * g; });
    // As an atomicAdd reduction: each run rounds differently (relative 1e-6).
    define_cube("customop_mutants::cube_jitter(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) {
                  return 3 * x * x * g * (1 + 1e-6 * at::randn_like(x));
                });
    // Treats an all-zero grad_output (what an undefined output grad becomes) as impossible.
    define_cube("customop_mutants::cube_crash_on_undefined(Tensor x) -> Tensor",
                [](const at::Tensor& x, const at::Tensor& g) {
                  TORCH_CHECK(g.ne(0).any().item<bool>(),
                              "cube_crash_on_undefined: grad_output is undefined (all zeros); "
                              "this backward cannot handle it");
                  return 3 * x * x * g;
                });

    // The backward reads grad_output's memory as if it were contiguous (data_ptr() without the
    // strides): right for every contiguous grad_output, so finite differences never see it.
    define_scale("customop_mutants::scale_contiguous_grad_output(Tensor x, float alpha) -> Tensor",
                 [](double alpha, const at::Tensor& g) {
                   return at::from_blob(g.data_ptr(), g.sizes(), g.options()).clone() * alpha;
                 });

    // The forward reads its input's memory as if it were contiguous.
    auto& cube_flat =
        customop::define<XArgs>("customop_mutants::cube_contiguous_input(Tensor x) -> Tensor");
    auto cube_flat_kernel = [](const XArgs& a) {
      const at::Tensor x = at::from_blob(a.x.data_ptr(), a.x.sizes(), a.x.options()).clone();
      return x * x * x;
    };
    cube_flat.impl(c10::DeviceType::CPU, cube_flat_kernel);
    cube_flat.impl(c10::DeviceType::CUDA, cube_flat_kernel);
    cube_flat.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    cube_flat.impl_backward([](const XSaved& s, const at::Tensor& g) {
      return Grads{{"x", 3 * s.x * s.x * g}};
    });
    cube_flat.samples(&contiguous_x_samples);

    // relu, sampled away from the kink.
    auto& relu = customop::define<XArgs>("customop_mutants::relu(Tensor x) -> Tensor");
    auto relu_kernel = [](const XArgs& a) { return at::relu(a.x); };
    relu.impl(c10::DeviceType::CPU, relu_kernel);
    relu.impl(c10::DeviceType::CUDA, relu_kernel);
    relu.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    relu.impl_backward([](const XSaved& s, const at::Tensor& g) {
      return Grads{{"x", g * (s.x > 0).to(g.scalar_type())}};
    });
    relu.samples(&x_samples_away_from_zero);

    // A float32-only kernel (as many hand-written CUDA kernels): no float64 reference.
    define_f32_softplus("customop_mutants::f32_softplus(Tensor x) -> Tensor", 1.0);
    define_f32_softplus("customop_mutants::f32_softplus_scale_1pct(Tensor x) -> Tensor", 1.01);
    return true;
  }();
  (void)done;
}

}  // namespace customop_mutants::detail
