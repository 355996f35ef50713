#pragma once
// The precision probe: a float64 backward that computes in float32 (a cast inside it, a
// float32 constant or accumulator) agrees with finite differences at eps 1e-6 to ~1e-7
// relative, inside the Jacobian check's bounds, whose one-step differences are themselves good
// to only ~eps |f''|. A directional derivative extrapolated by Ridders' method from steps
// ~1e-4 is good to ~1e-12 of the Jacobian's scale in float64, and tells the two apart.
// Internal to customop_gradcheck.

#include "detail/checker.h"
#include "detail/function.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <cstdint>

namespace customop::gradcheck::detail {

/// Checks v_i^T J_ij u_j per (differentiable output i, input j) against finite differences
/// extrapolated to step 0 (Ridders, kProbeLevels steps from 1e-4 * max(1, |x|) halving, along
/// a random unit direction u_j whose signs follow the analytical sum_i v_i^T J_ij; v_i dense
/// random in [-1, 1]).
///
/// The bound is that of a fast-mode projection (compare.h, projection_bound: safety 4 on
/// Ridders' error estimate, on the differences' rounding amplified 5x by the tableau, and
/// 16 u_float64 |v^T J| |u| for the backward's own rounding), where the differences' rounding is
/// the larger of the modelled u |f| and the noise measured near the point (noise_level.h): an
/// op whose forward is itself rounded coarsely widens its own bound, so only an error in the
/// backward, beyond float64's rounding, fails. Directions along which f has a kink within the
/// steps (one-sided differences 10 % apart) and non-finite values are skipped. A pair about to
/// fail is first compared with the one-step central difference along the same u (2 forward
/// calls per input, only then): where the extrapolation disagrees with it beyond the one-step
/// value's error estimate, f is not smooth within the probe's steps (relu, abs, clamp, selu
/// with an element 1e-6 .. 1e-4 from their kink failed here), and the pair is probed again
/// from a 10x smaller first step (kProbeFirstSteps), down to 1e-6; then left unjudged with a
/// note.
///
/// Runs only where the Jacobian check passed, on float64 inputs and outputs, with the
/// estimated tolerances (not atol/rtol) and GradcheckOptions::check_backward_precision. Cost,
/// counted apart in result.precision_counts: one VJP per differentiable output; 2 kProbeLevels
/// forward calls per input, plus kNoiseDirections (kNoisePoints - 1) for the noise. A mismatch
/// is a Check::kJacobian failure of the pair. Probed inputs are listed in
/// result.precision_probes.
/// `backward_roundoff` (GradcheckOptions::backward_roundoff): the backward's declared relative
/// precision, when coarser than float64's (a series or table approximation): the projection's
/// analytical rounding bound uses it in place of float64's unit roundoff.
void check_backward_precision(const Function& f, const Checked& c, const Tolerances& tol,
                              std::uint64_t seed, double nondet_tol, double backward_roundoff,
                              GradcheckResult& result);

/// Ridders levels of the probe (steps 1e-4, 5e-5, 2.5e-5 relative): the extrapolation's
/// truncation is O(h^6), far below float64 rounding.
inline constexpr int kProbeLevels = 3;

/// The probe's first steps (relative to max(1, |x|)): where f is not smooth within the steps
/// from one, the pair is probed again from the next (6 forward calls per input each, only
/// then); where it is not smooth from any, the pair is left unjudged with a note.
inline constexpr int kProbeStarts = 3;
inline constexpr double kProbeFirstSteps[kProbeStarts] = {1e-4, 1e-5, 1e-6};

/// The largest tolerance, relative to |v^T J| |u|, from which the probe gives a verdict: a
/// float32 backward is off by ~1e-7 relative. Above it the steps crossed a kink, or f's own
/// noise is that large: the next first step, then a note.
inline constexpr double kProbeResolution = 1e-6;

}  // namespace customop::gradcheck::detail
