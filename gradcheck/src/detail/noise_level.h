#pragma once
// The rounding noise of f's outputs near a point, measured instead of modelled. Internal to
// customop_gradcheck.
//
// The error model of compare.h charges each evaluation of f with u |f| (and sum_rounding.h
// with u times the size of the terms an output sums). Neither sees an intermediate far larger
// than the output: log_softmax's x_i - logsumexp(x) is ~0 for the row's largest x_i, yet it is
// rounded at the size of logsumexp (~|x|); a norm divides by a reduction whose rounding the
// output inherits. Measuring the noise covers every such case at once.

#include "detail/compare.h"
#include "detail/numerical.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace customop::gradcheck::detail {

/// f's floating outputs at equally spaced points x + i h d, i = 0 .. kNoisePoints - 1, along
/// one random direction of all inputs at once.
struct NoiseTable {
  std::vector<at::Tensor> evals;  ///< float64 CPU [M] each; evals[0] is f(x)
};

inline constexpr int kNoisePoints = 7;

/// Evaluates the table (kNoisePoints - 1 forward calls; f(x) is the base): d_k = s_k max(1,
/// |x_k|) with random signs s_k from `gen`, h = sqrt(u) of the least precise evaluated dtype
/// (1.05e-8 in float64). At that step a smooth function's third differences (~h^3 f''')
/// vanish below its rounding, so what they show is noise (Moré and Wild, "Estimating
/// computational noise", SIAM J. Sci. Comput. 33(3), 2011, the ECnoise method). All points lie
/// on one side of x: a kink exactly at x does not enter. Throws UnstableOutputs as
/// Numerical::evaluate_moved, and whatever f raises.
/// `h` > 0 overrides the spacing (measured_noise's second tables, at the differences' step).
NoiseTable sample_noise(Numerical& num, at::Generator& gen, double h = 0);

/// The standard deviation sigma of each output element's rounding noise, float64 CPU [M]:
/// for independent errors of deviation sigma a third difference has variance
/// (1 + 9 + 9 + 1) sigma^2, so sigma = sqrt(mean over the table's windows of (Delta^3 f)^2 /
/// 20). Non-finite differences count as 0 (they fail on their own), and so does a deviation
/// whose square overflows.
at::Tensor row_sigma(const NoiseTable& table);

/// The same for the projection sum_r v_r f_r over rows [r0, r1) (`v` of r1 - r0 elements).
double projected_sigma(const NoiseTable& table, std::span<const double> v, int64_t r0, int64_t r1);

/// Directions measured_noise takes the largest deviation over: along one direction the
/// points' rounding can fall into a pattern (equal steps of a binary fraction) that hides an
/// output's noise: log_softmax's largest entry showed 3.5e-20 along 1 of 8 random directions,
/// ~7e-17 along the others.
inline constexpr int kNoiseDirections = 3;

/// The largest |d_k| at the differences' spacing (measured_noise).
inline constexpr double kStepScaleCap = 8.0;

/// Each output element's noise deviation, float64 CPU [M]: the largest over kNoiseDirections
/// random directions d (as sample_noise's) at sqrt(u), and as many at the differences' `step`
/// when it is larger, of the lesser of the two tables along d and along -d (up to
/// 4 kNoiseDirections (kNoisePoints - 1) forward calls). The second
/// spacing sees rounding that moves in steps coarser than sqrt(u): gelu(x) = x (1 + erf(x /
/// sqrt 2)) / 2 at x = -6.75 in float64 moves by 3.7e-16 every 8e-7 of x (1 + erf cancels),
/// flat at 1e-8 but a staircase at eps = 1e-6, which moved central differences by 3e-11
/// against a derivative of 3.4e-10. A smooth function's third differences at that spacing,
/// ~step^3 f''', add no more than the central differences' own truncation. The differences'
/// step is absolute (x +- eps), so at that spacing d_k stops growing with |x_k| at `cap`
/// (kStepScaleCap; the checker passes infinity for a float32 point, whose backward's rounding
/// at large |x|, ~u32 |x| in x - mean(x), the a-term of compare.h does not model and the
/// uncapped table's curvature covered: softmax and sigmoid(x - mean) in float32 at x ~ 1e4
/// failed without it): scaled by |x| = 1e4 the table spanned 6e-2 and its third differences,
/// ~(1e4 step)^3 f''', passed sin's grad 0 at x = 1e4 and a layer norm 10 % off on rows of
/// mean 1e4; unscaled (spacing eps), they alias the staircase above, whose period is ~eps,
/// and the cap keeps x = -6.75's spacing. Rounding shows on both sides of x; a
/// kink within 6 steps of x (relu at 3e-7) lies on one, and taking the lesser side keeps its
/// third differences out (a backward 1.8x off there passed as "noise"). Throws as
/// sample_noise.
at::Tensor measured_noise(Numerical& num, at::Generator& gen, double step = 0,
                          double cap = kStepScaleCap);

/// How many deviations one evaluation's rounding is taken to reach (a central difference
/// subtracts two evaluations: its noise bound is 2 kNoiseDeviations sigma / width).
inline constexpr double kNoiseDeviations = 3.0;

/// Widens each slow-mode block's rounding estimate to the measured noise:
/// noise[r, k] = max(noise[r, k], 2 kNoiseDeviations sigma_r / width_k).
/// An entry whose differences are exactly 0 on both sides (f did not change at all) saw no
/// noise to measure: a forward that cancels to 0 (ndtr(x) = (1 + erf(x / sqrt 2)) / 2 is 0 for
/// every x below -5.9 in float64, where its derivative is ~1e-13) is resolved only to the
/// rounding of its output's scale, so there noise[r, k] >= 2 floor_r / width_k.
/// \param blocks  one NumericalBlock per input, [M, n_j], `noise` updated in place
/// \param sigma   float64 CPU [M] (row_sigma)
/// \param floor   float64 CPU [M]: u times the largest finite |f| of the row's output
/// \param widths  per input, float64 CPU [n_j]: the perturbation applied to each column at
///                the smallest step
void widen_noise_to_measured(std::vector<NumericalBlock>& blocks, const at::Tensor& sigma,
                             const at::Tensor& floor, const std::vector<at::Tensor>& widths);

/// u_r times the largest finite |f| among the rows of each output: float64 CPU [M] from the
/// base outputs `base_flat` [M], the unit roundoffs `row_u` [M] and each output's row range.
at::Tensor output_rounding_floor(const at::Tensor& base_flat, const at::Tensor& row_u,
                                 const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace customop::gradcheck::detail
