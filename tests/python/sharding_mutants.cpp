// Ops with planted wrong sharding rules, for the sharding check (test_sharding.py): their
// kernels and backward formulas are right, only the rule is wrong.
//   sharding_mutants::row_norm        y = x * rsqrt(mean(x^2, -1) + 1e-6): normalizes the last
//                                     dim, declared pointwise (a reduced dim shardable)
//   sharding_mutants::clamp_count     customop::clamp_count's values, its general-form rule
//                                     placing the count Replicate where each rank only counts
//                                     its shard (a missing Partial: a silently wrong count)
//   sharding_mutants::clamp_count_pointwise  the same op declared pointwise without
//                                     partial_sum: the rule cannot place the 0-d count, an
//                                     error at the call
//   sharding_mutants::row_norm_ok     row_norm with the right rule, reduction({-1}): the control
//   sharding_mutants::no_rule         2 * x, no rule at all
#include <customop/customop.h>

#include <ATen/ATen.h>

namespace {

using customop::Grads;
using customop::Sharding;

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  at::Tensor x;
};

at::Tensor row_norm(const XArgs& a) {
  return a.x * at::rsqrt(a.x.square().mean(-1, /*keepdim=*/true) + 1e-6);
}

Grads row_norm_backward(const XSaved& s, const at::Tensor& g) {
  const at::Tensor r = at::rsqrt(s.x.square().mean(-1, /*keepdim=*/true) + 1e-6);
  const at::Tensor y = s.x * r;
  return Grads{{"x", r * (g - y * (g * y).mean(-1, /*keepdim=*/true))}};
}

void define_row_norm(const char* schema, Sharding rule) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, &row_norm);
  // DTensor runs the op on meta tensors for the outputs' shapes: a rule needs a fake kernel.
  op.impl_fake([](const XArgs& a) { return at::empty_like(a.x); });
  op.impl_autograd([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; },
                   &row_norm_backward);
  op.sharding(std::move(rule));
}

struct ClampArgs {
  at::Tensor input;
  double min;
  double max;
};
struct ClampSaved {
  at::Tensor inside;
};

std::tuple<at::Tensor, at::Tensor> clamp_count(const ClampArgs& a) {
  const at::Tensor clamped = (a.input < a.min) | (a.input > a.max);
  return {a.input.clamp(a.min, a.max), clamped.sum()};
}

void define_clamp_count(const std::string& name, Sharding rule) {
  auto& cc = customop::define<ClampArgs, std::tuple<at::Tensor, at::Tensor>>(
      "sharding_mutants::" + name +
      "(Tensor input, float min, float max) -> (Tensor output, Tensor clamped)");
  cc.impl(c10::DeviceType::CPU, &clamp_count);
  cc.impl_fake([](const ClampArgs& a) {
    return std::tuple<at::Tensor, at::Tensor>{at::empty_like(a.input),
                                              at::empty({}, a.input.options().dtype(at::kLong))};
  });
  cc.impl_autograd(
      [](const ClampArgs& a, const std::tuple<at::Tensor, at::Tensor>&) {
        return ClampSaved{(a.input >= a.min) & (a.input <= a.max)};
      },
      [](const ClampSaved& s, const at::Tensor& g, const at::Tensor&) {
        return Grads{{"input", g * s.inside}};
      },
      {true, false});
  cc.sharding(std::move(rule));
}

[[maybe_unused]] const bool registered = [] {
  define_row_norm("sharding_mutants::row_norm(Tensor x) -> Tensor", Sharding::pointwise());
  define_row_norm("sharding_mutants::row_norm_ok(Tensor x) -> Tensor", Sharding::reduction({-1}));
  using customop::Placement;
  define_clamp_count(
      "clamp_count",
      Sharding::strategies({{.inputs = {{"input", Placement::shard(0)}},
                             .outputs = {Placement::shard(0), Placement::replicate()}},
                            {.inputs = {{"input", Placement::shard(1)}},
                             .outputs = {Placement::shard(1), Placement::replicate()}}}));
  define_clamp_count("clamp_count_pointwise", Sharding::pointwise());
  auto& twice = customop::define<XArgs>("sharding_mutants::no_rule(Tensor x) -> Tensor");
  twice.impl(c10::DeviceType::CPU, [](const XArgs& a) { return 2 * a.x; });
  twice.impl_fake([](const XArgs& a) { return at::empty_like(a.x); });
  return true;
}();

}  // namespace
