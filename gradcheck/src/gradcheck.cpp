// The public entry points: validate the inputs, build the function, run the first-order
// checks, then the second order and the CUDA/CPU comparison when asked for.

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>
#include <customop/saved_rounding.h>

#include "detail/backward_precision.h"
#include "detail/checker.h"
#include "detail/compare.h"
#include "detail/draws.h"
#include "detail/function.h"
#include "detail/input_subsets.h"
#include "detail/layout_variants.h"
#include "detail/low_precision.h"
#include "detail/nonfinite_outputs.h"
#include "detail/op_checks.h"
#include "detail/singular_points.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>

namespace customop::gradcheck {

GradcheckError::GradcheckError(GradcheckResult result)
    : std::runtime_error(format_report(result)), result_(std::move(result)) {}

namespace {

std::string qualified_name(const c10::FunctionSchema& schema) {
  const auto& on = schema.operator_name();
  return on.overload_name.empty() ? on.name : on.name + "." + on.overload_name;
}

BoxedFunction boxed_from_handle(const c10::OperatorHandle& op, bool has_cpu) {
  BoxedFunction fn;
  const auto& schema = op.schema();
  fn.name = qualified_name(schema);
  for (const auto& a : schema.arguments()) fn.arg_names.push_back(a.name());
  for (const auto& r : schema.returns()) fn.return_names.push_back(r.name());
  fn.call = [op](torch::jit::Stack& s) { op.callBoxed(s); };
  if (has_cpu) fn.call_cpu = fn.call;
  return fn;
}

std::string tensor_arg_list(const torch::jit::Stack& args, const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].isTensor() || args[i].isTensorList() ||
        (args[i].isList() && !args[i].toListRef().empty() && args[i].toListRef()[0].isTensor())) {
      out += (out.empty() ? "" : ", ") + (i < names.size() ? names[i] : "arg" + std::to_string(i));
    }
  }
  return out.empty() ? "there are no tensor arguments" : out;
}

/// True when two elements of `t` share memory. ATen answers "too hard" for a strided view such
/// as as_strided({2, 2}, {1, 1}); then the element offsets decide (a sample is small).
bool overlaps_itself(const at::Tensor& t) {
  const at::MemOverlap status = at::has_internal_overlap(t);
  if (status != at::MemOverlap::TooHard) return status == at::MemOverlap::Yes;
  if (t.numel() == 0) return false;
  int64_t span = t.storage_offset() + 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  const at::Tensor offsets =
      at::arange(span, at::kLong).as_strided(t.sizes(), t.strides(), t.storage_offset());
  return std::get<0>(at::_unique(offsets.reshape({-1}))).numel() < t.numel();
}

void validate(const BoxedFunction& fn, const torch::jit::Stack& args,
              const std::vector<detail::Slot>& slots) {
  TORCH_CHECK_VALUE(!slots.empty(), fn.name,
                    ": gradcheck expects at least one input tensor that requires grad, but none "
                    "of the tensor arguments (",
                    tensor_arg_list(args, fn.arg_names),
                    ") does; at least one input must require grad (call requires_grad_() on the "
                    "floating-point inputs to differentiate)");
  std::optional<c10::Device> device;
  for (std::size_t j = 0; j < slots.size(); ++j) {
    const auto& s = slots[j];
    const at::Tensor t =
        s.element < 0 ? args[s.arg].toTensor()
        : args[s.arg].isTensorList()
            ? at::Tensor(args[s.arg].toTensorList().get(static_cast<std::size_t>(s.element)))
            : args[s.arg].toListRef()[static_cast<std::size_t>(s.element)].toTensor();
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK_VALUE(!(t.stride(d) == 0 && t.size(d) > 1), fn.name, ": input ", j, " ('", s.name,
                        "') has a dimension with stride 0 (sizes ", detail::format_sizes(t.sizes()),
                        ", strides ", detail::format_sizes(t.strides()),
                        ", e.g. from expand()); gradcheck perturbs one element at a time and "
                        "needs inputs whose elements do not share memory: pass ",
                        s.name, ".contiguous() (or .clone()) instead");
    }
    TORCH_CHECK_VALUE(!overlaps_itself(t), fn.name, ": input ", j, " ('", s.name,
                      "') has overlapping memory (sizes ", detail::format_sizes(t.sizes()),
                      ", strides ", detail::format_sizes(t.strides()), "); pass ", s.name,
                      ".contiguous() instead");
    if (!device) device = t.device();
    TORCH_CHECK_VALUE(*device == t.device(), fn.name, ": input ", j, " ('", s.name, "') is on ",
                      t.device(), " but input 0 ('", slots[0].name, "') is on ", *device,
                      "; gradcheck needs every input that requires grad on one device");
  }
}

/// (inputs, grad_outputs) -> grads computed with create_graph: gradgradcheck's function.
detail::Function make_second_order(const detail::Function& f, const std::vector<std::size_t>& diff,
                                   std::size_t num_inputs, std::vector<std::string> out_names,
                                   OpCounts* counts) {
  auto build = [=](const detail::TensorFn& eval) -> detail::TensorFn {
    return [=](const std::vector<at::Tensor>& all) {
      at::AutoGradMode grad_mode(true);
      std::vector<at::Tensor> xs, gos;
      bool create = false;
      for (std::size_t k = 0; k < all.size(); ++k) {
        create = create || all[k].requires_grad();
        if (k < num_inputs) {
          xs.push_back(all[k].requires_grad() ? all[k] : all[k].detach().requires_grad_(true));
        } else {
          gos.push_back(all[k]);
        }
      }
      const auto outs = eval(xs);
      std::vector<at::Tensor> ys;
      ys.reserve(diff.size());
      for (auto o : diff) ys.push_back(outs[o]);
      auto grads = detail::vjp(ys, gos, xs, *counts, /*create_graph=*/create);
      for (std::size_t j = 0; j < grads.size(); ++j) {
        if (!grads[j].defined()) grads[j] = at::zeros_like(xs[j]).detach();
      }
      return grads;
    };
  };
  detail::Function g;
  g.input_names = f.input_names;
  for (std::size_t i = 0; i < diff.size(); ++i) {
    g.input_names.push_back("grad_output " + std::to_string(i) + " of " + out_names[i]);
  }
  g.eval = build(f.eval);
  if (f.eval_reference) g.eval_reference = build(f.eval_reference);
  std::vector<std::string> names;
  for (std::size_t j = 0; j < num_inputs; ++j) names.push_back("grad of " + f.input_names[j]);
  g.output_names = [names] { return names; };
  return g;
}

void compare_cuda_with_cpu(const BoxedFunction& fn, const torch::jit::Stack& args,
                           const std::vector<detail::Slot>& slots, const detail::Checked& c,
                           const Tolerances& tol, std::uint64_t seed, GradcheckResult& r) {
  if (!fn.call_cpu) {
    r.notes.emplace_back("cuda: the op has no CPU kernel to compare with");
    return;
  }
  std::vector<at::Tensor> cpu_leaves;
  for (const auto& l : c.leaves) cpu_leaves.push_back(l.detach().to(at::kCPU).requires_grad_(true));
  std::vector<at::Tensor> cpu_outs;
  try {
    at::AutoGradMode grad_mode(true);
    torch::jit::Stack stack =
        detail::substitute(args, slots, cpu_leaves, false, c10::Device(at::kCPU));
    ++r.counts.forward_calls;
    fn.call_cpu(stack);
    cpu_outs = detail::flatten_returns(stack);
  } catch (const std::exception& e) {
    r.notes.push_back("cuda: the CPU run failed, not compared (" + detail::one_line_error(e) + ")");
    return;
  }
  auto close = [&](const at::Tensor& a, const at::Tensor& b, double& worst) {
    const at::Tensor da = a.detach().to(at::kCPU, at::kDouble);
    const at::Tensor db = b.detach().to(at::kCPU, at::kDouble);
    if (da.sizes() != db.sizes()) {
      worst = INFINITY;
      return false;
    }
    worst = da.numel() ? (da - db).abs().max().item<double>() : 0.0;
    return at::allclose(da, db, tol.rtol, tol.atol, /*equal_nan=*/true);
  };
  for (std::size_t o = 0; o < c.outputs.size() && o < cpu_outs.size(); ++o) {
    if (!c.outputs[o].defined() || !cpu_outs[o].defined() ||
        !at::isFloatingType(c.outputs[o].scalar_type())) {
      continue;
    }
    double worst = 0;
    if (!close(c.outputs[o], cpu_outs[o], worst)) {
      detail::add_failure(r, Check::kCudaVsCpu, false, -1, -1,
                          "CUDA forward output " + std::to_string(o) + " differs from the CPU one",
                          "  max |cuda - cpu| " + detail::sci(worst));
    }
  }
  if (c.diff.empty()) return;
  at::Generator gen = detail::cpu_generator(seed + 2);
  std::vector<at::Tensor> ys, ys_cpu, gs, gs_cpu;
  for (auto o : c.diff) {
    if (o >= cpu_outs.size() || !cpu_outs[o].requires_grad()) return;
    const auto& y = c.outputs[o];
    const at::Tensor g = detail::uniform_cpu(y.numel(), gen, -1.0, 1.0).view(y.sizes());
    ys.push_back(y);
    ys_cpu.push_back(cpu_outs[o]);
    gs.push_back(detail::to_device_of(g, y));
    gs_cpu.push_back(g.to(cpu_outs[o].scalar_type()));
  }
  try {
    const auto a = detail::vjp(ys, gs, c.leaves, r.counts);
    const auto b = detail::vjp(ys_cpu, gs_cpu, cpu_leaves, r.counts);
    for (std::size_t j = 0; j < a.size(); ++j) {
      if (!a[j].defined() || !b[j].defined()) continue;
      double worst = 0;
      if (!close(a[j], b[j], worst)) {
        detail::add_failure(r, Check::kCudaVsCpu, false, -1, static_cast<int>(j),
                            "CUDA grad of input " + std::to_string(j) + " ('" + r.inputs[j] +
                                "') differs from the CPU one",
                            "  max |cuda - cpu| " + detail::sci(worst));
      }
    }
  } catch (const std::exception& e) {
    r.notes.push_back("cuda: a backward failed in the CUDA/CPU comparison (" +
                      detail::one_line_error(e) + ")");
  }
}

/// Refuses a central-difference step the inputs' magnitude quantizes: below 100 u max|x| (u =
/// 2^-53, the differences run in float64) x + eps keeps fewer than ~7 significant bits of eps,
/// and f(x + eps) - f(x - eps) is rounding: the differences could not judge any entry, and a
/// wrong backward would pass on error estimates that wide.
void check_step(const std::string& name, const std::vector<detail::Slot>& slots,
                const std::vector<at::Tensor>& point, double eps) {
  for (std::size_t j = 0; j < point.size(); ++j) {
    const double largest = detail::largest_finite_abs(point[j]);
    const double smallest_step = 100 * std::ldexp(1.0, -53) * largest;
    TORCH_CHECK_VALUE(eps >= smallest_step, name, ": eps = ", eps, " is too small for input ", j,
                      " ('", slots[j].name, "'), whose largest |element| is ", largest,
                      ": below 100 u max|x| = ", smallest_step,
                      " (u = 2^-53) the finite differences are rounding and cannot judge the "
                      "Jacobian; pass eps >= ",
                      smallest_step, " or rescale the input");
  }
}

void summarize_arguments(GradcheckResult& r) {
  r.arguments.clear();
  for (std::size_t j = 0; j < r.inputs.size(); ++j) {
    ArgumentSummary a;
    a.input = static_cast<int>(j);
    a.name = r.inputs[j];
    for (const auto& p : r.pairs) {
      if (p.input != static_cast<int>(j)) continue;
      a.entries += p.entries;
      a.bad_entries += p.bad_entries;
      a.worst_abs_error = std::max(a.worst_abs_error, p.worst_abs_error);
      a.worst_rel_error = std::max(a.worst_rel_error, p.worst_rel_error);
    }
    r.arguments.push_back(std::move(a));
  }
}

}  // namespace

GradcheckResult gradcheck(const BoxedFunction& fn, const torch::jit::Stack& args,
                          const GradcheckOptions& options) {
  TORCH_CHECK_VALUE(static_cast<bool>(fn.call), fn.name, ": gradcheck needs a callable");
  TORCH_CHECK_VALUE(std::isfinite(options.backward_roundoff) && options.backward_roundoff >= 0,
                    fn.name, ": GradcheckOptions::backward_roundoff must be finite and >= 0, got ",
                    options.backward_roundoff);
  // A check nested in a function under a low-precision check's saved-rounded run runs at full
  // precision (the Python side pauses its hooks likewise: customop/_saved_rounding.py).
  const SavedRoundingPause full_precision;
  const auto slots = detail::find_slots(args, fn.arg_names);
  validate(fn, args, slots);

  GradcheckResult r;
  r.op = fn.name;
  r.label = options.label;
  r.mode = options.mode;
  r.seed = options.seed;
  r.nondet_tol = options.nondet_tol;

  std::vector<at::Tensor> point;
  for (const auto& s : slots) {
    const auto& v = args[s.arg];
    const at::Tensor t = s.element < 0 ? v.toTensor()
                         : v.isTensorList()
                             ? at::Tensor(v.toTensorList().get(static_cast<std::size_t>(s.element)))
                             : v.toListRef()[static_cast<std::size_t>(s.element)].toTensor();
    point.push_back(detail::clone_like(t));
  }
  const c10::Device device = point.front().device();
  r.device = device.str();
  const c10::ScalarType low = detail::lowest_precision(point);
  r.dtype = detail::dtype_name(low);
  r.tolerances = resolve_tolerances(options, low);
  if (options.low_precision != LowPrecisionMethod::kRidders) {
    check_step(fn.name, slots, point, r.tolerances.eps);
  }

  if (detail::is_low_precision(low)) {
    // float16/bfloat16: the low-precision rule (options.h), in its own unit.
    detail::check_low_precision(fn, args, slots, point, low, options, r);
    summarize_arguments(r);
    if (!r.passed && options.raise_exception) throw GradcheckError(r);
    return r;
  }

  const detail::Function f = detail::make_op_function(fn, args, slots, &r.counts);
  detail::Checked c;
  try {
    c = detail::check_function(f, point, options, r.tolerances, detail::Order::kFirst, r);
  } catch (const detail::FunctionRaised& e) {
    // The op's own error is the report: nothing after it can run without a forward.
    detail::add_failure(r, Check::kForwardError, false, -1, -1, "the function raised an error",
                        std::string("  ") + e.what());
    summarize_arguments(r);
    if (options.raise_exception) throw GradcheckError(r);
    return r;
  }

  detail::move_off_singular_points(f, point, options, r);
  detail::report_nonfinite_outputs(c, r);
  if (options.check_layout_variants) {
    const detail::Function fl = detail::make_op_function(fn, args, slots, &r.layout_counts);
    // The Jacobian check alone, at a point with one input in another layout (for ops whose
    // result depends on strides by definition): no failure of it reaches r.
    const detail::JacobianAt jacobian_at = [&](const std::vector<at::Tensor>& at_point) {
      GradcheckOptions o = options;
      o.raise_exception = false;
      o.check_second_order = false;
      GradcheckResult scratch;
      detail::check_function(fl, at_point, o, r.tolerances, detail::Order::kFirst, scratch);
      r.layout_counts.vjp_calls += scratch.counts.vjp_calls;
      return scratch.passed;
    };
    detail::check_layout_variants(fl, c, options.seed, options.nondet_tol, r, jacobian_at);
  }
  {
    const detail::Function fs = detail::make_op_function(fn, args, slots, &r.subset_counts);
    detail::check_input_subsets(fs, c, options.input_subsets, options.seed, options.nondet_tol, r);
  }
  if (options.check_backward_precision) {
    const detail::Function fp = detail::make_op_function(fn, args, slots, &r.precision_counts);
    detail::check_backward_precision(fp, c, r.tolerances, options.seed, options.nondet_tol,
                                     options.backward_roundoff, r);
  }

  if (options.check_second_order && !c.diff.empty()) {
    std::vector<std::string> names;
    for (auto o : c.diff)
      names.push_back(o < c.output_names.size() ? c.output_names[o]
                                                : "output " + std::to_string(o));
    detail::Function g = make_second_order(f, c.diff, point.size(), names, &r.counts);
    at::Generator gen = detail::cpu_generator(options.seed + 1);
    std::vector<at::Tensor> point2 = point;
    for (auto o : c.diff) {
      const auto& y = c.outputs[o];
      point2.push_back(detail::random_grad_output(y, gen));
    }
    // gradgradcheck's checks: the Jacobian (with reentrancy and grad metadata) of the grads.
    GradcheckOptions second = options;
    second.check_undefined_grad = false;
    second.check_grad_output_scaling = false;
    second.check_forward_grad_mode = false;
    second.seed = options.seed + 1;
    try {
      detail::check_function(g, point2, second, r.tolerances, detail::Order::kSecond, r);
    } catch (const std::exception& e) {  // g's forward is the first-order backward
      detail::add_failure(r, Check::kBackwardError, true, -1, -1,
                          "backward raised an error while its grads were differentiated",
                          "  " + detail::one_line_error(e));
    }
  }

  if (device.is_cuda() && options.check_cuda_against_cpu) {
    compare_cuda_with_cpu(fn, args, slots, c, r.tolerances, options.seed, r);
  }
  summarize_arguments(r);
  if (!r.passed && options.raise_exception) throw GradcheckError(r);
  return r;
}

GradcheckResult gradcheck(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                          const GradcheckOptions& options) {
  return detail::with_op_checks(op, args, options, [&](const GradcheckOptions& o) {
    return gradcheck(boxed_from_handle(op, /*has_cpu=*/true), args, o);
  });
}

GradcheckResult gradcheck(const c10::OperatorHandle& op, const c10::OperatorHandle& reference,
                          const torch::jit::Stack& args, const GradcheckOptions& options) {
  BoxedFunction fn = boxed_from_handle(op, /*has_cpu=*/true);
  fn.reference = [reference](torch::jit::Stack& s) { reference.callBoxed(s); };
  fn.reference_name = qualified_name(reference.schema());
  return detail::with_op_checks(op, args, options,
                                [&](const GradcheckOptions& o) { return gradcheck(fn, args, o); });
}

GradcheckResult gradcheck(const OpCore& op, const torch::jit::Stack& args,
                          const GradcheckOptions& options) {
  BoxedFunction fn = boxed_from_handle(op.handle(), op.has_kernel(c10::DeviceType::CPU));
  fn.arg_names.clear();
  for (const auto& a : op.args()) fn.arg_names.push_back(a.name);
  if (op.has_reference()) {
    fn.reference = [&op](torch::jit::Stack& s) { op.reference()(&s); };
    fn.reference_name = fn.name + "'s reference";
  }
  return detail::with_op_checks(op.handle(), args, options,
                                [&](const GradcheckOptions& o) { return gradcheck(fn, args, o); });
}

std::string GradcheckResult::message() const { return format_report(*this); }

}  // namespace customop::gradcheck
