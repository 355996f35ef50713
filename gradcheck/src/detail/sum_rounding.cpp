#include "detail/sum_rounding.h"

#include "detail/values.h"

#include <ATen/ATen.h>

#include <cmath>

namespace customop::gradcheck::detail {

void widen_noise_for_sums(std::vector<NumericalBlock>& blocks,
                          const std::vector<at::Tensor>& points,
                          const std::vector<at::Tensor>& widths, const at::Tensor& row_u) {
  if (blocks.empty()) return;
  const int64_t rows = blocks.front().value.size(0);
  std::vector<double> terms(static_cast<std::size_t>(rows), 0.0);
  std::vector<int64_t> responding(static_cast<std::size_t>(rows), 0);
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const NumericalBlock& b = blocks[j];
    const at::Tensor x = flat_double(points[j]);
    const auto xv = values_of(x);
    const int64_t n = b.value.size(1);
    const double* value = b.value.const_data_ptr<double>();
    const double* left = b.left.defined() ? b.left.const_data_ptr<double>() : nullptr;
    const double* right = b.right.defined() ? b.right.const_data_ptr<double>() : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t e = r * n + k;
        const bool moves = value[e] != 0 || (left != nullptr && left[e] != 0) ||
                           (right != nullptr && right[e] != 0);
        if (!moves) continue;
        ++responding[r];
        const double term = value[e] * xv[k];
        if (std::isfinite(term)) terms[r] += term * term;
      }
    }
  }
  for (auto& t : terms) t = std::sqrt(t);
  const auto u = values_of(row_u);
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    NumericalBlock& b = blocks[j];
    if (!b.noise.defined()) continue;
    const auto width = values_of(widths[j]);
    const int64_t n = b.value.size(1);
    double* noise = b.noise.mutable_data_ptr<double>();
    for (int64_t r = 0; r < rows; ++r) {
      if (responding[r] < 2 || terms[r] == 0) continue;
      for (int64_t k = 0; k < n; ++k) {
        if (!(width[k] > 0)) continue;
        double& z = noise[r * n + k];
        z = std::max(z, 2.0 * u[r] * terms[r] / width[k]);
      }
    }
  }
}

}  // namespace customop::gradcheck::detail
