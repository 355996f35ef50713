#pragma once
// Entry-by-entry comparison of a numerical and an analytical Jacobian block, and the text that
// reports its worst entry. Internal to customop_gradcheck.

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// The comparison of one (output, input) block.
struct BlockCompare {
  PairReport pair;
  ElementReport worst_nd;  ///< the worst mismatching entry at a non-differentiable point
  /// Columns (input elements, ascending) with a loose entry (its error estimate above 1 % of
  /// its row's largest |numerical|), passed or not (estimated rule, one step, not refined;
  /// loose_columns.h): at |x| ~ eps a smooth f's one-sided spread, h f'', can exceed a tenth
  /// of its derivative and look like a kink's.
  std::vector<int64_t> loose_columns;
  /// Rows (output elements, ascending) with an entry that passes only by the block's rounding
  /// bound, not by its own row's and column's (compare_block); empty unless the backward's
  /// dtype is coarser than float64 and no float64 backward was given.
  std::vector<int64_t> rounding_only_rows;
  /// Entries (flat) that failed by the float64 backward (compare_block's `ana_float64`).
  std::vector<int64_t> float64_failed;
  /// `ana_float64` was given but not used: its every nonzero value is a float32 number, so that
  /// run computes in float32 (a .float() inside the backward) and is no float64 evidence.
  bool float64_in_float32 = false;
};

/// The numerical side of one (output, input) block, float64 CPU, each [m, n] (m output
/// elements x n input elements).
struct NumericalBlock {
  at::Tensor value;  ///< the numerical Jacobian
  at::Tensor error;  ///< Ridders' error estimate (zeros for one step)
  at::Tensor left;   ///< one-sided differences at the smallest step (undefined: none)
  at::Tensor right;
  at::Tensor noise;  ///< the differences' rounding estimate (undefined: none)
  /// `value` is Ridders' extrapolation: its `error` covers truncation, and the one-sided
  /// spread (at a step far larger than the extrapolated error) only judges kinks.
  bool extrapolated = false;
  /// Bool [m, n] (undefined: none): entries sampled again at half the step where f is smooth
  /// (loose_columns.h). Their `value` is the central difference at eps / 2, `error` its
  /// distance to the one at eps (three times the truncation error of the smaller step when
  /// that error goes as h^2), `noise` the rounding at eps / 2; they are judged by
  /// S (error + 16 noise) alone: no one-sided spread, no row median, no kink.
  at::Tensor refined;
  /// Float64 [m, n] (undefined: none): for the entries of those columns that were not refined,
  /// the one-sided differences' own truncation, 2 min(|left(h) - left(h/2)|, |right(h) -
  /// right(h/2)|) (a side that does not cross a kink moves by h f'' / 4 when h halves; the side
  /// that does moves by far more). Added to their estimate times S: the one-sided derivative
  /// at a kink within the step (selu at -8e-8) lies h f'' / 2 beyond the one-sided difference.
  at::Tensor side_slack;
};

/// Compares `nb.value` with `ana` ([m, n]) by the rule of `tol` (Tolerances: the error
/// estimates, or atol + rtol |num| + err); `u_ana` is the unit roundoff of the backward's
/// dtype. NaN fails. Where `detect_nd`, an entry whose one-sided differences disagree beyond
/// what curvature and rounding explain is at a kink within the step: it passes when the
/// analytical value lies between the one-sided derivatives (estimated rule), else it counts as
/// a bad entry at a non-differentiable point. `out_sizes`/`in_sizes` turn flat row/column
/// numbers into indices for the report.
/// `nondet_tol` (the backward's declared run-to-run spread) widens the analytical side's bound.
/// Entries whose numerical error estimate exceeds 1 % of their row's largest |numerical| are
/// counted in PairReport::loose_entries (a wrong value there may pass).
///
/// The analytical rounding bound (estimated rule) is S 16 u_ana (|ana| + A) plus nondet_tol,
/// where A, the size of the backward's intermediate terms, is the largest |ana| of the whole
/// block: they can cancel to an entry far smaller than them (float32 tanh's 1 - y^2 at x = 6).
/// An entry within that bound but not within the one whose A is the largest |ana| of its own
/// row and column passes only by the block's largest entry: a float32 exp whose backward is
/// 25 % off for x < 0 passes on linspace(-3, 11) by e^11. Where `ana_float64` ([m, n], NaN
/// where not computed; undefined: none) holds the backward run in float64 at the same point,
/// such an entry fails when that float64 value is itself off from the numerical one (beyond
/// its own float64 bound, A of the row and column) and the float32 value lies within half that
/// distance of it: the formula is wrong, not its rounding (BlockCompare::float64_failed lists
/// those entries; ElementReport::float64_analytical names the value). Where `ana_float64` is
/// undefined, the rows holding such entries are listed in BlockCompare::rounding_only_rows, with
/// the row of the block's largest |ana|: a float64 run whose every nonzero value there is a float32
/// number computes in float32 and is not used (BlockCompare::float64_in_float32).
BlockCompare compare_block(const NumericalBlock& nb, const at::Tensor& ana, double u_ana,
                           double nondet_tol, const Tolerances& tol, bool detect_nd,
                           c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes,
                           const at::Tensor& ana_float64 = {});

/// The tolerance of one projection v^T J u (fast mode) by the rule of `tol`.
struct ProjectionBound {
  double estimate = 0;  ///< numerical side's error estimate (w + S (e + 16 r))
  double rounding = 0;  ///< analytical side's rounding bound (S 16 a)
  double tolerance = 0;
};
/// `numerical`: v^T J u from differences; `extrapolation_error`: Ridders' estimate of it;
/// `half_spread`: sum_k |v_k| |right_k - left_k| / 2; `noise`: sum_k |v_k| noise_k;
/// `ana_scale`: |v^T J| |u| (analytical, Euclidean norms); `u_ana` as compare_block's;
/// `nondet_slack`: nondet_tol * sum |u| (the spread the backward may show between runs).
ProjectionBound projection_bound(double numerical, double extrapolation_error, double half_spread,
                                 double noise, double ana_scale, double u_ana, double nondet_slack,
                                 bool extrapolated, const Tolerances& tol);

/// The one-entry pair of a projection (fast mode): numerical and analytical v^T J u, their
/// errors and the verdict against `bound`; output, input and names left to the caller.
PairReport projection_report(double numerical, double analytical, const ProjectionBound& bound);

/// Two lines: the worst entry of `p` (d out_name[i] / d in_name[k], numerical vs analytical,
/// errors, the tolerances, the step rule `steps` and `seed`) and its count of bad entries.
std::string describe_worst(const PairReport& p, const std::string& out_name,
                           const std::string& in_name, const Tolerances& tol,
                           const std::string& steps, std::uint64_t seed);

/// `t` detached as a flat float64 CPU tensor.
at::Tensor flat_double(const at::Tensor& t);

/// "1.234568e-03".
std::string sci(double v);
/// "1e-03".
std::string short_sci(double v);

}  // namespace customop::gradcheck::detail
