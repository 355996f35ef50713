#pragma once
// Entry-by-entry comparison of a numerical and an analytical Jacobian block, and the text that
// reports its worst entry. Internal to customop_gradcheck.

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace customop::gradcheck::detail {

/// The comparison of one (output, input) block.
struct BlockCompare {
  PairReport pair;
  ElementReport worst_nd;  ///< the worst mismatching entry at a non-differentiable point
};

/// Compares `num` with `ana` (float64 CPU, [m, n]: m output elements x n input elements).
/// An entry passes when |ana - num| <= atol + rtol * |num| + err (err: the numerical
/// estimate's own error, [m, n]); NaN fails. Where `detect_nd` and `left`/`right` (the
/// one-sided differences, [m, n]) are given, a failing entry whose sides differ by more than
/// max(tolerance, 0.1 * max(|left|, |right|)) counts as at a non-differentiable point.
/// `out_sizes`/`in_sizes` turn flat row/column numbers into indices for the report.
BlockCompare compare_block(const at::Tensor& num, const at::Tensor& ana, const at::Tensor& err,
                           const at::Tensor& left, const at::Tensor& right, const Tolerances& tol,
                           bool detect_nd, c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes);

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
