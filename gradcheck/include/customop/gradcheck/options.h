#pragma once
/// \file
/// `customop::gradcheck::GradcheckOptions`: what the gradient check compares, and how closely.
///
/// Example:
///   customop::gradcheck::GradcheckOptions opt;
///   opt.mode = customop::gradcheck::Mode::kFast;
///   opt.seed = 7;

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace customop::gradcheck {

/// How the analytical Jacobian (from backward) is compared with the numerical one.
enum class Mode : std::uint8_t {
  /// Full Jacobians, as torch.autograd.gradcheck's default: the numerical Jacobian by central
  /// differences per input element, (f(x + h) - f(x - h)) / ((x + h) - (x - h)) with the
  /// perturbation as stored (2 forward calls each, 2 per Ridders level), the analytical one by
  /// one VJP per output element with a one-hot grad_output. The reentrancy check runs two
  /// VJPs per output with one dense random grad_output (torch runs every one-hot VJP twice:
  /// m VJPs per output more). Mismatches are judged per entry, per (output, input) pair.
  kSlow,
  /// Random projections: with seeded random unit vectors u (per input) and v (per output),
  /// compares v^T (J u) (numerical, 2 forward calls per input) with (v^T J) u (analytical,
  /// 2 VJPs per output). As torch's fast_mode, but atol is NOT scaled by sum(u) * sum(v): that
  /// scaling made torch's fast mode miss a wrong gradient (pytorch#59650). u and v are
  /// Gaussian with mean 1 (so errors of the form c * 1 1^T, such as a constant added to every
  /// grad, do not vanish in the projection), and u is tilted towards the analytical v^T J (so
  /// the projection stays away from 0, where atol would hide a relative error). A failing
  /// (output, input) pair is re-checked in slow mode, whose verdict stands (slow mode is the
  /// reference: the projection's tolerance has no model of multi-term rounding); a pair slow
  /// mode passes gets a note with the fast-mode figures.
  kFast,
};

/// Names a mode, as reports and the CLI spell it.
/// \param mode  the mode
/// \returns "slow" / "fast"
/// \throws nothing.
/// Example:
///   std::cout << customop::gradcheck::mode_name(opt.mode);
std::string_view mode_name(Mode mode);

/// How the numerical Jacobian is computed when a differentiable input is float32 (or
/// float16 / bfloat16), where central differences with eps = 1e-6 are swamped by round-off.
enum class LowPrecisionMethod : std::uint8_t {
  /// kFloat64Reference when the op runs in float64 on the same device (its outputs come back
  /// float64), else kRidders.
  kAuto,
  /// Differences of the op run in float64 (every floating tensor argument cast to float64),
  /// with eps; the analytical Jacobian still comes from the low-precision backward. Falls back
  /// to kRidders (with a note in the result) when the op does not run in float64.
  kFloat64Reference,
  /// Ridders' extrapolation (Ridders 1982; Numerical Recipes 3rd ed. section 5.7, `dfridr`)
  /// over central differences in the input's own dtype, starting at a relative step
  /// `ridders_initial_step * max(1, |x|)` and shrinking it `ridders_levels - 1` times by
  /// `ridders_shrink`, as Ceres' GradientChecker does. Steps are exactly what the dtype stores:
  /// the differences are divided by the perturbation actually applied ((x + h) - (x - h)).
  kRidders,
  /// Plain central differences with eps in the input's own dtype: what torch.autograd.gradcheck
  /// does, kept to show why it fails correct float32 ops.
  kCentral,
};

/// Names a low-precision method, as reports and the CLI spell it.
/// \param method  the method
/// \returns "auto" / "float64-reference" / "ridders" / "central"
/// \throws nothing.
/// Example:
///   std::cout << customop::gradcheck::low_precision_method_name(opt.low_precision);
std::string_view low_precision_method_name(LowPrecisionMethod method);

/// Finite-difference step and the rule that judges a Jacobian entry.
///
/// By default (`estimated` true) an entry passes when
///   |analytical - numerical| <= w + S * (e + m + 16 r + 16 a),   S = kEstimateSafety = 4
/// (with Ridders: r at its smallest step, weight 1 instead of 16; m weight 5),
/// every term an error estimate of that entry rather than a fixed fraction of it:
/// - w: half the spread of the one-sided differences at the (smallest) step (with Ridders'
///   extrapolation, whose own estimate e covers truncation, only at kinks),
///   |(f(x+h) - f(x)) / h - (f(x) - f(x-h)) / h| / 2 = h |f''| / 2 + rounding. It bounds the
///   central difference's truncation error (h^2 |f'''| / 6, an order of h smaller), and where a
///   kink lies within the step it accepts exactly the values between the one-sided derivatives
///   (the subgradients) and nothing else.
/// - e: Ridders' extrapolation error estimate (Numerical Recipes 3rd ed., section 5.7, the
///   tableau's |difference| between successive orders); 0 for one step.
/// - m: the median of w over the entry's Jacobian row: rounding noise pooled over the row, so
///   one entry whose own noise happens to cancel cannot shrink its own bound (x5 with Ridders,
///   whose tableau weights add up to ~4.6 over three orders and amplify that noise).
/// - r: the numerical side's rounding, u_num (|f(x+h)| + |f(x-h)|) / (2h), with u_num the unit
///   roundoff of the dtype the differences ran in (float64 for the float64 reference). Where an
///   output responds to two or more input elements (slow mode), |f| is raised to the
///   root-sum-square T of its terms J_ik x_k over every differentiable input: a sum is rounded
///   in proportion to its terms, which can cancel to a far smaller f (bmm); the model and its
///   sources are in gradcheck/src/detail/sum_rounding.h.
/// - a: the analytical side's rounding, u_ana (|analytical| + max |analytical| over the
///   (output, input) block: the backward's terms can cancel to an entry far smaller than
///   them), with u_ana the unit roundoff of the backward's dtype (6e-8 for a float32 one).
/// Entries whose estimate exceeds 1 % of their row's largest entry are sampled again at
/// eps / 2 and, where f is smooth within the step, judged by S (|D(eps) - D(eps/2)| + 16 r)
/// alone (gradcheck/src/detail/loose_columns.h).
/// For smooth float64 ops w dominates: h |f''| / 2 with h = 1e-6, ~1e-6 of the entry where
/// |f''| ~ |f'|, so a 0.1 % error (1e-3) fails; a float32 backward against the float64
/// reference adds ~8e-6 of its block's largest entry (S 16 u_ana, u_ana = 6e-8).
/// Fast mode applies the same terms to the projection v^T J u (|v|-weighted sums of w and r,
/// and u_ana |v^T J| |u| for a).
///
/// When atol or rtol is given (GradcheckOptions), `estimated` is false and an entry passes when
/// |analytical - numerical| <= atol + rtol * |numerical| + e (torch.allclose's rule, as
/// torch.autograd.gradcheck, plus Ridders' estimate). atol and rtol always judge the
/// comparisons that are not finite differences (CUDA vs CPU, forward with and without grad).
struct Tolerances {
  double eps;   ///< central-difference step (absolute, in the input's units), as torch's eps
  double atol;  ///< absolute tolerance (fixed rule; non-Jacobian comparisons)
  double rtol;  ///< relative tolerance, relative to |numerical|
  bool estimated = false;  ///< Jacobian verdicts from error estimates (see above)
};

/// The safety factor S of the estimated rule (Tolerances).
inline constexpr double kEstimateSafety = 4.0;

/// Gives the default step and fixed tolerances of a dtype: atol and rtol judge Jacobians only
/// when GradcheckOptions sets one of them (else the error estimates do), and always judge the
/// comparisons that are not finite differences.
/// | dtype    | eps  | atol | rtol | source                                            |
/// |----------|------|------|------|---------------------------------------------------|
/// | float64  | 1e-6 | 1e-5 | 1e-3 | torch.autograd.gradcheck's defaults               |
/// | float32  | 1e-6 | 1e-4 | 2e-3 | rtol as JAX check_grads for f32; atol 10x float64's |
/// | float16  | 1e-6 | 1e-2 | 1e-2 | JAX check_grads for f16                           |
/// | bfloat16 | 1e-6 | 1e-1 | 1e-1 | JAX check_grads for bf16                          |
/// eps only applies where the differences run in float64 (float64 inputs or the float64
/// reference); low-precision differences use the Ridders steps.
/// \param dtype  the least precise floating dtype among the differentiable inputs
/// \returns its eps (input units), atol (output units) and rtol (relative); float64's for
///          any dtype not in the table
/// \throws nothing.
/// Example:
///   auto tol = customop::gradcheck::default_tolerances(c10::ScalarType::Float);  // atol 1e-4
Tolerances default_tolerances(c10::ScalarType dtype);

/// The low-precision rule: how a float16/bfloat16 check judges the op (gradcheck on inputs of
/// those dtypes, `customop-gradcheck --dtype bfloat16|float16`). Finite differences cannot
/// judge a kernel whose rounding (u = 2^-8 for bfloat16, 2^-11 for float16) swamps any step,
/// so the op in the low dtype is compared with a precise run on the same rounded values:
/// every differentiable output, and every input's grad from one VJP with dense random
/// cotangents (uniform in [-1, 1], rounded to the output's dtype; a one-hot cotangent would
/// leave a reduction's accumulation unused).
/// - The precise run: the op's declared reference (op.reference(fn), or "reference" in a spec
///   case) in float64; without one, the op's own float64 run, which gradcheck first checks by
///   finite differences (its Jacobians are the result's `pairs`).
/// - The baselines, elementwise: E_ref = |reference in the low dtype - precise| (with a
///   reference); E_pert = the precise run's response to one rounding of its inputs and of the
///   cotangent (every element times 1 +- u, random sign; the larger of two draws). E_pert is
///   the error any kernel that reads rounded values can be charged with (the backward-error
///   view: Higham, Accuracy and Stability of Numerical Algorithms, 2002, section 1.5); it
///   grows with the op's conditioning (a logsumexp whose backward reuses its rounded output).
/// - Without a reference, a kernel may also keep what it saves for backward in the dtype, as
///   ATen's 16-bit softmax, sigmoid and logsumexp keep their outputs: its grads then follow the
///   float64 run with the saved tensors rounded to the dtype (the saved-rounded run, one more
///   forward and VJP: customop/saved_rounding.h for customop's ops, and from Python
///   torch.autograd.graph.saved_tensors_hooks for every saved tensor). A tensor the precise
///   run rejects is judged against that run by the same rules; either fit passes
///   (LowPrecisionReport::baseline says which), a bug fits neither. Where the saved-rounded
///   run is not finite, it explains only the kernel's same value (the precise run judges the
///   rest); a function that raises under the hooks (torch.func inside) is judged against the
///   precise run alone, with a note.
/// - The verdict on each tensor, e = low - precise over the elements finite in both:
///     max |e| <= max(2 max E_ref, 4 max E_pert) + u max |precise| + 4 d   ("max")
///     rms(e)  <= max(2 rms E_ref, 4 rms E_pert) + u rms(precise) + 4 d    ("rms")
///     |s| <= 4 se(s) + u / 4 + u,  s = sum(e p) / sum(p^2)                ("bias")
///   and no element non-finite where the precise value is finite in the dtype
///   ("non-finite"). The factor 2 on the reference's error and the slack of one rounding at
///   the values' magnitude are flash-attention's test rule (its tests/test_flash_attn.py,
///   Dao et al. 2022: the kernel's max error at most twice a plain implementation's in the
///   same dtype plus the rounding of the values); 4 on E_pert was measured: the correct ops
///   of the low-precision corpus (sums over 4096, matmul, sigmoid, softmax over large logits,
///   logsumexp, whose backward reuses its rounded output) reach at most 0.82 of that bound
///   over 20 seeds. s is the least-squares relative scale of the error (low ~ (1 + s)
///   precise) and se(s) its standard error: a 1 % error in every element is invisible in
///   max and rms next to bfloat16's rounding (2.6 u) but sits ~10 standard errors off here,
///   while rounding to nearest has no such bias; u / 4 allows a quarter unit of systematic
///   rounding, and one more u the rounding of one value every element shares (a constant such
///   as pi, a norm or mean stored in the dtype: float16 std/var grads showed a bias of 4.6e-4,
///   0.94 u, from their rounded std). The bias rule counts elements in the dtype's normal
///   range only, and needs kLowPrecisionBiasMinElements of them to mean anything; fewer are
///   judged by max and rms alone. d is the dtype's
///   smallest subnormal (2^-24 in float16, 2^-133 in bfloat16): a value below the normal range
///   (a product of 1e-56, a subnormal loss) is resolved only to its spacing.
inline constexpr double kLowPrecisionReferenceFactor = 2.0;
inline constexpr double kLowPrecisionPerturbationFactor = 4.0;
inline constexpr double kLowPrecisionBiasSigmas = 4.0;
inline constexpr double kLowPrecisionBiasShare = 0.25;
inline constexpr double kLowPrecisionSharedRounding = 1.0;
inline constexpr int64_t kLowPrecisionBiasMinElements = 8;
inline constexpr double kLowPrecisionUnderflowFactor = 4.0;

/// Which subsets of the differentiable inputs the backward also runs with, the others not
/// requiring grad (GradcheckOptions::input_subsets).
enum class InputSubsets : std::uint8_t {
  kNone,                   ///< only with every input requiring grad (torch's gradcheck)
  kEachAlone,              ///< also each input alone: n subsets
  kEachAloneAndAllButOne,  ///< also each input alone and every input but one: 2n (n >= 3)
};

/// Options of a gradient check. The defaults mirror torch.autograd.gradcheck where it has one
/// (slow mode, eps/atol/rtol for float64, nondet_tol 0, undefined-grad check on), and turn on
/// the checks it leaves off by default (grad dtype) or does not make (non-differentiable
/// points, CUDA against CPU, float32 rules).
struct GradcheckOptions {
  /// Slow (full Jacobians) or fast (random projections). Default slow, as torch.
  Mode mode = Mode::kSlow;
  /// Overrides of the per-dtype defaults (default_tolerances); unset: by dtype. Setting atol
  /// or rtol judges Jacobian entries by the fixed rule atol + rtol |numerical| instead of the
  /// error estimates (Tolerances).
  std::optional<double> eps;
  std::optional<double> atol;
  std::optional<double> rtol;
  /// Largest difference allowed between two backward runs with the same input and
  /// grad_output (the reentrancy check); 0 demands bit-identical grads, as torch's default.
  double nondet_tol = 0.0;
  /// Seeds the fast-mode projections, the grad_outputs of the second-order check and of the
  /// CUDA/CPU comparison. Drawn from a private CPU generator: the global RNG is not touched.
  std::uint64_t seed = 0;
  /// On a failed check throw GradcheckError (true), or only return the result (false).
  /// Invalid inputs throw in both cases, and so do errors of the function itself.
  bool raise_exception = true;
  /// Backward must survive undefined output grads (each in turn, then all) and return zero
  /// or undefined grads for them.
  bool check_undefined_grad = true;
  /// A zero grad_output must give zero grads ("backward not multiplied by grad_output").
  bool check_grad_output_scaling = true;
  /// Grads must have their input's dtype, device and shape (torch: check_grad_dtypes, off
  /// there by default; on here).
  bool check_grad_metadata = true;
  /// Also check the forward gives the same outputs whether or not grads are requested (Ceres
  /// GradientChecker makes this check).
  bool check_forward_grad_mode = true;
  /// When a Jacobian entry mismatches where the left and right one-sided differences
  /// disagree, report "not differentiable at <arg>[index]" instead of a mismatch.
  bool detect_nondifferentiable = true;
  /// On CUDA inputs, also run the op on CPU copies and compare outputs and grads (when the op
  /// has a CPU kernel).
  bool check_cuda_against_cpu = true;
  /// Second order (gradgradcheck): check the Jacobian of (inputs, grad_outputs) -> grads
  /// computed with create_graph. Opt in: only for ops whose backward is differentiable.
  bool check_second_order = false;
  /// For a customop op with a fake (Meta) kernel: run it on meta copies of the inputs and
  /// compare its outputs' count, shapes, dtypes, strides and devices with the real kernel's
  /// (what torch.library.opcheck's test_faketensor checks, without Python). Its cost: one
  /// real and one fake forward call per case.
  bool check_fake_kernel = true;
  /// Mutation audit, for any dispatcher op: run it once on private copies of every tensor
  /// argument's whole base storage and compare them byte for byte before and after. An
  /// argument the schema does not declare written (Tensor(a!)) that changed fails, naming
  /// the argument and the first changed element; so does a declared one changed outside its
  /// own view, and an output sharing storage with an argument. A declared write that did not
  /// happen is a note. Its cost: one forward call and two copies of each argument's storage.
  /// An op that declares writes gets this audit instead of the gradient checks (customop
  /// refuses written tensors that require grad); the report's notes say so.
  bool check_mutation = true;
  /// Out= overload check, for any dispatcher op with an overload `.out` (every customop op
  /// with a shape function has one): its results must equal the functional op's
  /// with the out buffers pre-filled with NaN and, again, with a large finite value (a kernel
  /// that reads its out buffer gives different answers), in a non-contiguous buffer, and in
  /// an empty one (resized as torch's out= convention says); a buffer of the wrong size must
  /// be resized or refused with an error, never left wrong. The out schema must obey the
  /// out= rules (customop::check_out_schema). Its cost: one functional and 5 out= calls.
  bool check_out_variant = true;
  /// In-place variant check, for any dispatcher op `ns::name[.overload]` with one Tensor return
  /// and an in-place variant `ns::name_[.overload]` (ATen's convention; customop's
  /// Op::inplace_variant): the variant, called on a copy of the sample, must write the
  /// functional op's result into its first argument (to a few units in the last place), return
  /// that argument itself, keep its strides, and bump its version counter; a second call
  /// puts the first argument in a non-contiguous layout (last two dims transposed in memory).
  /// A sample the variant refuses (a result that cannot be written into the first argument:
  /// another shape or dtype) is a note. When arguments of the sample require grad, the variant
  /// must then refuse them leaving every argument unchanged, or give the functional op's
  /// grads: the VJP of `x' = x.clone(); name_(x', ...)` against the functional op's, same
  /// cotangent, within a few hundred units of the dtype's epsilon. Its cost: one functional
  /// and two in-place calls; with grads, one more of each and two VJPs.
  bool check_inplace_variant = true;
  /// torch.func transforms check (transforms_check.cpp), with torch's per-example vmap fallback
  /// off: forward-mode AD along random tangents against the VJP by the dot-product identity
  /// u . (J t) = (J^T u) . t; vmap over 3 perturbed copies of each differentiable input alone
  /// and of all together, batched at dim 0 and at the last dim, against a loop; and the VJP
  /// with 3 batched cotangents (vmap(vjp), the per-sample-gradient path) against a loop. Both
  /// sides are analytical: relative to the largest entry compared, 1e-7 (float64) / 1e-3
  /// (float32), and 1e-10 / 1e-5 for vmap against the loop. An op with no forward-AD formula
  /// or no batching rule (no FuncTorchBatched kernel) gets a note for the steps skipped;
  /// float16/bfloat16 samples and ops that write their arguments are not checked. The Python
  /// API runs its fuller torch.func check instead (customop.gradcheck, check_transforms).
  /// Its cost: one JVP call, 2 (n + 1) vmapped calls and as many per-example loops of 3 calls
  /// for n differentiable inputs, and 2 + 3 + 1 VJPs.
  bool check_transforms = true;
  /// Also run the op with each differentiable input, and give the VJP each grad_output, in
  /// non-contiguous layouts (a strided view of a larger buffer; the last two dims transposed
  /// where 2-D or more), and require the outputs and grads of the given layout to rounding:
  /// kernels that read memory as if contiguous pass finite differences on one layout but
  /// not this. Its cost, counted apart in GradcheckResult::layout_counts: per input
  /// variant one forward call and one VJP; per grad_output variant one VJP; plus one VJP.
  bool check_layout_variants = true;
  /// Also run the backward with only some inputs requiring grad, and require the same grads
  /// for them: a backward that branches on which inputs need grad (needs_input_grad, output
  /// masks) has paths the full check never takes. Cost, counted apart in
  /// GradcheckResult::subset_counts: per subset one forward call and one VJP, plus one VJP;
  /// nothing with fewer than 2 differentiable inputs.
  InputSubsets input_subsets = InputSubsets::kEachAloneAndAllButOne;
  /// float64 checks with estimated tolerances: once the Jacobian check passed, compare one
  /// projection v^T J u per (output, input) pair with a Ridders-extrapolated directional
  /// derivative (good to ~1e-12 of the Jacobian's scale), so a float64 backward that computes
  /// in float32 (~1e-7 relative, inside the one-step bounds) fails. Cost, counted apart in
  /// GradcheckResult::precision_counts: one VJP per output, 6 forward calls per input and 18
  /// for the noise measurement (detail/backward_precision.h).
  bool check_backward_precision = true;
  /// The least unit roundoff u_ana the backward is judged to (Tolerances' a term; 0: that of
  /// the coarser of the input's and the output's dtype). The bfloat16/float16 check sets
  /// float32's (2^-24) for the function's float64 run, whose Jacobian check only has to show
  /// the formula right to well below 16-bit rounding: a float32 constant in a correct
  /// backward (torch.where(x > 0, 1.0, 0.01) is float32) moves it by ~1e-8, which failed it.
  /// The float64 precision probe (check_backward_precision) judges to it too: a backward that
  /// approximates by design (ATen's trigamma, digamma's backward, is good to ~5e-10 relative)
  /// passes with it set to that precision. It widens every entry's bound by u times the block's
  /// largest entry, as a coarser dtype would: a value far above the backward's real precision
  /// lets real errors on small entries pass. Python: backward_roundoff=; CLI:
  /// --backward-roundoff.
  /// Must be finite and >= 0 (else c10::ValueError).
  double backward_roundoff = 0.0;
  /// Numerical method for float32 / float16 / bfloat16 inputs.
  LowPrecisionMethod low_precision = LowPrecisionMethod::kAuto;
  /// Ridders: first step relative to max(1, |x|) (Ceres: 1e-2), shrink factor per level
  /// (Ceres: 2), number of step sizes (Ceres: up to 10; each costs 2 forward calls).
  double ridders_initial_step = 1e-2;
  double ridders_shrink = 2.0;
  int ridders_levels = 6;
  /// Keep the numerical and analytical Jacobians of every checked pair in the result, not
  /// only those of failing pairs (which are kept when they have at most 2^22 entries).
  bool keep_jacobians = false;
  /// Slow mode builds Jacobians of (elements of the differentiable inputs) x (elements of the
  /// differentiable outputs) entries, with one forward pair per input element and one VJP per
  /// output element; above this many entries the sample is judged in fast mode instead (a
  /// note names the sizes), rather than exhausting memory. A failing fast-mode pair is
  /// compared entry by entry only when its own Jacobian (that input's elements x all output
  /// elements) fits; otherwise the projection's verdict stands. 2^24 entries = 128 MiB per
  /// float64 Jacobian.
  std::int64_t max_jacobian_entries = std::int64_t{1} << 24;
  /// Shown in reports: which sample this is (e.g. "transposed [5, 6]").
  std::string label;
};

/// Gives the tolerances a check uses: the overrides of `options`, else the dtype's defaults.
/// \param options  the check's options (eps, atol, rtol overrides)
/// \param dtype    the least precise floating dtype among the differentiable inputs
/// \returns the tolerances, each override in place of default_tolerances(dtype)'s value;
///          `estimated` true unless options.atol or options.rtol is set
/// \throws nothing.
/// Example:
///   auto tol = customop::gradcheck::resolve_tolerances({.atol = 1e-3}, c10::kFloat);
Tolerances resolve_tolerances(const GradcheckOptions& options, c10::ScalarType dtype);

}  // namespace customop::gradcheck
