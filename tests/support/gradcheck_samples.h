#pragma once
// Test helpers for gradcheck suites: an op's registered samples with their floating tensors
// marked as requiring grad (what the harness's runner does), drawn at a given seed.

#include <customop/op_core.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdint>
#include <vector>

namespace customop::testing {

/// `stack` with every floating tensor (also inside Tensor[]) detached and requiring grad.
inline torch::jit::Stack requiring_grad(const torch::jit::Stack& stack) {
  auto mark = [](const at::Tensor& t) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type())) return t;
    return t.detach().requires_grad_(true);
  };
  torch::jit::Stack out;
  for (const auto& v : stack) {
    if (v.isTensor()) {
      out.emplace_back(mark(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      const auto in = v.toTensorList();
      for (std::size_t k = 0; k < in.size(); ++k) list.push_back(mark(in.get(k)));
      out.emplace_back(std::move(list));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

/// The op's samples for `device` and `dtype`, drawn after seeding the global RNG with `seed`,
/// ready for gradcheck.
inline std::vector<Sample> differentiable_samples(const OpCore& op, c10::Device device,
                                                  c10::ScalarType dtype, std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<Sample> samples = op.samples(device, dtype);
  for (auto& s : samples) s.args = requiring_grad(s.args);
  return samples;
}

}  // namespace customop::testing
