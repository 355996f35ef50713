#pragma once
// Finite differences of a Function at a point: per input element (slow mode) or along a
// direction (fast mode), with one step (central difference) or a geometric sequence of steps
// for Ridders' extrapolation. Internal to customop_gradcheck.

#include "detail/function.h"

#include <ATen/core/Tensor.h>

#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace customop::gradcheck::detail {

/// Thrown when a perturbed evaluation returns outputs of another count, shape or dtype.
struct UnstableOutputs : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The steps: one absolute step (central difference, torch's eps), or `levels` steps starting
/// at `initial` (relative to max(1, |x|)) and divided by `shrink` each level (Ridders).
struct StepRule {
  bool ridders = false;
  double eps = 1e-6;
  double initial = 1e-2;
  double shrink = 2.0;
  int levels = 1;
};

/// One step size's central difference.
struct Level {
  at::Tensor diff;  // (f(x + d+) - f(x - d-)) / (2h): float64 CPU [M] (M = all floating outputs)
  at::Tensor w;     // the perturbation applied, (d+ + d-) / (2h): float64 CPU, [] (element) or [n]
};

/// All step sizes of one perturbation, plus one-sided differences at the smallest step.
struct Sampled {
  std::vector<Level> levels;
  at::Tensor left;       // (f(x) - f(x - d-)) / |d-|, [M]
  at::Tensor right;      // (f(x + d+) - f(x)) / |d+|, [M]
  at::Tensor noise;      // u (|f(x + d+)| + |f(x - d-)|) / (d+ + d-) at the smallest step, [M]
  at::Tensor first_raw;  // f(x + d+) - f(x - d-) at the first (largest) step, [M]
  double width = 0;      // (x + d+) - (x - d-) at the smallest step, per unit of direction
};

/// Unit roundoff (half the machine epsilon) of a floating dtype: 2^-53 for float64, 2^-24 for
/// float32, 2^-11 for float16, 2^-8 for bfloat16.
double unit_roundoff(c10::ScalarType dtype);
/// Spacing of a floating dtype's subnormals (its smallest positive value): 2^-1074 for
/// float64, 2^-149 for float32, 2^-24 for float16, 2^-133 for bfloat16.
double subnormal_spacing(c10::ScalarType dtype);
/// Smallest positive normal value: 2^-1022, 2^-126, 2^-14 (float16), 2^-126 (bfloat16).
double smallest_normal(c10::ScalarType dtype);

/// Extrapolated estimate and its error estimate (0 for a single level), elementwise.
struct Estimate {
  at::Tensor value;
  at::Tensor error;
};

/// Ridders' polynomial extrapolation of `samples` (one tensor per step, step shrinking by
/// `shrink`) to step 0: the Neville tableau of Numerical Recipes' dfridr, run elementwise;
/// each element keeps the entry with the smallest error estimate and stops when the error
/// grows by more than a factor of 2 (NR's SAFE).
Estimate ridders_extrapolate(const std::vector<at::Tensor>& samples, double shrink);
/// The same for one scalar per step: {value, error estimate}.
std::pair<double, double> ridders_extrapolate(const std::vector<double>& samples, double shrink);

/// The numerical side of a check: holds working copies of the point and f's outputs there.
class Numerical {
 public:
  /// `point`: the differentiable inputs (values only). `reference`: evaluate f.eval_reference
  /// on float64 copies. `base`: f's outputs at the point from the same evaluator, when the
  /// caller already has them (else one forward call here).
  Numerical(const Function& f, const std::vector<at::Tensor>& point, bool reference, StepRule rule,
            std::vector<at::Tensor> base = {});

  /// Perturbs element `k` (row-major) of input `j`; `step` > 0 replaces a one-step rule's eps
  /// (loose_columns.h samples again at eps / 2).
  Sampled sample_element(std::size_t j, int64_t k, double step = 0);
  /// Perturbs input `j` along `u` (float64 CPU [n_j]).
  Sampled sample_direction(std::size_t j, const at::Tensor& u);

  /// Total number of floating output elements M, and where output o's block starts.
  int64_t total() const { return total_; }
  /// Row range [begin, end) of flat output `o` within [M]; begin == end for a non-floating one.
  std::pair<int64_t, int64_t> rows(std::size_t o) const { return rows_[o]; }
  const std::vector<at::Tensor>& base() const { return base_; }
  /// Unit roundoff of the dtype each row was evaluated in, float64 CPU [M].
  const at::Tensor& row_roundoff() const { return row_u_; }
  int64_t numel(std::size_t j) const { return work_[j].numel(); }
  std::size_t inputs() const { return work_.size(); }
  /// Input `j` at the point, float64 CPU [n_j], row-major.
  const at::Tensor& values(std::size_t j) const { return values_[j]; }
  /// The dtype input `j` is evaluated in (float64 for a reference evaluator).
  c10::ScalarType evaluated_dtype(std::size_t j) const { return work_[j].scalar_type(); }
  /// f's floating outputs at the point, flat float64 CPU [M].
  const at::Tensor& base_flat() const { return base_flat_; }
  /// f's floating outputs, flat float64 CPU [M], with every input j moved to x_j + t d_j
  /// (`d`: one float64 CPU [n_j] per input; as rounded to the evaluated dtype); the point is
  /// restored after. UnstableOutputs as sample_element's.
  at::Tensor evaluate_moved(const std::vector<at::Tensor>& d, double t);
  c10::IntArrayRef sizes(std::size_t j) const { return work_[j].sizes(); }
  /// The perturbed input names, for stability messages.
  void set_input_names(std::vector<std::string> names) { input_names_ = std::move(names); }

 private:
  /// f at the work point; UnstableOutputs when its outputs' count, shapes or dtypes differ
  /// from the base's (perturbation(j, h, k) says how the point was moved).
  at::Tensor evaluate(std::size_t j, double h, int64_t k);
  /// "input j ('x') was perturbed at element [1, 0] by 1e-06" (k >= 0) or "... along a random
  /// direction by ..." (k = -1).
  std::string perturbation(std::size_t j, double h, int64_t k) const;
  at::Tensor concat(const std::vector<at::Tensor>& outs) const;
  /// Appends step level `l` (of rule_.levels) from f(x + d+) = fp and f(x - d-) = fm at
  /// nominal step h: the central difference (fp - fm) / 2h with the perturbation applied `w`;
  /// the raw difference at level 0; at the last level the rounding estimate
  /// row_u (|fp| + |fm|) / width.
  void add_level(Sampled& s, int l, const at::Tensor& fp, const at::Tensor& fm, double h,
                 double width, at::Tensor w) const;
  /// (hi - lo) / step, float64 CPU [M].
  at::Tensor one_sided(std::span<const double> hi, std::span<const double> lo, double step) const;

  const Function& f_;
  bool reference_;
  StepRule rule_;
  std::vector<at::Tensor> work_;
  std::vector<at::Tensor> values_;  // float64 CPU [n_j] copies of the point, row-major
  std::vector<at::Tensor> base_;
  at::Tensor base_flat_;
  at::Tensor row_u_;
  std::vector<std::pair<int64_t, int64_t>> rows_;
  int64_t total_ = 0;
  std::vector<std::string> input_names_;
};

}  // namespace customop::gradcheck::detail
