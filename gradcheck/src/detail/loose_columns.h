#pragma once
// A second step for the Jacobian entries that one central difference judges loosely.
// Internal to customop_gradcheck.

#include "detail/compare.h"
#include "detail/numerical.h"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace customop::gradcheck::detail {

/// With one step h = eps, an entry's bound holds the half spread of its one-sided differences,
/// h |f''| / 2, and its row's median of it (options.h, Tolerances): where the derivative is
/// itself of that order (x^2 at |x| ~ eps: f' = 2x, h f'' / 2 = eps), a backward off by a
/// factor of 2 passes. Such entries are "loose" (compare.h, BlockCompare::loose_columns).
///
/// For every column k of input j with a loose or a failing entry in `compared` (j-major,
/// `outputs` pairs per input), element k is sampled again at h / 2 (two
/// forward calls), and each entry of that column where f is smooth within the step is judged anew
/// (NumericalBlock::refined): value D(h/2), error |D(h) - D(h/2)|, noise the rounding at
/// h / 2 (at least twice that at h: it goes as 1 / h, and `blocks` may hold a widened one).
///
/// Smooth within the step: the one-sided spread s(h) = |right - left| = h f'' + O(h^3) halves
/// with the step, |s(h/2) - s(h)/2| <= s(h)/4 + z, and the central differences agree far
/// better than the spread, |D(h) - D(h/2)| = O(h^2 f''') <= s(h)/16 + z (z = 16 (noise(h) +
/// noise(h/2))). A kink of jump J at a distance d = t h from x: within h/2, s(h) = J (1 - t),
/// s(h/2) = J (1 - 2t), |D(h) - D(h/2)| = J t / 2: the first test holds only for t in
/// [0.2, 0.43], the second only for t <= 1/9; between h/2 and h, s(h/2) ~ 0 fails the first; a
/// jump doubles s. None of them is refined: the kink rule (the values between the one-sided
/// derivatives) still judges them. Nor is a point where f'' ~ 0 and f''' is not (x^3 at 0): it
/// keeps the one-step bound. Where the truncation error goes as h^2 (f''' finite), D(h) - D(h/2) =
/// (3/4) h^2 f''' / 6, three times D(h/2)'s own error (Richardson; Numerical Recipes 3rd ed.,
/// section 5.7), so the bound S (error + 16 noise) keeps the safety S = 4 on top of that factor.
///
/// The column's other entries keep their one-step bound, widened by the one-sided
/// differences' own truncation (NumericalBlock::side_slack): the kink rule accepts the values
/// between the one-sided derivatives, not only between the one-sided differences.
/// Differences are divided by the perturbation applied, as the block's own (not for a
/// nominal-step rule, which the caller does not refine). A column is skipped where h / 2 is below
/// 100 unit roundoffs of |x_k| (the dtype would quantize the step; numerical.h's step rule refuses
/// the same for eps). `widths[j][k]` becomes the perturbation at h / 2, for noise_level.h's
/// widening after. The forward calls are counted where Numerical counts them. \returns true when
/// any entry was refined (the caller compares again). \throws UnstableOutputs as
/// Numerical::sample_element.
bool refine_loose_columns(Numerical& num, double eps, const std::vector<BlockCompare>& compared,
                          std::size_t outputs, std::vector<NumericalBlock>& blocks,
                          std::vector<at::Tensor>& widths);

/// The same for the columns `cols` of input j's block `b` alone (fast mode's entry-by-entry
/// recheck of a failing pair). \returns true when any column was sampled again.
bool refine_columns(Numerical& num, std::size_t j, double eps, const std::vector<int64_t>& cols,
                    NumericalBlock& b, at::Tensor& widths);

}  // namespace customop::gradcheck::detail
