#include "detail/loose_columns.h"

#include "detail/values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace customop::gradcheck::detail {

namespace {

/// The columns of input j with a loose entry in any of its pairs, ascending, once each.
std::vector<int64_t> loose_columns_of(const std::vector<BlockCompare>& compared, std::size_t j,
                                      std::size_t outputs) {
  std::vector<int64_t> cols;
  for (std::size_t i = 0; i < outputs; ++i) {
    const auto& c = compared[j * outputs + i].loose_columns;
    cols.insert(cols.end(), c.begin(), c.end());
  }
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

}  // namespace

bool refine_columns(Numerical& num, std::size_t j, double eps, const std::vector<int64_t>& cols,
                    NumericalBlock& b, at::Tensor& widths) {
  bool any = false;
  const double h = eps / 2;
  const int64_t rows = b.value.size(0), n = b.value.size(1);
  const double u = unit_roundoff(num.evaluated_dtype(j));
  const auto x = values_of(num.values(j));
  for (const int64_t k : cols) {
    const double xk = x[static_cast<std::size_t>(k)];
    if (!std::isfinite(xk) || h < 100 * u * std::abs(xk)) continue;
    const Sampled s = num.sample_element(j, k, h);
    const auto d2 = values_of(s.levels.front().diff);
    const double w = s.levels.front().w.item<double>();  // perturbation applied / nominal
    const auto l2 = values_of(s.left), r2 = values_of(s.right), z2 = values_of(s.noise);
    if (!b.refined.defined()) b.refined = at::zeros({rows, n}, at::kBool);
    if (!b.side_slack.defined()) b.side_slack = at::zeros({rows, n}, at::kDouble);
    double* slack = b.side_slack.mutable_data_ptr<double>();
    double* value = b.value.mutable_data_ptr<double>();
    double* error = b.error.mutable_data_ptr<double>();
    double* noise = b.noise.mutable_data_ptr<double>();
    const double* left = b.left.const_data_ptr<double>();
    const double* right = b.right.const_data_ptr<double>();
    bool* refined = b.refined.mutable_data_ptr<bool>();
    bool column = false;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t e = r * n + k;
      const double s1 = std::abs(right[e] - left[e]), s2 = std::abs(r2[r] - l2[r]);
      const double n1 = noise[e], n2 = std::max(2 * n1, z2[r]);
      const double v2 = w != 0 && w != 1.0 ? d2[r] / w : d2[r];
      const double z = 16 * (n1 + n2);
      const bool smooth =
          std::abs(s2 - s1 / 2) <= s1 / 4 + z && std::abs(value[e] - v2) <= s1 / 16 + z;
      if (!smooth || !std::isfinite(v2) || !std::isfinite(value[e])) {
        const double moved = std::min(std::abs(left[e] - l2[r]), std::abs(right[e] - r2[r]));
        if (std::isfinite(moved)) slack[e] = 2 * moved;
        continue;
      }
      error[e] = std::max(error[e], std::abs(value[e] - v2));
      value[e] = v2;
      noise[e] = n2;
      refined[e] = true;
      column = true;
    }
    // The refined entries' perturbation (the column's others keep a bound from h / 2's noise:
    // twice theirs, looser).
    if (column && widths.defined()) widths.mutable_data_ptr<double>()[k] = s.width;
    any = true;  // side_slack changed where nothing was refined
  }
  return any;
}

bool refine_loose_columns(Numerical& num, double eps, const std::vector<BlockCompare>& compared,
                          std::size_t outputs, std::vector<NumericalBlock>& blocks,
                          std::vector<at::Tensor>& widths) {
  bool any = false;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::vector<int64_t> cols = loose_columns_of(compared, j, outputs);
    if (!cols.empty()) any = refine_columns(num, j, eps, cols, blocks[j], widths[j]) || any;
  }
  return any;
}

}  // namespace customop::gradcheck::detail
