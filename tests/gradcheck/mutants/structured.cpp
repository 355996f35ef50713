// Ops of the corpus with structure: broadcasting, two inputs, indexing, two outputs, a tensor
// list, a non-differentiable output; and their mutants.

#include "mutants/register.h"

#include <customop/customop.h>

namespace customop_mutants::detail {

namespace {

using customop::Grads;

// ---- mul: x [N, D] * w [D] (broadcast) --------------------------------------------------
struct MulArgs {
  at::Tensor x;
  at::Tensor w;
};
struct MulSaved {
  at::Tensor x;
  at::Tensor w;
};

std::vector<std::pair<std::string, MulArgs>> mul_samples(c10::Device d, c10::ScalarType t) {
  return {{"broadcast [3, 4] * [4]", {sample({3, 4}, d, t), sample({4}, d, t)}},
          {"transposed x [2, 3] * [3]", {sample({3, 2}, d, t).t(), sample({3}, d, t)}}};
}

void define_mul(const char* schema, at::Tensor (*grad_w)(const MulSaved&, const at::Tensor&)) {
  auto& op = customop::define<MulArgs>(schema);
  auto kernel = [](const MulArgs& a) { return a.x * a.w; };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const MulArgs& a, const at::Tensor&) { return MulSaved{a.x, a.w}; });
  op.impl_backward([grad_w](const MulSaved& s, const at::Tensor& g) {
    return Grads{{"x", g * s.w}, {"w", grad_w(s, g)}};
  });
  op.samples(&mul_samples);
}

// ---- weighted_square: x^2 * w, both [5] -----------------------------------------------------
struct PairArgs {
  at::Tensor x;
  at::Tensor w;
};

std::vector<std::pair<std::string, PairArgs>> pair_samples(c10::Device d, c10::ScalarType t) {
  return {{"vectors [5]", {sample({5}, d, t), sample({5}, d, t)}},
          {"matrices [2, 2]", {sample({2, 2}, d, t), sample({2, 2}, d, t).t()}}};
}

void define_weighted_square(const char* schema, bool swapped) {
  auto& op = customop::define<PairArgs>(schema);
  auto kernel = [](const PairArgs& a) { return a.x * a.x * a.w; };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const PairArgs& a, const at::Tensor&) {
    return MulSaved{a.x, a.w};
  });
  op.impl_backward([swapped](const MulSaved& s, const at::Tensor& g) {
    at::Tensor gx = 2 * s.x * s.w * g;
    at::Tensor gw = s.x * s.x * g;
    if (swapped) std::swap(gx, gw);
    return Grads{{"x", gx}, {"w", gw}};
  });
  op.samples(&pair_samples);
}

// ---- drop_first: x[1:] along dim 0 ----------------------------------------------------------
struct XArgs {
  at::Tensor x;
};
struct ShapeSaved {
  std::vector<int64_t> sizes;
  at::Tensor like;  // an empty tensor with x's dtype and device
};

std::vector<std::pair<std::string, XArgs>> drop_samples(c10::Device d, c10::ScalarType t) {
  return {{"vector [5]", {sample({5}, d, t)}}, {"transposed [4, 3]", {sample({3, 4}, d, t).t()}}};
}

void define_drop_first(const char* schema, int64_t start) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [](const XArgs& a) { return a.x.narrow(0, 1, a.x.size(0) - 1).clone(); };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) {
    return ShapeSaved{a.x.sizes().vec(), at::empty({0}, a.x.options())};
  });
  op.impl_backward([start](const ShapeSaved& s, const at::Tensor& g) {
    at::Tensor gx = at::zeros(s.sizes, s.like.options());
    gx.narrow(0, start, s.sizes[0] - 1).copy_(g);
    return Grads{{"x", gx}};
  });
  op.samples(&drop_samples);
}

// ---- sincos: two outputs ----------------------------------------------------------------------
struct XSaved {
  at::Tensor x;
};

void define_sincos(const char* schema, bool swapped) {
  auto& op = customop::define<XArgs, std::tuple<at::Tensor, at::Tensor>>(schema);
  auto kernel = [](const XArgs& a) { return std::make_tuple(at::sin(a.x), at::cos(a.x)); };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward(
      [](const XArgs& a, const std::tuple<at::Tensor, at::Tensor>&) { return XSaved{a.x}; });
  op.impl_backward([swapped](const XSaved& s, const at::Tensor& g_sin, const at::Tensor& g_cos) {
    const at::Tensor& a = swapped ? g_cos : g_sin;
    const at::Tensor& b = swapped ? g_sin : g_cos;
    return Grads{{"x", a * at::cos(s.x) - b * at::sin(s.x)}};
  });
  op.samples([](c10::Device d, c10::ScalarType t) {
    return std::vector<std::pair<std::string, XArgs>>{{"vector [4]", {sample({4}, d, t)}}};
  });
}

// ---- sum_list: sum_k (k + 1) * xs[k]^2 ------------------------------------------------------
struct ListArgs {
  std::vector<at::Tensor> xs;
};
struct ListSaved {
  std::vector<at::Tensor> xs;
};

void define_sum_list() {
  auto& op = customop::define<ListArgs>("customop_mutants::sum_list(Tensor[] xs) -> Tensor");
  auto kernel = [](const ListArgs& a) {
    at::Tensor y = at::zeros_like(a.xs.at(0));
    for (std::size_t k = 0; k < a.xs.size(); ++k)
      y = y + static_cast<double>(k + 1) * a.xs[k] * a.xs[k];
    return y;
  };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const ListArgs& a, const at::Tensor&) { return ListSaved{a.xs}; });
  op.impl_backward([](const ListSaved& s, const at::Tensor& g) {
    std::vector<at::Tensor> grads;
    for (std::size_t k = 0; k < s.xs.size(); ++k)
      grads.push_back(2.0 * static_cast<double>(k + 1) * s.xs[k] * g);
    return Grads{{"xs", grads}};
  });
  op.samples([](c10::Device d, c10::ScalarType t) {
    return std::vector<std::pair<std::string, ListArgs>>{
        {"three tensors [3]", {{sample({3}, d, t), sample({3}, d, t), sample({3}, d, t)}}}};
  });
}

// ---- max_with_index: (values, indices), indices not differentiable ----------------------------
struct MaxArgs {
  at::Tensor x;
  int64_t dim;
};
struct MaxSaved {
  std::vector<int64_t> sizes;
  at::Tensor indices;
  int64_t dim;
  at::Tensor like;
};

void define_max_with_index() {
  auto& op = customop::define<MaxArgs, std::tuple<at::Tensor, at::Tensor>>(
      "customop_mutants::max_with_index(Tensor x, int dim) -> (Tensor values, Tensor indices)");
  auto kernel = [](const MaxArgs& a) {
    auto [v, i] = at::max(a.x, a.dim, /*keepdim=*/false);
    return std::make_tuple(v, i);
  };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_save_for_backward([](const MaxArgs& a, const std::tuple<at::Tensor, at::Tensor>& out) {
    return MaxSaved{a.x.sizes().vec(), std::get<1>(out), a.dim, at::empty({0}, a.x.options())};
  });
  op.impl_backward(
      [](const MaxSaved& s, const at::Tensor& g, const at::Tensor&) {
        at::Tensor gx = at::zeros(s.sizes, s.like.options());
        gx.scatter_(s.dim, s.indices.unsqueeze(s.dim), g.unsqueeze(s.dim));
        return Grads{{"x", gx}};
      },
      {true, false});
  op.samples([](c10::Device d, c10::ScalarType t) {
    return std::vector<std::pair<std::string, MaxArgs>>{
        {"rows of [3, 4], dim 1", {sample({3, 4}, d, t), 1}}};
  });
}

}  // namespace

void register_structured() {
  static const bool done = [] {
    define_mul(
        "customop_mutants::mul(Tensor x, Tensor w) -> Tensor",
        [](const MulSaved& s, const at::Tensor& g) { return (g * s.x).sum_to_size(s.w.sizes()); });
    // Reduces the broadcast dimension with mean instead of sum.
    define_mul("customop_mutants::mul_wrong_reduction(Tensor x, Tensor w) -> Tensor",
               [](const MulSaved& s, const at::Tensor& g) { return (g * s.x).mean(0); });
    // Returns grad_w with the broadcast shape [N, D] reduced over the wrong dimension.
    define_mul("customop_mutants::mul_grad_wrong_shape(Tensor x, Tensor w) -> Tensor",
               [](const MulSaved& s, const at::Tensor& g) { return (g * s.x).sum(1); });
    define_weighted_square("customop_mutants::weighted_square(Tensor x, Tensor w) -> Tensor",
                           false);
    // grad_x sent to w and grad_w to x.
    define_weighted_square(
        "customop_mutants::weighted_square_swapped(Tensor x, Tensor w) -> Tensor", true);
    define_drop_first("customop_mutants::drop_first(Tensor x) -> Tensor", 1);
    // Scatters the grad one element too early.
    define_drop_first("customop_mutants::drop_first_off_by_one(Tensor x) -> Tensor", 0);
    define_sincos("customop_mutants::sincos(Tensor x) -> (Tensor sin, Tensor cos)", false);
    // Uses the grad of the other output.
    define_sincos("customop_mutants::sincos_swapped_grads(Tensor x) -> (Tensor sin, Tensor cos)",
                  true);
    define_sum_list();
    define_max_with_index();
    return true;
  }();
  (void)done;
}

}  // namespace customop_mutants::detail
