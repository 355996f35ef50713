#include "detail/noise_level.h"

#include "detail/draws.h"
#include "detail/values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace customop::gradcheck::detail {

namespace {

/// The third difference of four consecutive values, or 0 when one of them is not finite.
double third_difference(double a, double b, double c, double d) {
  const double t = d - 3.0 * c + 3.0 * b - a;
  return std::isfinite(t) ? t : 0.0;
}

/// sqrt(mean over windows of (Delta^3 g)^2 / 20) for g at the table's points.
/// NB: a smooth trend's third differences (~h^3 g''') count too. Moré and Wild's test (a
/// sign change among them) would drop a trend, but the one-step error model has no term for
/// the central difference's own truncation h^2 f''' / 6, which the trend covers where f'' ~ 0
/// (x^3 at 0: numerical h^2, analytical 0).
double sigma_of(std::span<const double> g) {
  const std::size_t windows = g.size() >= 4 ? g.size() - 3 : 0;
  if (windows == 0) return 0.0;
  double sum = 0;
  for (std::size_t i = 0; i < windows; ++i) {
    const double t = third_difference(g[i], g[i + 1], g[i + 2], g[i + 3]);
    sum += t * t;
  }
  const double sigma = std::sqrt(sum / static_cast<double>(windows) / 20.0);
  return std::isfinite(sigma) ? sigma : 0.0;  // an overflowing square widens nothing
}

}  // namespace

namespace {

/// The least precise evaluated dtype's unit roundoff.
double coarsest_roundoff(const Numerical& num) {
  double u = 0;
  for (std::size_t j = 0; j < num.inputs(); ++j) {
    u = std::max(u, unit_roundoff(num.evaluated_dtype(j)));
  }
  return u;
}

/// d_k = s_k min(max(1, |x_k|), cap) with random signs s_k from `gen`.
std::vector<at::Tensor> random_direction(const Numerical& num, at::Generator& gen,
                                         double cap = INFINITY) {
  std::vector<at::Tensor> d;
  for (std::size_t j = 0; j < num.inputs(); ++j) {
    const auto x = values_of(num.values(j));
    const at::Tensor coin = uniform_cpu(static_cast<int64_t>(x.size()), gen);
    const auto heads = values_of(coin);
    d.push_back(tabulate(static_cast<int64_t>(x.size()), [&](int64_t k) {
      const double m = std::min(std::max(1.0, std::abs(x[k])), cap);
      return heads[k] < 0.5 ? -m : m;
    }));
  }
  return d;
}

NoiseTable table_along(Numerical& num, const std::vector<at::Tensor>& d, double h) {
  NoiseTable table;
  table.evals.push_back(num.base_flat());
  for (int i = 1; i < kNoisePoints; ++i) table.evals.push_back(num.evaluate_moved(d, i * h));
  return table;
}

}  // namespace

NoiseTable sample_noise(Numerical& num, at::Generator& gen, double h) {
  const double u = coarsest_roundoff(num);
  const std::vector<at::Tensor> d = random_direction(num, gen);
  return table_along(num, d, h > 0 ? h : std::sqrt(u));
}

at::Tensor row_sigma(const NoiseTable& table) {
  const int64_t rows = table.evals.empty() ? 0 : table.evals.front().numel();
  std::vector<std::span<const double>> cols;
  for (const auto& e : table.evals) cols.push_back(values_of(e));
  std::vector<double> g(cols.size());
  return tabulate(rows, [&](int64_t r) {
    for (std::size_t i = 0; i < cols.size(); ++i) g[i] = cols[i][r];
    return sigma_of(g);
  });
}

double projected_sigma(const NoiseTable& table, std::span<const double> v, int64_t r0, int64_t r1) {
  std::vector<double> g;
  for (const auto& e : table.evals) {
    const auto f = values_of(e);
    double s = 0;
    for (int64_t r = r0; r < r1; ++r) s += v[r - r0] * f[r];
    g.push_back(s);
  }
  return sigma_of(g);
}

at::Tensor measured_noise(Numerical& num, at::Generator& gen, double step, double cap) {
  const double u = coarsest_roundoff(num);
  std::vector<double> spacings{std::sqrt(u)};
  if (step > spacings.front()) spacings.push_back(step);
  at::Tensor sigma;
  for (const double h : spacings) {
    // The second spacing is the differences' step, which is absolute: its directions'
    // entries stop growing with |x| at `cap`.
    const double limit = h == spacings.front() ? INFINITY : cap;
    for (int k = 0; k < kNoiseDirections; ++k) {
      std::vector<at::Tensor> d = random_direction(num, gen, limit);
      const at::Tensor ahead = row_sigma(table_along(num, d, h));
      for (auto& t : d) t = -t;
      const at::Tensor behind = row_sigma(table_along(num, d, h));
      // Rounding shows on both sides; a kink within the table's reach lies on one.
      const at::Tensor s = at::minimum(ahead, behind);
      sigma = sigma.defined() ? at::maximum(sigma, s) : s;
    }
  }
  return sigma;
}

at::Tensor output_rounding_floor(const at::Tensor& base_flat, const at::Tensor& row_u,
                                 const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const auto f = values_of(base_flat), u = values_of(row_u);
  std::vector<double> out(f.size(), 0.0);
  for (const auto& [r0, r1] : ranges) {
    double m = 0;
    for (int64_t r = r0; r < r1; ++r) {
      if (std::isfinite(f[r])) m = std::max(m, std::abs(f[r]));
    }
    for (int64_t r = r0; r < r1; ++r) out[r] = u[r] * m;
  }
  return tabulate(static_cast<int64_t>(out.size()), [&](int64_t r) { return out[r]; });
}

void widen_noise_to_measured(std::vector<NumericalBlock>& blocks, const at::Tensor& sigma,
                             const at::Tensor& floor, const std::vector<at::Tensor>& widths) {
  const auto s = values_of(sigma), fl = values_of(floor);
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    NumericalBlock& b = blocks[j];
    if (!b.noise.defined()) continue;
    const auto width = values_of(widths[j]);
    const int64_t rows = b.noise.size(0), n = b.noise.size(1);
    double* noise = b.noise.mutable_data_ptr<double>();
    const double* left = b.left.defined() ? b.left.const_data_ptr<double>() : nullptr;
    const double* right = b.right.defined() ? b.right.const_data_ptr<double>() : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < n; ++k) {
        if (!(width[k] > 0)) continue;
        const int64_t e = r * n + k;
        double& z = noise[e];
        z = std::max(z, 2.0 * kNoiseDeviations * s[r] / width[k]);
        const bool flat = left != nullptr && right != nullptr && left[e] == 0 && right[e] == 0;
        if (flat) z = std::max(z, 2.0 * fl[r] / width[k]);
      }
    }
  }
}

}  // namespace customop::gradcheck::detail
