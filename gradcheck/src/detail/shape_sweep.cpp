// Sweeping a sample's sizes and layouts for the fake-kernel check: a fake kernel that agrees
// with the real one on the one shape of a sample can still differ on others (a kernel that
// picks its output layout by shape; a fake that forgets the empty case).

#include "detail/shape_sweep.h"

#include "detail/stack_tensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace customop::gradcheck::detail {

namespace {

// A fresh tensor like `t` (dtype, device) with `sizes`, its strides in the order of t's.
at::Tensor fresh_like(const at::Tensor& t, const std::vector<int64_t>& sizes, int64_t offset,
                      bool transpose_last_two) {
  const auto n = static_cast<int64_t>(sizes.size());
  // Dims from outermost to innermost in t's memory order (stable: ties keep dim order).
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  if (transpose_last_two && n >= 2) {
    std::iota(order.begin(), order.end(), 0);
    std::swap(order[static_cast<std::size_t>(n - 1)], order[static_cast<std::size_t>(n - 2)]);
  }
  std::vector<int64_t> strides(static_cast<std::size_t>(n));
  int64_t step = 1;
  for (auto k = n - 1; k >= 0; --k) {
    const auto d = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
    strides[d] = step;
    step *= std::max<int64_t>(sizes[d], 1);
  }
  const int64_t numel =
      std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
  const auto opts = t.options().requires_grad(false);
  at::Tensor base = at::isFloatingType(t.scalar_type())
                        ? at::randn({numel + offset}, opts.dtype(at::kDouble)).to(opts)
                        : at::zeros({numel + offset}, opts);
  at::Tensor out = base.as_strided(sizes, strides, offset);
  return t.requires_grad() ? out.detach().requires_grad_(true) : out;
}

template <class F>
void sweep_for_each(const torch::jit::Stack& args, F f) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined()) f(i, -1, args[i].toTensor());
    if (args[i].isTensorList()) {
      const auto list = args[i].toTensorVector();
      for (std::size_t k = 0; k < list.size(); ++k) f(i, static_cast<int64_t>(k), list[k]);
    }
  }
}

}  // namespace

std::vector<ShapeVariant> shape_variants(const torch::jit::Stack& args,
                                         const std::vector<std::string>& arg_names,
                                         std::size_t max_variants) {
  // Distinct sizes, and where each occurs first ("'x' dim 0"), for the variant's description.
  std::map<int64_t, std::string> sizes;
  sweep_for_each(args, [&](std::size_t i, int64_t k, const at::Tensor& t) {
    const std::string arg = i < arg_names.size() ? arg_names[i] : "#" + std::to_string(i);
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.size(d) == 0 || sizes.count(t.size(d)) != 0) continue;
      sizes[t.size(d)] = "'" + arg + "'" + (k >= 0 ? "[" + std::to_string(k) + "]" : "") + " dim " +
                         std::to_string(d);
    }
  });
  std::vector<ShapeVariant> out;
  auto add = [&](std::string what, const torch::jit::Stack& v) {
    if (out.size() < max_variants) out.push_back({std::move(what), v});
  };
  for (const auto& entry : sizes) {
    const int64_t n = entry.first;  // NB: not a structured binding: lambdas capture it
    const std::string& where = entry.second;
    std::set<int64_t> targets = {0, 1, n + 3};
    targets.erase(n);
    for (const int64_t m : targets) {
      add("every dim of size " + std::to_string(n) + " (first: " + where + ") set to " +
              std::to_string(m),
          map_stack_tensors(args, [&](const at::Tensor& t) {
            std::vector<int64_t> s = t.sizes().vec();
            for (auto& d : s) d = d == n ? m : d;
            return fresh_like(t, s, 0, false);
          }));
    }
  }
  // The dtypes people train in: a fake that states one dtype for all, or a kernel that
  // computes a low-precision output in float32 and returns it so, shows only here.
  bool floating = false;
  c10::ScalarType sample_dtype = at::kDouble;
  sweep_for_each(args, [&](std::size_t, int64_t, const at::Tensor& t) {
    if (!floating && at::isFloatingType(t.scalar_type())) sample_dtype = t.scalar_type();
    floating = floating || at::isFloatingType(t.scalar_type());
  });
  for (const auto dtype : {at::kDouble, at::kFloat, at::kBFloat16, at::kHalf}) {
    if (!floating || dtype == sample_dtype) continue;
    add(std::string("every floating tensor as ") + c10::toString(dtype),
        map_stack_tensors(args, [dtype](const at::Tensor& t) {
          if (!at::isFloatingType(t.scalar_type())) return t.detach().clone();
          at::Tensor c = t.detach().to(dtype, /*non_blocking=*/false, /*copy=*/true);
          return t.requires_grad() ? c.requires_grad_(true) : c;
        }));
  }
  add("every tensor of 2 or more dims with its last two dims transposed in memory",
      map_stack_tensors(
          args, [](const at::Tensor& t) { return fresh_like(t, t.sizes().vec(), 0, true); }));
  add("every tensor at storage offset 1", map_stack_tensors(args, [](const at::Tensor& t) {
        return fresh_like(t, t.sizes().vec(), 1, false);
      }));
  return out;
}

}  // namespace customop::gradcheck::detail
