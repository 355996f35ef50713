#include "detail/low_precision.h"

#include "detail/checker.h"
#include "detail/compare.h"
#include "detail/draws.h"
#include "detail/function.h"
#include "detail/numerical.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <customop/saved_rounding.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

using Call = std::function<void(torch::jit::Stack&)>;

/// The outputs compared and the grads of one run, float64 on the CPU.
struct Run {
  std::vector<at::Tensor> outs;   // one per differentiable output of the low run
  std::vector<at::Tensor> grads;  // one per differentiable input (undefined when unused)
  std::vector<c10::ScalarType> grad_dtypes;
};

/// What every run shares: the outputs compared and the cotangents (float64 values that the
/// low dtype holds exactly).
struct Plan {
  std::vector<std::size_t> diff;
  std::vector<at::Tensor> cotangents;
  std::vector<std::string> output_names;
};

at::Tensor cpu64(const at::Tensor& t) { return t.detach().to(at::kCPU, at::kDouble); }

/// Runs `call` at `inputs` (fresh leaves) and one VJP. The first run (plan.diff empty) picks
/// the differentiable outputs and draws the cotangents, rounded to their dtype.
Run run_once(const Call& call, const torch::jit::Stack& args, const std::vector<Slot>& slots,
             const std::vector<at::Tensor>& inputs, bool to_double, Plan& plan, at::Generator& gen,
             OpCounts& counts, const std::vector<std::string>& names) {
  std::vector<at::Tensor> leaves;
  leaves.reserve(inputs.size());
  for (const auto& x : inputs) leaves.push_back(x.detach().clone().requires_grad_(true));
  at::AutoGradMode grad_mode(true);
  torch::jit::Stack stack = substitute(args, slots, leaves, to_double);
  ++counts.forward_calls;
  try {
    call(stack);
  } catch (const std::exception& e) {
    throw FunctionRaised(one_line_error(e));
  }
  const std::vector<at::Tensor> outs = flatten_returns(stack);
  const bool first = plan.cotangents.empty() && plan.diff.empty();
  if (first) {
    for (std::size_t o = 0; o < outs.size(); ++o) {
      if (outs[o].defined() && at::isFloatingType(outs[o].scalar_type()) &&
          outs[o].requires_grad()) {
        plan.diff.push_back(o);
      }
    }
    for (auto o : plan.diff) {
      plan.output_names.push_back(
          o < names.size() && !names[o].empty() ? names[o] : "output " + std::to_string(o));
      plan.cotangents.push_back(cpu64(random_grad_output(outs[o], gen)));
    }
  }
  Run run;
  std::vector<at::Tensor> ys, gs;
  for (std::size_t k = 0; k < plan.diff.size(); ++k) {
    const auto o = plan.diff[k];
    TORCH_CHECK(
        o < outs.size() && outs[o].defined() && outs[o].sizes() == plan.cotangents[k].sizes(),
        "the float64 run returned other outputs than the low-precision one (output ",
        plan.output_names[k], ")");
    run.outs.push_back(cpu64(outs[o]));
    if (outs[o].requires_grad()) {
      ys.push_back(outs[o]);
      gs.push_back(plan.cotangents[k].to(outs[o].options().requires_grad(false)));
    }
  }
  run.grads.assign(leaves.size(), at::Tensor());
  run.grad_dtypes.assign(leaves.size(), c10::ScalarType::Undefined);
  if (!ys.empty()) {
    std::vector<at::Tensor> g;
    try {
      g = vjp(ys, gs, leaves, counts);
    } catch (const std::exception& e) {
      throw std::runtime_error("backward: " + one_line_error(e));
    }
    for (std::size_t j = 0; j < g.size() && j < leaves.size(); ++j) {
      if (!g[j].defined()) continue;
      run.grad_dtypes[j] = g[j].scalar_type();
      run.grads[j] = cpu64(g[j]);
    }
  }
  return run;
}

/// The Python side of the model run (customop/_saved_rounding.py): while alive, tensors saved
/// by Python autograd (an autograd.Function, ATen ops called from Python) are rounded too,
/// through the op customop.gradcheck registers; nothing where it is not registered (C++ alone).
class PythonSavedRounding {
 public:
  explicit PythonSavedRounding(c10::ScalarType dtype) {
    op_ = c10::Dispatcher::singleton().findOp({"customop_gradcheck_py::saved_rounding_hooks", ""});
    if (op_ && !call(c10::toString(dtype))) op_.reset();
  }
  ~PythonSavedRounding() {
    if (op_) call("");
  }
  PythonSavedRounding(const PythonSavedRounding&) = delete;
  PythonSavedRounding& operator=(const PythonSavedRounding&) = delete;
  PythonSavedRounding(PythonSavedRounding&&) = delete;
  PythonSavedRounding& operator=(PythonSavedRounding&&) = delete;

 private:
  bool call(const std::string& dtype) const {
    try {
      torch::jit::Stack stack{c10::IValue(dtype)};
      op_->callBoxed(&stack);
      return true;
    } catch (const std::exception&) {
      return false;  // no hooks: the model run rounds customop's saved tensors only
    }
  }
  std::optional<c10::OperatorHandle> op_;
};

/// `t` with its non-finite elements set to 0 (a baseline that overflowed bounds nothing).
at::Tensor finite_or_zero(const at::Tensor& t) {
  return at::where(at::isfinite(t), t, at::zeros_like(t));
}

double max_abs(const at::Tensor& t) { return t.numel() ? t.abs().max().item<double>() : 0.0; }

/// |e| on the CPU, +inf where the kernel alone is not finite (a failed report's heatmap).
at::Tensor keep_error(const at::Tensor& e, const at::Tensor& bad) {
  return at::where(bad, at::full_like(e, INFINITY), e.abs()).cpu();
}

/// The verdict on one tensor (options.h: low-precision rule).
LowPrecisionReport judge(const at::Tensor& low, const at::Tensor& precise,
                         const at::Tensor& reference_error, const at::Tensor& perturbation_error,
                         c10::ScalarType dtype) {
  LowPrecisionReport rep;
  const double u = unit_roundoff(dtype);
  // Elements where the precise value rounds to a finite one in the dtype but the kernel's is
  // not finite: an overflow or a NaN of the kernel's own.
  const at::Tensor expect_finite = at::isfinite(precise.to(dtype).to(at::kDouble));
  const at::Tensor bad = expect_finite & ~at::isfinite(low);
  const at::Tensor valid = at::isfinite(precise) & at::isfinite(low);
  const at::Tensor zero = at::zeros_like(precise);
  const at::Tensor p = at::where(valid, precise, zero);
  const at::Tensor e = at::where(valid, low - precise, zero);
  rep.elements = valid.sum().item<int64_t>();
  const at::Tensor eref = reference_error.defined() ? finite_or_zero(reference_error) : zero;
  const at::Tensor epert = finite_or_zero(perturbation_error);
  rep.reference_error = max_abs(eref);
  rep.perturbation_error = max_abs(epert);
  rep.max_error = max_abs(e);
  // The spacing of the dtype's subnormals: what a value below its normal range is resolved to.
  const double underflow = kLowPrecisionUnderflowFactor * subnormal_spacing(dtype);
  rep.max_bound = std::max(kLowPrecisionReferenceFactor * rep.reference_error,
                           kLowPrecisionPerturbationFactor * rep.perturbation_error) +
                  u * max_abs(p) + underflow;
  const double n = std::max<double>(1.0, static_cast<double>(rep.elements));
  auto rms_valid = [&](const at::Tensor& t) {
    return std::sqrt(at::where(valid, t, zero).square().sum().item<double>() / n);
  };
  rep.rms_error = rms_valid(e);
  rep.rms_bound = std::max(kLowPrecisionReferenceFactor * rms_valid(eref),
                           kLowPrecisionPerturbationFactor * rms_valid(epert)) +
                  u * rms_valid(p) + underflow;
  // The bias is relative: elements below the dtype's normal range, whose rounding is
  // absolute (to the subnormal spacing, or to 0), do not enter it.
  const at::Tensor in_range = p.abs() >= smallest_normal(dtype);
  const at::Tensor pn = at::where(in_range, p, zero);
  const at::Tensor en = at::where(in_range, e, zero);
  const int64_t biased_elements = (in_range & valid).sum().item<int64_t>();
  const double sum_p2 = pn.square().sum().item<double>();
  if (sum_p2 > 0) {
    rep.bias = (en * pn).sum().item<double>() / sum_p2;
    const double se = std::sqrt((en * pn).square().sum().item<double>()) / sum_p2;
    rep.bias_bound =
        kLowPrecisionBiasSigmas * se + u * (kLowPrecisionBiasShare + kLowPrecisionSharedRounding);
  }
  const at::Tensor flat_e = e.abs().flatten();
  if (bad.any().item<bool>()) {
    rep.passed = false;
    rep.failed_rule = "non-finite";
    const int64_t k = bad.flatten().nonzero()[0][0].item<int64_t>();
    rep.worst_index = unravel(k, low.sizes());
    rep.worst_value = low.flatten()[k].item<double>();
    rep.worst_precise = precise.flatten()[k].item<double>();
    rep.error = keep_error(e, bad);
    return rep;
  }
  if (flat_e.numel() > 0) {
    const int64_t k = flat_e.argmax().item<int64_t>();
    rep.worst_index = unravel(k, low.sizes());
    rep.worst_value = low.flatten()[k].item<double>();
    rep.worst_precise = precise.flatten()[k].item<double>();
  }
  if (rep.max_error > rep.max_bound) {
    rep.failed_rule = "max";
  } else if (rep.rms_error > rep.rms_bound) {
    rep.failed_rule = "rms";
  } else if (std::abs(rep.bias) > rep.bias_bound && sum_p2 > 0 &&
             biased_elements >= kLowPrecisionBiasMinElements) {
    rep.failed_rule = "bias";
  }
  rep.passed = rep.failed_rule.empty();
  if (!rep.passed) rep.error = keep_error(e, bad);
  return rep;
}

std::string describe(const LowPrecisionReport& rep, const std::string& dtype) {
  std::string head = dtype + " " + rep.what + " ";
  if (rep.failed_rule == "metadata") return head + "has the wrong dtype";
  if (rep.failed_rule == "non-finite") {
    return head + "is not finite at " + format_index(rep.worst_index) + " (" +
           sci(rep.worst_value) + ") where the precise value " + sci(rep.worst_precise) +
           " is finite in " + dtype;
  }
  if (rep.failed_rule == "max") {
    return head + "is off: max |error| " + sci(rep.max_error) + " > bound " + sci(rep.max_bound) +
           " at " + format_index(rep.worst_index);
  }
  if (rep.failed_rule == "rms") {
    return head + "is off: rms error " + sci(rep.rms_error) + " > bound " + sci(rep.rms_bound);
  }
  return head + "is off systematically: relative bias " + sci(rep.bias) + " > bound " +
         sci(rep.bias_bound);
}

std::string figures(const LowPrecisionReport& rep, bool has_reference) {
  std::string out = "  worst element " + format_index(rep.worst_index) + ": " +
                    sci(rep.worst_value) + ", precise " + sci(rep.worst_precise) +
                    "\n  max |error| " + sci(rep.max_error) + " (bound " + sci(rep.max_bound) +
                    "), rms " + sci(rep.rms_error) + " (bound " + sci(rep.rms_bound) + "), bias " +
                    sci(rep.bias) + " (bound " + sci(rep.bias_bound) + ")\n  ";
  if (has_reference) out += "reference's own max error " + sci(rep.reference_error) + ", ";
  return out + "one rounding of the inputs moves the precise run by " + sci(rep.perturbation_error);
}

/// The float64 gradcheck of the function itself (the precise run without a reference): why
/// there is no precise run to compare with ("" when there is one).
std::string check_float64_run(const BoxedFunction& fn, const torch::jit::Stack& args,
                              const std::vector<Slot>& slots,
                              const std::vector<at::Tensor>& point64,
                              const GradcheckOptions& options, GradcheckResult& r) {
  std::vector<at::Tensor> leaves;
  leaves.reserve(point64.size());
  for (const auto& x : point64) leaves.push_back(x.detach().clone().requires_grad_(true));
  const torch::jit::Stack args64 = substitute(args, slots, leaves, /*to_double=*/true);
  GradcheckOptions o = options;
  o.raise_exception = false;
  // The probe judges a float64 backward to float32's precision, far below what the 16-bit
  // comparison needs; and rounding to the low dtype makes ties (sort, cummax, topk) whose
  // kinks its extrapolation from a 1e-4 step cannot cross.
  o.check_backward_precision = false;
  // For the same reason its Jacobian check judges the backward to float32's rounding at least.
  o.backward_roundoff = std::max(o.backward_roundoff, unit_roundoff(at::kFloat));
  const GradcheckResult r64 = gradcheck(fn, args64, o);
  r.pairs = r64.pairs;
  r.second_order_pairs = r64.second_order_pairs;
  r.tolerances = r64.tolerances;
  r.method = "float64 run: " + r64.method;
  r.counts = r64.counts;
  r.layout_variants = r64.layout_variants;
  r.layout_counts = r64.layout_counts;
  r.input_subsets = r64.input_subsets;
  r.subset_counts = r64.subset_counts;
  for (const auto& n : r64.notes) r.notes.push_back("float64 run: " + n);
  std::string why;
  for (const auto& f : r64.failures) {
    if (f.check == Check::kForwardError && why.empty()) {
      // report_nonfinite_outputs' failure: it ran, and gave no finite value to compare with.
      why = f.headline.find("non-finite") != std::string::npos
                ? "the function's float64 run returned a non-finite value (above)"
                : "the function does not run in float64";
    }
    add_failure(r, f.check, f.second_order, f.output, f.input, "float64 run: " + f.headline,
                f.detail);
  }
  return why;
}

/// "<dt> <what> is <got>, not <want>".
std::string mismatch_message(const std::string& dt, const std::string& what, const std::string& got,
                             const std::string& want) {
  std::string m = dt;
  m += " ";
  m += what;
  m += " is ";
  m += got;
  m += ", not ";
  m += want;
  return m;
}

}  // namespace

bool is_low_precision(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16;
}

void check_low_precision(const BoxedFunction& fn, const torch::jit::Stack& args,
                         const std::vector<Slot>& slots, const std::vector<at::Tensor>& point,
                         c10::ScalarType low, const GradcheckOptions& options, GradcheckResult& r) {
  const bool has_reference = static_cast<bool>(fn.reference);
  r.precision_rule = has_reference ? "reference" : "no reference";
  const std::string dt = dtype_name(low);
  std::vector<at::Tensor> point64;
  point64.reserve(point.size());
  for (const auto& x : point) point64.push_back(x.detach().to(at::kDouble));

  if (!has_reference) {
    if (const std::string why = check_float64_run(fn, args, slots, point64, options, r);
        !why.empty()) {
      add_failure(r, Check::kLowPrecision, false, -1, -1,
                  "no precise run to judge the " + dt + " kernel against: " + why +
                      " and it has no reference (declare one: op.reference(fn), or "
                      "\"reference\" in the spec)");
      return;
    }
  } else {
    r.method = "reference (" + (fn.reference_name.empty() ? "declared" : fn.reference_name) +
               ") in float64";
  }

  const double u = unit_roundoff(low);
  at::Generator gen = cpu_generator(options.seed + 7);
  Plan plan;
  OpCounts& counts = r.low_precision_counts;
  const Call& precise_call = has_reference ? fn.reference : fn.call;
  Run lo, pre, ref_low;
  try {
    lo = run_once(fn.call, args, slots, point, false, plan, gen, counts, fn.return_names);
  } catch (const FunctionRaised& e) {
    add_failure(r, Check::kForwardError, false, -1, -1, "the function raised an error in " + dt,
                std::string("  ") + e.what());
    return;
  } catch (const std::exception& e) {
    add_failure(r, Check::kBackwardError, false, -1, -1, "backward raised an error in " + dt,
                std::string("  ") + e.what());
    return;
  }
  std::vector<Run> perturbed;
  try {
    pre = run_once(precise_call, args, slots, point64, true, plan, gen, counts, fn.return_names);
    if (has_reference) {
      ref_low =
          run_once(fn.reference, args, slots, point, false, plan, gen, counts, fn.return_names);
    } else {
      // The model run: the precise run with what it saves for backward rounded to the dtype
      // (customop/saved_rounding.h), the baseline a kernel that keeps its saved output in the
      // dtype is judged by, as the reference's own low run is with a reference.
      // A function that cannot run under saved-tensor hooks (torch.func inside) is judged
      // against the precise run alone.
      try {
        const SavedRounding rounding(low);
        const PythonSavedRounding python_rounding(low);
        ref_low =
            run_once(precise_call, args, slots, point64, true, plan, gen, counts, fn.return_names);
      } catch (const std::exception& e) {
        ref_low = Run{};
        r.notes.push_back("the float64 run with its saved tensors rounded to " + dt + " raised (" +
                          one_line_error(e) + "): judged against the precise float64 run alone");
      }
    }
    // Two draws of one rounding (relative +-u, random sign) of every input and cotangent.
    const Plan base = plan;
    for (int d = 0; d < 2; ++d) {
      std::vector<at::Tensor> xs;
      for (const auto& x : point64) {
        const at::Tensor sign = signs_like(x, gen);
        xs.push_back(x * (1 + u * sign));
      }
      Plan p = base;
      for (auto& g : p.cotangents) {
        const at::Tensor sign = signs_like(g, gen);
        g = g * (1 + u * sign);
      }
      perturbed.push_back(
          run_once(precise_call, args, slots, xs, true, p, gen, counts, fn.return_names));
    }
  } catch (const std::exception& e) {
    add_failure(r, Check::kLowPrecision, false, -1, -1,
                std::string("the precise run (") +
                    (has_reference ? "the reference in float64" : "the function in float64") +
                    ") failed: nothing to judge the " + dt + " kernel against",
                std::string("  ") + e.what());
    return;
  }

  auto compare = [&](const at::Tensor& l, const at::Tensor& p, const at::Tensor& rl,
                     const std::vector<at::Tensor>& pert, LowPrecisionReport head) {
    at::Tensor ep;
    for (const auto& q : pert) {
      const at::Tensor d = (q - p).abs();
      ep = ep.defined() ? at::maximum(ep, d) : d;
    }
    LowPrecisionReport rep;
    std::string also;  // a failure's figures against the saved-rounded run
    if (has_reference) {
      rep = judge(l, p, (rl - p).abs(), ep, low);
    } else {
      // Two legitimate kernels: one that keeps its saved tensors precise (judged against the
      // precise run), one that keeps them in the dtype (against the saved-rounded run). Either
      // fit passes; a bug fits neither. (Charging the rounding as an allowance instead, as
      // the reference rule does, would hide a 1 % error behind a saved logsumexp's 28 %.)
      rep = judge(l, p, at::Tensor(), ep, low);
      // Where the saved-rounded run is not finite (a saved exp(x) above float16's range), it
      // explains only the kernel's same value; any other element there is judged against the
      // precise run, so a non-finite model hides nothing.
      const at::Tensor model =
          rl.defined() ? at::where(at::isfinite(rl) | (l == rl), rl, p) : at::Tensor();
      if (model.defined()) rep.saved_rounding_error = max_abs(finite_or_zero(model - p));
      if (!rep.passed && model.defined() && !model.equal(p)) {
        LowPrecisionReport alt = judge(l, model, at::Tensor(), ep, low);
        alt.baseline = "saved rounded";
        alt.saved_rounding_error = rep.saved_rounding_error;
        if (alt.passed) {
          rep = std::move(alt);
        } else {
          also = "\n  against the float64 run with its saved tensors rounded to " + dt +
                 " (which moves it by up to " + sci(rep.saved_rounding_error) + "): max |error| " +
                 sci(alt.max_error) + " (bound " + sci(alt.max_bound) + "), rms " +
                 sci(alt.rms_error) + " (bound " + sci(alt.rms_bound) + "), bias " + sci(alt.bias) +
                 " (bound " + sci(alt.bias_bound) + ")";
        }
      }
    }
    rep.what = std::move(head.what);
    rep.output = head.output;
    rep.input = head.input;
    if (!rep.passed) {
      add_failure(r, Check::kLowPrecision, false, rep.output, rep.input, describe(rep, dt),
                  figures(rep, has_reference) + also);
    }
    r.low_precision.push_back(std::move(rep));
  };
  for (std::size_t k = 0; k < lo.outs.size(); ++k) {
    std::vector<at::Tensor> pert;
    pert.reserve(perturbed.size());
    for (const auto& q : perturbed) pert.push_back(q.outs[k]);
    compare(lo.outs[k], pre.outs[k], k < ref_low.outs.size() ? ref_low.outs[k] : at::Tensor(), pert,
            {.what = "output '" + plan.output_names[k] + "'", .output = static_cast<int>(k)});
  }
  for (std::size_t j = 0; j < lo.grads.size(); ++j) {
    const std::string what = "grad of '" + slots[j].name + "'";
    if (!lo.grads[j].defined() && !pre.grads[j].defined()) continue;
    if (lo.grad_dtypes[j] != c10::ScalarType::Undefined && lo.grad_dtypes[j] != low &&
        point[j].scalar_type() == low) {
      LowPrecisionReport rep{
          .what = what, .input = static_cast<int>(j), .passed = false, .failed_rule = "metadata"};
      add_failure(r, Check::kGradMetadata, false, -1, static_cast<int>(j),
                  mismatch_message(dt, what, dtype_name(lo.grad_dtypes[j]), dt));
      r.low_precision.push_back(std::move(rep));
      continue;
    }
    if (lo.grads[j].defined() && lo.grads[j].sizes() != point[j].sizes()) {
      LowPrecisionReport rep{
          .what = what, .input = static_cast<int>(j), .passed = false, .failed_rule = "metadata"};
      add_failure(r, Check::kGradMetadata, false, -1, static_cast<int>(j),
                  mismatch_message(dt, what, "of shape " + format_sizes(lo.grads[j].sizes()),
                                   format_sizes(point[j].sizes())));
      r.low_precision.push_back(std::move(rep));
      continue;
    }
    auto or_zero = [&](const at::Tensor& g) {
      return g.defined() ? g : at::zeros(point[j].sizes(), at::TensorOptions().dtype(at::kDouble));
    };
    std::vector<at::Tensor> pert;
    pert.reserve(perturbed.size());
    for (const auto& q : perturbed) pert.push_back(or_zero(q.grads[j]));
    compare(or_zero(lo.grads[j]), or_zero(pre.grads[j]),
            j < ref_low.grads.size() ? or_zero(ref_low.grads[j]) : at::Tensor(), pert,
            {.what = what, .input = static_cast<int>(j)});
  }
  if (lo.outs.empty()) {
    r.notes.emplace_back(dt + ": no differentiable output to compare");
  }
  // The run's totals count these too (the summary table's op evaluations).
  r.counts.forward_calls += counts.forward_calls;
  r.counts.vjp_calls += counts.vjp_calls;
}

}  // namespace customop::gradcheck::detail
