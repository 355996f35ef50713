#pragma once
/// \file
/// A small finite-difference gradient check for the core tests (the full harness lives in
/// gradcheck/; the core suites must not depend on it).

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <vector>

namespace customop::testing {

/// Compares the gradient autograd computes for L = sum(fn(inputs) * w) against central
/// finite differences of L, for every element of every floating-point input.
/// `inputs`: CPU float64 tensors (copied; the floating ones are made leaves that require
/// grad). `w`: fixed random weights drawn from `seed` (printed on failure), so a backward
/// that ignores grad_output fails. eps: the finite-difference step; the check passes when
/// |analytical - numerical| <= atol + rtol * |numerical| everywhere.
inline ::testing::AssertionResult matches_finite_differences(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, uint64_t seed = 0, double eps = 1e-6, double atol = 1e-6,
    double rtol = 1e-4) {
  std::vector<at::Tensor> leaves;
  std::vector<at::Tensor> wrt;
  for (const auto& t : inputs) {
    auto leaf = t.detach().clone();
    if (at::isFloatingType(leaf.scalar_type())) {
      leaf.requires_grad_(true);
      wrt.push_back(leaf);
    }
    leaves.push_back(leaf);
  }
  auto out = fn(leaves);
  auto gen = at::detail::createCPUGenerator(seed);
  const auto w = at::randn(out.sizes(), gen, out.options().requires_grad(false));
  const auto analytical = torch::autograd::grad({(out * w).sum()}, wrt, {}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
  at::NoGradGuard no_grad;
  auto loss = [&] { return (fn(leaves) * w).sum().item<double>(); };
  for (size_t i = 0; i < wrt.size(); ++i) {
    auto flat = wrt[i].view({-1});
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double orig = flat[j].item<double>();
      flat[j].fill_(orig + eps);
      const double plus = loss();
      flat[j].fill_(orig - eps);
      const double minus = loss();
      flat[j].fill_(orig);
      const double numerical = (plus - minus) / (2 * eps);
      const double a =
          analytical[i].defined() ? analytical[i].reshape({-1})[j].item<double>() : 0.0;
      if (std::abs(a - numerical) > atol + rtol * std::abs(numerical)) {
        return ::testing::AssertionFailure()
               << "gradient mismatch for input " << i << " at flat index " << j << ": numerical "
               << numerical << ", analytical " << a << " (seed " << seed << ", eps " << eps << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace customop::testing
