// Elementwise ops of the corpus: scale, cube, relu, f32_softplus, the ill-conditioned ones
// (exp near 10, abs within eps of its kink, a sum over 4096 elements), and their mutants.

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

// 15 elements (a SIMD tail: 15 = 8 + 4 + 2 + 1), kept away from 0 so that the last grad,
// 3 x^2, is not itself below what float32 differences resolve.
std::vector<std::pair<std::string, XArgs>> tail_samples(c10::Device d, c10::ScalarType t) {
  return {{"vector [15]", {sample({15}, d, t, true)}},
          {"transposed [5, 3]", {sample({3, 5}, d, t, true).t()}}};
}

// exp's argument near 10: values ~2e4, derivatives as large; rounding scales with them.
std::vector<std::pair<std::string, XArgs>> near_ten_samples(c10::Device d, c10::ScalarType t) {
  auto near = [&](std::vector<int64_t> shape) {
    return (at::randn(shape, at::kDouble) * 0.1 + 10).to(at::TensorOptions().dtype(t).device(d));
  };
  return {{"vector [6] near 10", {near({6})}}, {"transposed [3, 2] near 10", {near({2, 3}).t()}}};
}

// Elements within eps (1e-6) of abs's kink at 0, and one exactly on it, among others.
std::vector<std::pair<std::string, XArgs>> near_kink_samples(c10::Device d, c10::ScalarType t) {
  at::Tensor x = at::randn({7}, at::kDouble);
  x[0] = 0.0;
  x[1] = 3e-7;
  x[2] = -4e-7;
  x[3] = 9e-7;
  return {{"vector [7], 4 within eps of the kink", {x.to(at::TensorOptions().dtype(t).device(d))}}};
}

// 4096 elements summed into one: rounding of the sum grows with the terms, not the result.
std::vector<std::pair<std::string, XArgs>> sum_samples(c10::Device d, c10::ScalarType t) {
  return {{"matrix [64, 64]", {sample({64, 64}, d, t)}}};
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

/// An elementwise op f with derivative df, whose backward multiplies df by `factor` and, with
/// `drop_last`, leaves out the grad of the last element (row-major), as a SIMD loop whose
/// remainder iteration is skipped.
void define_unary(const char* schema, at::Tensor (*f)(const at::Tensor&),
                  at::Tensor (*df)(const at::Tensor&),
                  std::vector<std::pair<std::string, XArgs>> (*samples)(c10::Device,
                                                                        c10::ScalarType),
                  double factor = 1.0, bool drop_last = false) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [f](const XArgs& a) { return f(a.x); };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
  op.impl_backward([df, factor, drop_last](const XSaved& s, const at::Tensor& g) {
    at::Tensor gx = (g * df(s.x) * factor).contiguous();
    if (drop_last && gx.numel() > 0) gx.view({-1})[gx.numel() - 1] = 0;
    return Grads{{"x", gx}};
  });
  op.samples(samples);
}

at::Tensor cube_of(const at::Tensor& x) { return x * x * x; }
at::Tensor cube_slope(const at::Tensor& x) { return 3 * x * x; }
at::Tensor exp_of(const at::Tensor& x) { return at::exp(x); }
at::Tensor abs_of(const at::Tensor& x) { return at::abs(x); }
at::Tensor abs_slope(const at::Tensor& x) { return at::sign(x); }

/// sum(x) over every element into a 0-d output; `drop_last` as define_unary's.
void define_sum(const char* schema, bool drop_last) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [](const XArgs& a) { return a.x.sum(); };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
  op.impl_backward([drop_last](const XSaved& s, const at::Tensor& g) {
    at::Tensor gx = g.expand(s.x.sizes()).contiguous();
    if (drop_last) gx.view({-1})[gx.numel() - 1] = 0;
    return Grads{{"x", gx}};
  });
  op.samples(&sum_samples);
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

    // The ill-conditioned correct ops and the fine-grained bugs of issue 13.
    define_unary("customop_mutants::exp_near_ten(Tensor x) -> Tensor", &exp_of, &exp_of,
                 &near_ten_samples);
    define_unary("customop_mutants::exp_near_ten_0p1pct(Tensor x) -> Tensor", &exp_of, &exp_of,
                 &near_ten_samples, 1.001);
    define_unary("customop_mutants::abs_near_kink(Tensor x) -> Tensor", &abs_of, &abs_slope,
                 &near_kink_samples);
    define_unary("customop_mutants::cube_scale_0p1pct(Tensor x) -> Tensor", &cube_of, &cube_slope,
                 &x_samples, 1.001);
    define_unary("customop_mutants::cube_tail(Tensor x) -> Tensor", &cube_of, &cube_slope,
                 &tail_samples);
    define_unary("customop_mutants::cube_tail_slip(Tensor x) -> Tensor", &cube_of, &cube_slope,
                 &tail_samples, 1.0, /*drop_last=*/true);
    define_sum("customop_mutants::sum_4096(Tensor x) -> Tensor", false);
    define_sum("customop_mutants::sum_4096_tail_slip(Tensor x) -> Tensor", true);

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

    // relu whose backward gives 5 at the kink: outside [0, 1], the one-sided derivatives.
    auto& relu_bad =
        customop::define<XArgs>("customop_mutants::relu_bad_subgradient(Tensor x) -> Tensor");
    relu_bad.impl(c10::DeviceType::CPU, relu_kernel);
    relu_bad.impl(c10::DeviceType::CUDA, relu_kernel);
    relu_bad.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
    relu_bad.impl_backward([](const XSaved& s, const at::Tensor& g) {
      const at::Tensor slope = (s.x > 0).to(g.scalar_type()) + 5 * (s.x == 0).to(g.scalar_type());
      return Grads{{"x", g * slope}};
    });
    relu_bad.samples([](c10::Device d, c10::ScalarType t) {
      at::Tensor x = sample({5}, d, t, true);
      x[2] = 0;
      return std::vector<std::pair<std::string, XArgs>>{{"vector [5], x[2] on the kink", {x}}};
    });

    // A float32-only kernel (as many hand-written CUDA kernels): no float64 reference.
    define_f32_softplus("customop_mutants::f32_softplus(Tensor x) -> Tensor", 1.0);
    define_f32_softplus("customop_mutants::f32_softplus_scale_1pct(Tensor x) -> Tensor", 1.01);
    return true;
  }();
  (void)done;
}

}  // namespace customop_mutants::detail
