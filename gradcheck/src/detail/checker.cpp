#include "detail/checker.h"

#include "detail/compare.h"
#include "detail/draws.h"
#include "detail/float64_backward.h"
#include "detail/jacobian_size.h"
#include "detail/loose_columns.h"
#include "detail/noise_level.h"
#include "detail/numerical.h"
#include "detail/sum_rounding.h"
#include "detail/values.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

namespace customop::gradcheck::detail {

namespace {

int rank(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return 3;
    case at::kFloat: return 2;
    case at::kHalf: return 1;
    case at::kBFloat16: return 0;
    default: return 3;
  }
}

// A random unit vector whose entries are positive with magnitudes uniform in [1, 2] before
// normalizing, so every entry is at least 1 / (2 sqrt(n)): a single wrong Jacobian entry E_kl
// moves v^T J u by v_k E_kl u_l, at least |E_kl| / (4 sqrt(m n)), whatever the seed (torch
// draws uniform [0, 1) entries, which can be arbitrarily close to 0 and hide that entry).
// Positive entries also keep c * 1 1^T errors (a constant added to every grad, a broadcast
// dimension reduced wrongly) from cancelling in the projection.
at::Tensor bounded_unit(int64_t n, at::Generator& gen) {
  at::Tensor u = uniform_cpu(n, gen);
  double* p = u.mutable_data_ptr<double>();
  for (int64_t k = 0; k < n; ++k) p[k] += 1.0;
  const double norm = norm2(values_of(u));
  if (norm > 0) {
    for (int64_t k = 0; k < n; ++k) p[k] /= norm;
  }
  return u;
}

/// True when `g` holds a nonzero element (NaN counts as nonzero).
bool has_nonzero(const at::Tensor& g) {
  if (!g.defined() || g.numel() == 0) return false;
  const at::Tensor flat = dense_double(g);  // holds the elements values_of points into
  const auto values = values_of(flat);
  return std::any_of(values.begin(), values.end(), [](double x) { return x != 0; });
}

/// One check_function call: the state the checks share, one member function per check.
class Checker {
 public:
  Checker(const Function& f, const std::vector<at::Tensor>& point, const GradcheckOptions& opt,
          const Tolerances& tol, Order order, GradcheckResult& result)
      : f_(f),
        point_(point),
        opt_(opt),
        tol_(tol),
        second_order_(order == Order::kSecond),
        result_(result),
        num_inputs_(point.size()),
        gen_(cpu_generator(opt.seed)) {}

  Checked run() {
    evaluate_with_grad();
    choose_numerical_method();
    if (opt_.check_forward_grad_mode) check_forward_grad_mode();
    if (c_.diff.empty()) {
      check_unconnected_outputs();
      return std::move(c_);
    }
    for (auto o : c_.diff) diff_outputs_.push_back(c_.outputs[o]);
    num_outputs_ = diff_outputs_.size();
    try {
      const JacobianSize size = jacobian_size(c_.leaves, diff_outputs_);
      if (opt_.mode == Mode::kSlow && size.fits(opt_)) {
        check_jacobians_slow();
      } else {
        if (opt_.mode == Mode::kSlow) result_.notes.push_back(prefix() + size.fast_mode_note(opt_));
        check_jacobians_fast();
      }
    } catch (const UnstableOutputs& e) {
      fail_unstable(e);
    }
    report_reentrancy();
    report_grad_metadata();
    if (f64_ && (!f64_->why().empty() || f64_in_float32_)) {
      const std::string why = f64_in_float32_ ? "none of its values shows float64 precision: each "
                                                "is 0 or a float32 number, as where it computes "
                                                "in float32 or returns no grad"
                                              : f64_->why();
      result_.notes.push_back(prefix() + "the float64 backward is unavailable (" + why +
                              "): entries within their block's rounding bound only passed, and "
                              "a wrong value there may pass");
    }
    if (opt_.check_grad_output_scaling && !backward_failed_) check_grad_output_scaling();
    if (opt_.check_undefined_grad && !backward_failed_) check_undefined_grads();
    return std::move(c_);
  }

 private:
  // ---- the checks, in the order run() calls them --------------------------------------------

  /// Fresh leaves and the forward under grad mode; which outputs are differentiable. The
  /// function's own errors propagate from here (FunctionRaised).
  void evaluate_with_grad() {
    for (const auto& p : point_) c_.leaves.push_back(clone_like(p).requires_grad_(true));
    {
      at::AutoGradMode grad_mode(true);
      c_.outputs = f_.eval(c_.leaves);
    }
    c_.output_names = f_.output_names();
    for (std::size_t o = 0; o < c_.outputs.size(); ++o) {
      const auto& y = c_.outputs[o];
      if (y.defined() && at::isFloatingType(y.scalar_type()) && y.requires_grad())
        c_.diff.push_back(o);
    }
    if (!second_order_) {
      result_.inputs = f_.input_names;
      result_.outputs.clear();
      for (auto o : c_.diff) result_.outputs.push_back(out_name(o));
    }
  }

  /// Central differences in float64 where the point is (or the op runs) in float64, else
  /// what options.low_precision says; builds the numerical side.
  void choose_numerical_method() {
    const c10::ScalarType low = lowest_precision(point_);
    rule_.eps = tol_.eps;
    std::string method = "central";
    std::vector<at::Tensor> reference_base;
    if (low != at::kDouble) {
      switch (opt_.low_precision) {
        case LowPrecisionMethod::kCentral:
          nominal_step_ = true;
          method = "central (own dtype)";
          break;
        case LowPrecisionMethod::kRidders: method = use_ridders(); break;
        case LowPrecisionMethod::kAuto:
        case LowPrecisionMethod::kFloat64Reference: {
          std::string why = "no float64 evaluator";
          if (f_.eval_reference) {
            try {
              reference_base = float64_reference_outputs(why);
            } catch (const std::exception& e) {
              why = one_line_error(e);
            }
          }
          if (reference_) {
            method = "central (float64 reference)";
            f64_.emplace(f_, point_, c_.diff, result_.counts);
          } else {
            method = use_ridders();
            result_.notes.push_back(prefix() + "float64 reference unavailable (" + why +
                                    "); using Ridders' extrapolation in " + dtype_name(low));
          }
          break;
        }
      }
    }
    if (!second_order_) result_.method = method;
    steps_ = rule_.ridders
                 ? "Ridders steps " + short_sci(rule_.initial) + " * max(1, |x|) / " +
                       short_sci(rule_.shrink) + "^k, " + std::to_string(rule_.levels) + " levels"
                 : "eps " + short_sci(rule_.eps);
    num_.emplace(f_, point_, reference_, rule_, std::move(reference_base));
    num_->set_input_names(f_.input_names);
  }

  /// The forward under grad mode against the forward without it (same dtype), as Ceres'
  /// GradientChecker: the Jacobian check needs a forward that ignores grad mode.
  void check_forward_grad_mode() {
    std::vector<at::Tensor> plain;
    if (reference_) {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> copies;
      copies.reserve(point_.size());
      for (const auto& p : point_) copies.push_back(clone_like(p));
      plain = f_.eval(copies);
    } else {
      plain = num_->base();
    }
    for (std::size_t o = 0; o < c_.outputs.size() && o < plain.size(); ++o) {
      const auto& a = c_.outputs[o];
      const auto& b = plain[o];
      if (!a.defined() || !b.defined() || !at::isFloatingType(a.scalar_type())) continue;
      if (a.sizes() != b.sizes()) continue;  // the stability check reports it
      const at::Tensor da = flat_double(a), db = flat_double(b);
      // Once per output, not per perturbation: allclose's rule (NaN matches NaN, |a - b| finite).
      if (all_close(values_of(da), values_of(db), tol_.rtol, tol_.atol)) continue;
      const double worst = (da - db).abs().max().item<double>();
      fail(Check::kForwardGradMode, -1, -1,
           "forward output " + std::to_string(o) + " ('" + out_name(o) +
               "') differs with and without grad mode",
           "  max |difference| " + sci(worst) +
               "; the Jacobian check needs a deterministic forward that ignores grad mode");
    }
  }

  /// No output requires grad: the numerical Jacobian must be zero (torch's
  /// _check_no_differentiable_outputs).
  void check_unconnected_outputs() {
    result_.notes.push_back(
        prefix() + "no output requires grad: checking that the numerical Jacobian is zero");
    try {
      for (std::size_t j = 0; j < num_inputs_; ++j) {
        double worst = 0;
        int64_t worst_row = -1;
        auto scan = [&](const Sampled& s) {
          if (s.first_raw.numel() == 0) return;
          const at::Tensor a = s.levels.front().diff.abs();
          const double m = a.max().item<double>();
          if ((s.first_raw != 0).any().item<bool>() && (m > worst || worst_row < 0)) {
            worst = m;
            worst_row = a.argmax().item<int64_t>();
          }
        };
        if (opt_.mode == Mode::kSlow) {
          for (int64_t k = 0; k < num_->numel(j); ++k) scan(num_->sample_element(j, k));
        } else {
          scan(num_->sample_direction(j, bounded_unit(num_->numel(j), gen_)));
        }
        if (worst_row < 0) continue;
        std::size_t o = 0;
        while (o + 1 < c_.outputs.size() && num_->rows(o).second <= worst_row) ++o;
        fail(Check::kNonDifferentiableOutput, -1, static_cast<int>(j),
             "Numerical gradient for output " + std::to_string(o) + " with respect to " +
                 in_label(j) + " expected to be zero",
             "  no output requires grad (none is connected to an input that requires grad), "
             "yet perturbing '" +
                 f_.input_names[j] + "' changes output " + std::to_string(o) + " ('" + out_name(o) +
                 "'): max |numerical derivative| " + sci(worst));
      }
    } catch (const UnstableOutputs& e) {
      fail_unstable(e);
    }
  }

  /// Slow mode: full Jacobians per (output, input) pair, entry by entry; reentrancy on one
  /// dense random grad_output per output.
  void check_jacobians_slow() {
    std::vector<std::vector<at::Tensor>> ana(num_outputs_);
    try {
      for (std::size_t i = 0; i < num_outputs_; ++i) ana[i] = analytical_block(i);
      check_reentrancy_dense();
    } catch (const UnstableOutputs&) {
      throw;
    } catch (const std::exception& e) {
      backward_error(e, "computing the analytical Jacobian (one VJP per output element)");
      return;
    }
    // Every input's block first: an output's rounding depends on all the terms it sums.
    std::vector<NumericalBlock> blocks;
    std::vector<at::Tensor> widths(num_inputs_);
    for (std::size_t j = 0; j < num_inputs_; ++j) blocks.push_back(numerical_block(j, &widths[j]));
    if (tol_.estimated) widen_noise_for_sums(blocks, point_, widths, num_->row_roundoff());
    std::vector<BlockCompare> compared = compare_all(blocks, ana);
    if (tol_.estimated && !rule_.ridders && !nominal_step_ &&
        refine_loose_columns(*num_, tol_.eps, compared, num_outputs_, blocks, widths)) {
      compared = compare_all(blocks, ana);
    }
    const bool any_failed = std::any_of(compared.begin(), compared.end(),
                                        [](const BlockCompare& bc) { return !bc.pair.passed; });
    if (tol_.estimated && any_failed) {
      widen_to_measured_noise(blocks, widths);
      compared = compare_all(blocks, ana);
    }
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      const NumericalBlock& nb = blocks[j];
      for (std::size_t i = 0; i < num_outputs_; ++i) {
        BlockCompare& bc = compared[j * num_outputs_ + i];
        if (keep(bc.pair)) {
          const auto [r0, r1] = num_->rows(c_.diff[i]);
          bc.pair.numerical = nb.value.slice(0, r0, r1).clone();
          bc.pair.analytical = ana[i][j];
        } else {
          bc.pair.tolerance = at::Tensor();
        }
        note_kinks(bc.pair);
        report_pair(bc, i, j, "");
        pairs().push_back(std::move(bc.pair));
      }
    }
  }

  /// Fast mode: v^T (J u) numerically against (v^T J) u analytically, per (output, input)
  /// pair; a failing pair is compared again entry by entry for the report.
  void check_jacobians_fast() {
    std::vector<at::Tensor> u(num_inputs_), v(num_outputs_), v_double(num_outputs_);
    for (std::size_t j = 0; j < num_inputs_; ++j) u[j] = bounded_unit(num_->numel(j), gen_);
    for (std::size_t i = 0; i < num_outputs_; ++i) {
      const auto& y = diff_outputs_[i];
      v[i] = to_device_of(bounded_unit(y.numel(), gen_), y).view(y.sizes());
      v_double[i] = flat_double(v[i]);  // as rounded to the output's dtype
    }
    std::vector<std::vector<at::Tensor>> vj(num_outputs_);  // (v_i^T J_ij) [n_j]
    try {
      for (std::size_t i = 0; i < num_outputs_; ++i) {
        const auto g1 = vjp({diff_outputs_[i]}, {v[i]}, c_.leaves, result_.counts);
        const auto g2 = vjp({diff_outputs_[i]}, {v[i]}, c_.leaves, result_.counts);
        note_grad_metadata(g1);
        for (std::size_t j = 0; j < num_inputs_; ++j) {
          vj[i].push_back(to_rows(g1, j));
          note_reentrancy(vj[i][j], to_rows(g2, j), j);
        }
      }
    } catch (const std::exception& e) {
      backward_error(e, "computing v^T J (one VJP per output)");
      return;
    }
    signs_from_analytical(u, vj);
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      const Sampled s = num_->sample_direction(j, u[j]);
      std::vector<std::size_t> failing;
      std::vector<PairReport> fast_pairs;
      for (std::size_t i = 0; i < num_outputs_; ++i) {
        fast_pairs.push_back(compare_projection(s, vj[i][j], u[j], v_double[i], i, j));
        judge_projection_in_float64(s, u[j], v_double[i], i, j, fast_pairs.back());
        if (!fast_pairs.back().passed) failing.push_back(i);
      }
      if (!failing.empty()) recheck_slow(j, failing, fast_pairs);
      for (auto& p : fast_pairs) pairs().push_back(std::move(p));
    }
  }

  /// Reentrancy: two backward runs with the same input and grad_output, at most nondet_tol
  /// apart (torch's _check_analytical_jacobian_attributes).
  void report_reentrancy() {
    if (backward_failed_ || reentrancy_input_ < 0 || reentrancy_worst_ <= opt_.nondet_tol) return;
    const auto j = static_cast<std::size_t>(reentrancy_input_);
    fail(Check::kReentrancy, -1, static_cast<int>(j),
         "Backward is not reentrant, i.e., running backward with the same input and grad_output "
         "twice gives different values",
         "  max difference " + sci(reentrancy_worst_) + " in the grad of " + in_label(j) +
             ", above nondet_tol " + sci(opt_.nondet_tol) +
             " (nondeterministic kernels, e.g. atomicAdd: raise nondet_tol)");
  }

  /// Grads of their input's device, dtype and shape; recorded during the Jacobian check,
  /// reported after its failures.
  void report_grad_metadata() {
    for (const auto& [j, what] : metadata_issues_) {
      fail(Check::kGradMetadata, -1, j,
           "Gradient for " + in_label(static_cast<std::size_t>(j)) + " " + what);
    }
  }

  /// Zero grad_outputs give zero grads (torch's _test_backward_mul_by_grad_output).
  void check_grad_output_scaling() {
    std::vector<at::Tensor> zeros;
    zeros.reserve(diff_outputs_.size());
    for (const auto& y : diff_outputs_) zeros.push_back(at::zeros_like(y).requires_grad_(false));
    try {
      const auto grads = vjp(diff_outputs_, zeros, c_.leaves, result_.counts);
      for (std::size_t j = 0; j < num_inputs_; ++j) {
        if (!has_nonzero(grads[j])) continue;
        const double worst = flat_double(grads[j]).abs().max().item<double>();
        fail(Check::kGradOutputScaling, -1, static_cast<int>(j),
             "backward not multiplied by grad_output",
             "  with every grad_output zero, the grad of " + in_label(j) +
                 " is not zero (max |grad| " + sci(worst) + ")");
      }
    } catch (const std::exception& e) {
      fail(Check::kGradOutputScaling, -1, -1, "backward not multiplied by grad_output",
           "  with every grad_output zero, backward raised: " + one_line_error(e));
    }
  }

  /// Undefined output grads, all at once, then (several outputs) each in turn: backward must
  /// survive them and give undefined or zero grads (torch's _test_undefined_backward_mode).
  void check_undefined_grads() {
    std::vector<std::vector<bool>> scenarios{std::vector<bool>(num_outputs_, true)};
    if (num_outputs_ > 1) {
      for (std::size_t k = 0; k < num_outputs_; ++k) {
        std::vector<bool> s(num_outputs_, false);
        s[k] = true;
        scenarios.push_back(std::move(s));
      }
    }
    for (const auto& undefined : scenarios) {
      std::vector<at::Tensor> zeros;
      std::string which;
      for (std::size_t i = 0; i < num_outputs_; ++i) {
        const auto& y = diff_outputs_[i];
        zeros.push_back(at::zeros_like(y).requires_grad_(false));
        if (undefined[i]) {
          which +=
              (which.empty() ? "" : ", ") + std::to_string(i) + " ('" + out_name(c_.diff[i]) + "')";
        }
      }
      const bool all = std::count(undefined.begin(), undefined.end(), true) ==
                       static_cast<std::ptrdiff_t>(num_outputs_);
      const std::string scenario = all && num_outputs_ > 1
                                       ? "with every output grad undefined"
                                       : "with the grad of output " + which + " undefined";
      try {
        const auto grads =
            vjp_undefined(diff_outputs_, zeros, undefined, c_.leaves, result_.counts);
        for (std::size_t j = 0; j < num_inputs_; ++j) {
          if (!has_nonzero(grads[j])) continue;
          fail(Check::kUndefinedGrad, -1, static_cast<int>(j),
               "backward must handle undefined output grads: input grads must be undefined "
               "or zero when every output grad is undefined or zero",
               "  " + scenario + ", the grad of " + in_label(j) + " is not zero");
          return;
        }
      } catch (const std::exception& e) {
        fail(Check::kUndefinedGrad, -1, -1,
             "backward must handle undefined output grads, but it raised an error",
             "  " + scenario + ": " + one_line_error(e));
        return;
      }
    }
  }

  // ---- the Jacobian check's parts ------------------------------------------------------------

  /// Analytical rows of output i (slow): [m_i, n_j] per input, one VJP per output element with
  /// a one-hot grad_output.
  std::vector<at::Tensor> analytical_block(std::size_t i) {
    const auto& y = diff_outputs_[i];
    const int64_t m = y.numel();
    std::vector<at::Tensor> rows(num_inputs_);
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      rows[j] = at::zeros({m, c_.leaves[j].numel()}, at::kDouble);
    }
    for (int64_t r = 0; r < m; ++r) {
      const auto grads = vjp({y}, {one_hot_like(y, r)}, c_.leaves, result_.counts);
      note_grad_metadata(grads);
      for (std::size_t j = 0; j < num_inputs_; ++j) {
        const at::Tensor row = to_rows(grads, j);
        if (row.numel() == rows[j].size(1)) set_row(rows[j], r, row);
      }
    }
    return rows;
  }

  /// Two backward runs per output with the same dense random grad_output (uniform in [-1, 1]):
  /// a nondeterministic backward (atomicAdd reductions, randomness) differs on any
  /// grad_output, and a dense one drives every reduction at once. torch runs each one-hot VJP
  /// twice instead: 2 VJPs per output here against m per output there.
  void check_reentrancy_dense() {
    for (std::size_t i = 0; i < num_outputs_; ++i) {
      const auto& y = diff_outputs_[i];
      const at::Tensor g = random_grad_output(y, gen_);
      const auto g1 = vjp({y}, {g}, c_.leaves, result_.counts);
      const auto g2 = vjp({y}, {g}, c_.leaves, result_.counts);
      note_grad_metadata(g1);
      for (std::size_t j = 0; j < num_inputs_; ++j) {
        note_reentrancy(to_rows(g1, j), to_rows(g2, j), j);
      }
    }
  }

  /// Numerical columns of input j (slow), one element perturbed at a time; `widths` (if
  /// given) receives each column's perturbation at the smallest step, float64 [n_j].
  NumericalBlock numerical_block(std::size_t j, at::Tensor* widths = nullptr) {
    const int64_t n = num_->numel(j);
    const int64_t rows = num_->total();
    const auto block = [&] { return at::empty({rows, n}, at::TensorOptions().dtype(at::kDouble)); };
    NumericalBlock b{block(), block(), block(), block(), block(), rule_.ridders, {}, {}};
    double* value = b.value.mutable_data_ptr<double>();
    double* error = b.error.mutable_data_ptr<double>();
    double* left = b.left.mutable_data_ptr<double>();
    double* right = b.right.mutable_data_ptr<double>();
    double* noise = b.noise.mutable_data_ptr<double>();
    // Column k of a row-major [rows, n] block from a float64 [rows] vector.
    const auto put = [&](double* dst, int64_t k, const at::Tensor& column) {
      const auto c = values_of(column);
      for (int64_t r = 0; r < rows; ++r) dst[r * n + k] = c[r];
    };
    if (widths != nullptr) *widths = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
    for (int64_t k = 0; k < n; ++k) {
      const Sampled s = num_->sample_element(j, k);
      if (widths != nullptr) widths->mutable_data_ptr<double>()[k] = s.width;
      // Each level's difference per unit of the perturbation applied (the input's dtype may
      // round x +- h), unless the nominal step is the rule.
      std::vector<at::Tensor> samples;
      for (const auto& l : s.levels) {
        const double w = l.w.item<double>();
        if (nominal_step_ || w == 1.0) {
          samples.push_back(l.diff);
        } else {
          const auto d = values_of(l.diff);
          samples.push_back(tabulate(rows, [&](int64_t r) { return w != 0 ? d[r] / w : 0.0; }));
        }
      }
      if (samples.size() == 1) {
        put(value, k, samples[0]);
        for (int64_t r = 0; r < rows; ++r) error[r * n + k] = 0.0;
      } else {
        const Estimate e = ridders_extrapolate(samples, rule_.shrink);
        put(value, k, e.value);
        put(error, k, e.error);
      }
      put(left, k, s.left);
      put(right, k, s.right);
      put(noise, k, s.noise);
    }
    return b;
  }

  /// Every (output, input) pair of the slow-mode blocks compared, input-major.
  std::vector<BlockCompare> compare_all(const std::vector<NumericalBlock>& blocks,
                                        const std::vector<std::vector<at::Tensor>>& ana) {
    std::vector<BlockCompare> out;
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      for (std::size_t i = 0; i < num_outputs_; ++i)
        out.push_back(compare_pair(blocks[j], ana[i][j], i, j));
    }
    return out;
  }

  /// Widens the blocks' rounding estimates to the noise measured near the point
  /// (noise_level.h), measured once per check and only when the model's bounds do not hold:
  /// kNoiseDirections (kNoisePoints - 1) forward calls.
  void widen_to_measured_noise(std::vector<NumericalBlock>& blocks,
                               const std::vector<at::Tensor>& widths) {
    if (!noise_sigma_.defined()) {
      at::Generator gen = cpu_generator(opt_.seed + 5);
      try {
        const bool float64_point = lowest_precision(point_) == at::kDouble;
        noise_sigma_ = measured_noise(*num_, gen, rule_.ridders ? 0.0 : tol_.eps,
                                      float64_point ? kStepScaleCap : INFINITY);
      } catch (const std::exception&) {
        // f unstable or raising along the probe: the modelled bounds stand alone.
        noise_sigma_ = at::zeros({num_->total()}, at::kDouble);
      }
    }
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (std::size_t o = 0; o < num_->base().size(); ++o) ranges.push_back(num_->rows(o));
    widen_noise_to_measured(blocks, noise_sigma_,
                            output_rounding_floor(num_->base_flat(), num_->row_roundoff(), ranges),
                            widths);
  }

  /// The entry-by-entry comparison of output i's rows of `nb` with `ana` ([m_i, n_j]).
  BlockCompare compare_pair(const NumericalBlock& nb, const at::Tensor& ana, std::size_t i,
                            std::size_t j) {
    const auto [r0, r1] = num_->rows(c_.diff[i]);
    const NumericalBlock rows{
        nb.value.slice(0, r0, r1),
        nb.error.slice(0, r0, r1),
        nb.left.slice(0, r0, r1),
        nb.right.slice(0, r0, r1),
        nb.noise.slice(0, r0, r1),
        rule_.ridders,
        nb.refined.defined() ? nb.refined.slice(0, r0, r1) : at::Tensor(),
        nb.side_slack.defined() ? nb.side_slack.slice(0, r0, r1) : at::Tensor()};
    const auto compare = [&](const at::Tensor& ana64) {
      return compare_block(rows, ana, analytical_roundoff(i, j), opt_.nondet_tol, tol_,
                           opt_.detect_nondifferentiable, diff_outputs_[i].sizes(),
                           c_.leaves[j].sizes(), ana64);
    };
    BlockCompare bc = compare({});
    if (f64_ && !bc.rounding_only_rows.empty()) {
      at::Tensor ana64 = f64_->block(i, j, ana.size(1), bc.rounding_only_rows);
      if (ana64.defined()) bc = compare(ana64);
      if (!bc.float64_failed.empty() &&
          drop_unconverged(*num_, j, r0, tol_.eps, rows.value, bc.float64_failed, ana64)) {
        bc = compare(ana64);
      }
      f64_in_float32_ = f64_in_float32_ || bc.float64_in_float32;
    }
    bc.pair.output = static_cast<int>(i);
    bc.pair.input = static_cast<int>(j);
    bc.pair.output_name = out_name(c_.diff[i]);
    bc.pair.input_name = f_.input_names[j];
    return bc;
  }

  /// Gives each u_j's entries the signs of the analytical sum_i v_i^T J_ij / |v_i^T J_ij| (a
  /// random sign where it is 0), magnitudes unchanged: the analytical projection then adds
  /// |terms| without cancelling, so a scale error c J moves it by c times a sum of magnitudes,
  /// and every |u_l| keeps its lower bound. Both sides use the same u.
  void signs_from_analytical(std::vector<at::Tensor>& u,
                             const std::vector<std::vector<at::Tensor>>& vj) {
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      const int64_t n = u[j].numel();
      std::vector<double> toward(static_cast<std::size_t>(n), 0.0);
      for (std::size_t i = 0; i < num_outputs_; ++i) {
        const auto a = values_of(vj[i][j]);
        TORCH_INTERNAL_ASSERT(static_cast<int64_t>(a.size()) == n, "v^T J of ", a.size(),
                              " elements for input ", j, " of ", n);
        const double na = norm2(a);
        if (!(na > 0 && std::isfinite(na))) continue;
        for (int64_t k = 0; k < n; ++k) toward[k] += a[k] / na;
      }
      const at::Tensor coin = uniform_cpu(n, gen_);
      const auto heads = values_of(coin);
      double* p = u[j].mutable_data_ptr<double>();
      for (int64_t k = 0; k < n; ++k) {
        const double t = toward[k];
        const bool negative = t != 0 ? t < 0 : heads[k] < 0.5;
        p[k] = negative ? -std::abs(p[k]) : std::abs(p[k]);
      }
    }
  }

  /// v_i^T (J_ij u_j) from the differences in `s` against (v_i^T J_ij) u_j from `vj`; the
  /// numerical side extrapolated over the step levels.
  PairReport compare_projection(const Sampled& s, const at::Tensor& vj, const at::Tensor& u,
                                const at::Tensor& v_double, std::size_t i, std::size_t j,
                                std::optional<double> u_ana = std::nullopt) const {
    const auto [r0, r1] = num_->rows(c_.diff[i]);
    const int64_t m = r1 - r0;
    const auto v = values_of(v_double), a = values_of(vj), dir = values_of(u);
    const int64_t n = static_cast<int64_t>(a.size());
    TORCH_INTERNAL_ASSERT(a.size() == dir.size() && v.size() == static_cast<std::size_t>(m),
                          "compare_projection: v^T J of ", a.size(), " elements, u of ", dir.size(),
                          ", v of ", v.size(), " for ", m, " output rows");
    const double analytical = sum_over(n, [&](int64_t k) { return a[k] * dir[k]; });
    // The error of each level's projection, numerical minus analytical (the analytical side
    // along the perturbation actually applied, w, where the input's dtype rounded it).
    std::vector<double> e_levels;
    for (const auto& l : s.levels) {
      const double* diff = values_of(l.diff).data() + r0;
      const double nv = sum_over(m, [&](int64_t k) { return v[k] * diff[k]; });
      const auto w = values_of(l.w);
      const double av =
          nominal_step_ ? analytical : sum_over(n, [&](int64_t k) { return a[k] * w[k]; });
      e_levels.push_back(nv - av);
    }
    const auto [e_value, e_error] = ridders_extrapolate(e_levels, rule_.shrink);
    double numerical = analytical + e_value;
    const double* right = values_of(s.right).data() + r0;
    const double* left = values_of(s.left).data() + r0;
    const double spread =
        sum_over(m, [&](int64_t k) { return std::abs(v[k]) * std::abs(right[k] - left[k]); });
    // Ridders: its error estimate covers truncation; the spread (at a step far larger) counts
    // only where the one-sided sides disagree like a kink's.
    const bool kink_like =
        spread > 0.1 * sum_over(m, [&](int64_t k) {
                   return std::abs(v[k]) * std::max(std::abs(right[k]), std::abs(left[k]));
                 });
    const double half_spread = rule_.ridders && !kink_like ? 0.0 : spread / 2;
    // Across a kink an extrapolation means nothing: judge around the one-sided midpoint.
    if (rule_.ridders && kink_like && opt_.detect_nondifferentiable) {
      numerical = sum_over(m, [&](int64_t k) { return v[k] * (right[k] + left[k]); }) / 2;
    }
    const double* noise_k = values_of(s.noise).data() + r0;
    const double noise = sum_over(m, [&](int64_t k) { return std::abs(v[k]) * noise_k[k]; });
    const double u_l1 = sum_over(n, [&](int64_t k) { return std::abs(dir[k]); });
    const ProjectionBound bound = projection_bound(
        numerical, e_error, half_spread, noise, norm2(a) * norm2(dir),
        u_ana.value_or(analytical_roundoff(i, j)), opt_.nondet_tol * u_l1, rule_.ridders, tol_);
    PairReport p = projection_report(numerical, analytical, bound);
    p.output = static_cast<int>(i);
    p.input = static_cast<int>(j);
    p.output_name = out_name(c_.diff[i]);
    p.input_name = f_.input_names[j];
    return p;
  }

  /// A float32/16-bit projection `p` that passed only by its rounding bound (its error above
  /// the numerical error estimate), compared again with the backward run in float64
  /// (float64_backward.h): where that fails to float64's bound and the float32 value sides with
  /// it (within half its distance to the numerical value), `p` becomes that failing projection,
  /// and slow mode judges the pair entry by entry (a float32 exp 25 % off for x < 0 passed on
  /// linspace(-3, 11)). Costs one float64 forward and one VJP per output, only there. Not for a
  /// pair too large for slow mode, whose check alone tells a float64 run that computes in
  /// float32 from a wrong formula.
  void judge_projection_in_float64(const Sampled& s, const at::Tensor& u,
                                   const at::Tensor& v_double, std::size_t i, std::size_t j,
                                   PairReport& p) {
    if (!f64_ || !p.passed || !(p.worst.abs_error > p.worst.error_estimate)) return;
    if (!jacobian_size({c_.leaves[j]}, {diff_outputs_[i]}).fits(opt_)) return;
    const at::Tensor vj64 = f64_->projection(i, v_double, j, num_->numel(j));
    if (!vj64.defined()) return;
    PairReport p64 = compare_projection(s, vj64, u, v_double, i, j, unit_roundoff(at::kDouble));
    if (p64.passed ||
        !(std::abs(p.worst.analytical - p64.worst.analytical) <= p64.worst.abs_error / 2))
      return;
    p64.worst.float64_analytical = p64.worst.analytical;
    p = std::move(p64);
  }

  /// Slow mode on the pairs of input j that fast mode failed, whose verdict stands (slow mode
  /// is the reference; the projection's tolerance has no model of multi-term rounding), with
  /// the fast-mode figures in the report.
  void recheck_slow(std::size_t j, const std::vector<std::size_t>& failing,
                    std::vector<PairReport>& fast_pairs) {
    const JacobianSize pair = jacobian_size({c_.leaves[j]}, diff_outputs_);
    if (!pair.fits(opt_)) {
      for (auto i : failing) {
        fail(Check::kJacobian, static_cast<int>(i), static_cast<int>(j),
             "Jacobian mismatch for " + out_label(i) + " with respect to " + in_label(j) +
                 " in fast mode",
             fast_mode_figures(fast_pairs[i], tol_.estimated, opt_.seed) + "\n" +
                 recheck_skipped(pair.input_elements, pair.output_elements, opt_));
      }
      return;
    }
    at::Tensor widths;
    std::vector<NumericalBlock> one{numerical_block(j, &widths)};
    if (tol_.estimated) {
      widen_noise_for_sums(one, {point_[j]}, {widths}, num_->row_roundoff());
      widen_to_measured_noise(one, {widths});
    }
    NumericalBlock& nb = one.front();
    const bool refine = tol_.estimated && !rule_.ridders && !nominal_step_;
    for (auto i : failing) {
      std::vector<at::Tensor> rows;
      try {
        rows = analytical_block(i);
      } catch (const UnstableOutputs&) {
        throw;
      } catch (const std::exception& e) {
        backward_error(e, "computing the analytical Jacobian for the report");
        return;
      }
      const std::string fd = fast_mode_figures(fast_pairs[i], tol_.estimated, opt_.seed);
      BlockCompare bc = compare_pair(nb, rows[j], i, j);
      if (refine && refine_columns(*num_, j, tol_.eps, bc.loose_columns, nb, widths)) {
        bc = compare_pair(nb, rows[j], i, j);
      }
      note_kinks(bc.pair);
      const auto [r0, r1] = num_->rows(c_.diff[i]);
      bc.pair.numerical = nb.value.slice(0, r0, r1).clone();
      bc.pair.analytical = rows[j];
      report_pair(bc, i, j, fd);
      PairReport merged = std::move(bc.pair);
      merged.projected = false;
      fast_pairs[i] = std::move(merged);
    }
  }

  /// A failing pair as a failure: a kink when every bad entry is at one, else a Jacobian
  /// mismatch with its worst entry. `fast_detail` (fast mode) heads the detail.
  void report_pair(const BlockCompare& bc, std::size_t i, std::size_t j,
                   const std::string& fast_detail) {
    const PairReport& p = bc.pair;
    const std::string mismatch =
        "Jacobian mismatch for " + out_label(i) + " with respect to " + in_label(j);
    if (p.passed) {
      if (fast_detail.empty()) return;
      result_.notes.push_back(prefix() + mismatch + " in fast mode (" + fast_detail.substr(2) +
                              "); slow mode on the pair found every entry within tolerance: "
                              "passed");
      return;
    }
    const std::string head = fast_detail.empty() ? "" : fast_detail + "\n";
    if (p.bad_entries == p.nondifferentiable_entries) {
      report_kink(bc, i, j, head);
      return;
    }
    fail(
        Check::kJacobian, static_cast<int>(i), static_cast<int>(j), mismatch,
        head + describe_worst(p, out_name(c_.diff[i]), f_.input_names[j], tol_, steps_, opt_.seed));
  }

  /// Every bad entry of the pair is where the one-sided differences disagree: "not
  /// differentiable at x[k]" rather than a mismatch.
  void report_kink(const BlockCompare& bc, std::size_t i, std::size_t j, const std::string& head) {
    const PairReport& p = bc.pair;
    const auto& w = bc.worst_nd;
    std::ostringstream os;
    os << "  output " << i << " ('" << out_name(c_.diff[i]) << "')" << format_index(w.output_index)
       << ": left and right one-sided differences disagree; central difference " << sci(w.numerical)
       << ", analytical " << sci(w.analytical) << " (" << p.bad_entries
       << " such entries); move the sample away from the kink";
    fail(Check::kNotDifferentiable, static_cast<int>(i), static_cast<int>(j),
         "not differentiable at " + f_.input_names[j] + format_index(w.input_index) + " (output " +
             std::to_string(i) + " with respect to " + in_label(j) + ")",
         head + os.str());
  }

  // ---- helpers ---------------------------------------------------------------------------------

  /// Unit roundoff of the backward that gives output i's rows for input j: the coarser of the
  /// two dtypes.
  double analytical_roundoff(std::size_t i, std::size_t j) const {
    return std::max({unit_roundoff(c_.leaves[j].scalar_type()),
                     unit_roundoff(diff_outputs_[i].scalar_type()), opt_.backward_roundoff});
  }

  /// Notes the entries of `p` accepted at a kink within the step, and those the differences
  /// cannot judge to 1 %.
  void note_kinks(const PairReport& p) {
    if (p.loose_entries > 0) {
      result_.notes.push_back(
          prefix() + out_label(static_cast<std::size_t>(p.output)) + " with respect to " +
          in_label(static_cast<std::size_t>(p.input)) + ": " + std::to_string(p.loose_entries) +
          " of " + std::to_string(p.entries) +
          " entries have a numerical error estimate above 1% of their row's largest entry (" +
          steps_ + "); a wrong value there may pass");
    }
    if (p.kink_entries == 0) return;
    result_.notes.push_back(prefix() + out_label(static_cast<std::size_t>(p.output)) +
                            " with respect to " + in_label(static_cast<std::size_t>(p.input)) +
                            ": " + std::to_string(p.kink_entries) +
                            " entries lie at a kink within the step; their analytical values are "
                            "between the one-sided derivatives (subgradients), accepted");
  }

  std::string use_ridders() {
    rule_.ridders = true;
    rule_.initial = opt_.ridders_initial_step;
    rule_.shrink = opt_.ridders_shrink;
    rule_.levels = std::max(1, opt_.ridders_levels);
    return "ridders";
  }

  /// The op's outputs for float64 copies of the point; sets reference_ when every floating
  /// output is float64, else says why not in `why`.
  std::vector<at::Tensor> float64_reference_outputs(std::string& why) {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> p64;
    p64.reserve(point_.size());
    for (const auto& p : point_) p64.push_back(clone_like(p, at::kDouble));
    auto outs = f_.eval_reference(p64);
    for (const auto& o : outs) {
      if (o.defined() && at::isFloatingType(o.scalar_type()) && o.scalar_type() != at::kDouble) {
        why = "its outputs stay low precision for float64 inputs";
        return {};
      }
    }
    reference_ = true;
    return outs;
  }

  void note_grad_metadata(const std::vector<at::Tensor>& grads) {
    if (!opt_.check_grad_metadata) return;
    for (std::size_t j = 0; j < num_inputs_; ++j) {
      const auto& g = grads[j];
      const auto& x = c_.leaves[j];
      if (!g.defined() || metadata_seen_[j]) continue;
      std::ostringstream os;
      if (g.device() != x.device()) {
        os << "is on " << g.device() << ", but the input is on " << x.device();
      } else if (g.scalar_type() != x.scalar_type()) {
        os << "has dtype " << g.scalar_type() << ", but the input has " << x.scalar_type();
      } else if (g.sizes() != x.sizes()) {
        os << "has shape " << format_sizes(g.sizes()) << ", but the input has "
           << format_sizes(x.sizes());
      } else {
        continue;
      }
      metadata_seen_[j] = true;
      metadata_issues_.emplace_back(static_cast<int>(j), os.str());
    }
  }

  void note_reentrancy(const at::Tensor& a, const at::Tensor& b, std::size_t j) {
    if (a.numel() == 0) return;
    const double d = max_abs_diff(values_of(a), values_of(b));
    if (reentrancy_input_ < 0 || d > reentrancy_worst_) {
      reentrancy_worst_ = d;
      reentrancy_input_ = static_cast<int>(j);
    }
  }

  at::Tensor to_rows(const std::vector<at::Tensor>& grads, std::size_t j) const {
    const auto& g = grads[j];
    if (!g.defined()) return at::zeros({c_.leaves[j].numel()}, at::kDouble);
    return flat_double(g);
  }

  bool keep(const PairReport& p) const {
    return opt_.keep_jacobians || (!p.passed && p.entries <= (int64_t{1} << 22));
  }

  void backward_error(const std::exception& e, const std::string& when) {
    backward_failed_ = true;
    fail(Check::kBackwardError, -1, -1, "backward raised an error " + when,
         "  " + one_line_error(e));
  }

  void fail_unstable(const UnstableOutputs& e) {
    fail(Check::kOutputStability, -1, -1,
         "Expected the function to return outputs with the same count, shape and dtype when "
         "inputs are perturbed",
         std::string("  ") + e.what());
  }

  void fail(Check c, int i, int j, std::string headline, std::string detail = {}) {
    add_failure(result_, c, second_order_, i, j, std::move(headline), std::move(detail));
  }

  std::string in_label(std::size_t j) const {
    return "input " + std::to_string(j) + " ('" + f_.input_names[j] + "')";
  }
  std::string out_name(std::size_t o) const {
    return o < c_.output_names.size() ? c_.output_names[o] : "output " + std::to_string(o);
  }
  /// Differentiable output i as reports spell it (output_label).
  std::string out_label(std::size_t i) const {
    return output_label(c_.diff[i], out_name(c_.diff[i]));
  }
  std::string prefix() const { return second_order_ ? "second order: " : ""; }
  std::vector<PairReport>& pairs() {
    return second_order_ ? result_.second_order_pairs : result_.pairs;
  }

  const Function& f_;
  const std::vector<at::Tensor>& point_;
  const GradcheckOptions& opt_;
  const Tolerances tol_;
  const bool second_order_;
  GradcheckResult& result_;
  const std::size_t num_inputs_;
  at::Generator gen_;

  Checked c_;
  std::vector<at::Tensor> diff_outputs_;
  std::size_t num_outputs_ = 0;

  StepRule rule_;
  bool reference_ = false;     // differences of the op run in float64
  bool nominal_step_ = false;  // divide by eps, not by the perturbation applied
  std::string steps_;          // the step rule, for reports
  std::optional<Numerical> num_;
  std::optional<Float64Backward> f64_;  // the backward run in float64 (reference_)
  bool f64_in_float32_ = false;         // ... and it computes in float32
  at::Tensor noise_sigma_;  // the measured noise per output row (noise_level.h), once needed

  std::vector<std::pair<int, std::string>> metadata_issues_;
  std::vector<bool> metadata_seen_ = std::vector<bool>(num_inputs_, false);
  double reentrancy_worst_ = 0;
  int reentrancy_input_ = -1;
  bool backward_failed_ = false;
};

}  // namespace

void add_failure(GradcheckResult& result, Check check, bool second_order, int output, int input,
                 std::string headline, std::string detail) {
  if (second_order) headline = "second order: " + headline;
  result.failures.push_back(
      {check, second_order, output, input, std::move(headline), std::move(detail)});
  result.passed = false;
}

c10::ScalarType lowest_precision(const std::vector<at::Tensor>& tensors) {
  c10::ScalarType best = at::kDouble;
  for (const auto& t : tensors) {
    if (t.defined() && at::isFloatingType(t.scalar_type()) && rank(t.scalar_type()) < rank(best)) {
      best = t.scalar_type();
    }
  }
  return best;
}

Checked check_function(const Function& f, const std::vector<at::Tensor>& point,
                       const GradcheckOptions& options, const Tolerances& tol, Order order,
                       GradcheckResult& result) {
  return Checker(f, point, options, tol, order, result).run();
}

}  // namespace customop::gradcheck::detail
