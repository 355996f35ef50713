#include "detail/checker.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace customop::gradcheck::detail {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6e", v);
  return buf;
}

namespace {

std::string short_sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0e", v);
  return buf;
}

/// Identity whose backward returns an undefined grad: what reaches the op's backward when an
/// output's grad is undefined (the role of torch._C._functions.UndefinedGrad in Python).
struct UndefinedGradFunction : torch::autograd::Function<UndefinedGradFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) {
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 const torch::autograd::variable_list&) {
    return {at::Tensor()};
  }
};

int rank(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return 3;
    case at::kFloat: return 2;
    case at::kHalf: return 1;
    case at::kBFloat16: return 0;
    default: return 3;
  }
}

at::Tensor flat_double(const at::Tensor& t) {
  return t.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
}

// A random unit vector, Gaussian with mean 1 rather than 0: an error of the form c * 1 1^T
// (a constant added to every grad, a broadcast dimension reduced wrongly) projects onto
// c * sum(u) * sum(v), which zero-mean vectors make arbitrarily small (torch draws uniform
// [0, 1) vectors, all positive, for a similar effect); any other error is still seen.
at::Tensor unit_randn(int64_t n, at::Generator& gen) {
  at::Tensor u = at::randn({n}, gen, at::TensorOptions().dtype(at::kDouble)) + 1.0;
  const double norm = u.norm().item<double>();
  return norm > 0 ? u / norm : u;
}

/// Comparison of one numerical/analytical block.
struct BlockCompare {
  PairReport pair;
  ElementReport worst_nd;  // the worst mismatching entry at a non-differentiable point
};

BlockCompare compare_block(const at::Tensor& num, const at::Tensor& ana, const at::Tensor& err,
                           const at::Tensor& left, const at::Tensor& right, const Tolerances& tol,
                           bool detect_nd, c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes) {
  BlockCompare out;
  PairReport& p = out.pair;
  const at::Tensor diff = (ana - num).abs();
  const at::Tensor tolm = tol.atol + tol.rtol * num.abs() + err;
  const at::Tensor bad = (diff <= tolm).logical_not();  // NaN counts as bad
  at::Tensor nd = at::zeros_like(bad);
  if (detect_nd && left.defined()) {
    const at::Tensor jump = (right - left).abs();
    const at::Tensor scale = at::maximum(left.abs(), right.abs());
    nd = bad & (jump > at::maximum(tolm, 0.1 * scale));
  }
  const at::Tensor rel = at::where(num != 0, diff / num.abs(), diff);
  p.entries = num.numel();
  p.bad_entries = bad.sum().item<int64_t>();
  p.nondifferentiable_entries = nd.sum().item<int64_t>();
  p.passed = p.bad_entries == 0;
  auto nan_max = [](const at::Tensor& t) {
    if (t.numel() == 0) return 0.0;
    const at::Tensor clean = at::where(at::isnan(t), at::full_like(t, INFINITY), t);
    return clean.max().item<double>();
  };
  p.worst_abs_error = nan_max(diff);
  p.worst_rel_error = nan_max(rel);
  const int64_t cols = num.size(1);
  auto element = [&](int64_t flat) {
    ElementReport e;
    const int64_t r = flat / cols;
    const int64_t c = flat % cols;
    e.output_index = unravel(r, out_sizes);
    e.input_index = unravel(c, in_sizes);
    e.numerical = num[r][c].item<double>();
    e.analytical = ana[r][c].item<double>();
    e.abs_error = diff[r][c].item<double>();
    e.rel_error = rel[r][c].item<double>();
    e.tolerance = tolm[r][c].item<double>();
    return e;
  };
  if (p.entries == 0) return out;
  at::Tensor score = diff / tolm;
  score = at::where(at::isnan(score), at::full_like(score, INFINITY), score);
  // The worst entry: among mismatches that are not at a kink when there are any.
  const at::Tensor plain_bad = bad & nd.logical_not();
  at::Tensor pick = score;
  if (plain_bad.any().item<bool>()) {
    pick = at::where(plain_bad, score, at::full_like(score, -1.0));
  }
  p.worst = element(pick.reshape({-1}).argmax().item<int64_t>());
  if (p.nondifferentiable_entries > 0) {
    out.worst_nd = element(
        at::where(nd, score, at::full_like(score, -1.0)).reshape({-1}).argmax().item<int64_t>());
  }
  return out;
}

std::string describe_worst(const PairReport& p, const std::string& out_name,
                           const std::string& in_name, const Tolerances& tol,
                           const std::string& steps, std::uint64_t seed) {
  std::ostringstream os;
  const auto& w = p.worst;
  os << "  worst element: d " << out_name << format_index(w.output_index) << " / d " << in_name
     << format_index(w.input_index) << ": numerical " << sci(w.numerical) << ", analytical "
     << sci(w.analytical) << ", abs error " << sci(w.abs_error) << ", rel error "
     << sci(w.rel_error) << " (atol " << short_sci(tol.atol) << ", rtol " << short_sci(tol.rtol)
     << ", " << steps << ", seed " << seed << ")\n";
  os << "  bad entries: " << p.bad_entries << " of " << p.entries;
  if (p.nondifferentiable_entries > 0) {
    os << " (" << p.nondifferentiable_entries << " at non-differentiable points)";
  }
  return os.str();
}

}  // namespace

std::vector<at::Tensor> vjp(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& grad_outputs,
                            const std::vector<at::Tensor>& inputs, OpCounts& counts,
                            bool create_graph) {
  ++counts.vjp_calls;
  return torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/true, create_graph,
                               /*allow_unused=*/true);
}

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
                       const CheckConfig& cfg, GradcheckResult& result) {
  const bool so = cfg.second_order;
  const std::size_t num_inputs = point.size();
  auto fail = [&](Check c, int i, int j, std::string headline, std::string detail = {}) {
    add_failure(result, c, so, i, j, std::move(headline), std::move(detail));
  };
  auto in_label = [&](std::size_t j) {
    return "input " + std::to_string(j) + " ('" + f.input_names[j] + "')";
  };

  // Analytical side: fresh leaves and the forward under grad mode. The function's own errors
  // propagate from here unchanged.
  Checked c;
  for (const auto& p : point) c.leaves.push_back(clone_like(p).requires_grad_(true));
  {
    at::AutoGradMode grad_mode(true);
    c.outputs = f.eval(c.leaves);
  }
  c.output_names = f.output_names();
  for (std::size_t o = 0; o < c.outputs.size(); ++o) {
    const auto& y = c.outputs[o];
    if (y.defined() && at::isFloatingType(y.scalar_type()) && y.requires_grad())
      c.diff.push_back(o);
  }
  auto out_name = [&](std::size_t o) {
    return o < c.output_names.size() ? c.output_names[o] : "output " + std::to_string(o);
  };
  if (!so) {
    result.inputs = f.input_names;
    result.outputs.clear();
    for (auto o : c.diff) result.outputs.push_back(out_name(o));
  }
  auto& pairs = so ? result.second_order_pairs : result.pairs;

  // Numerical method.
  const c10::ScalarType low = lowest_precision(point);
  StepRule rule;
  rule.eps = cfg.tol.eps;
  bool reference = false;
  bool nominal_step = false;
  std::string method = "central";
  std::vector<at::Tensor> reference_base;
  auto use_ridders = [&] {
    rule.ridders = true;
    rule.initial = cfg.ridders_initial_step;
    rule.shrink = cfg.ridders_shrink;
    rule.levels = std::max(1, cfg.ridders_levels);
    method = "ridders";
  };
  if (low != at::kDouble) {
    switch (cfg.low_precision) {
      case LowPrecisionMethod::kCentral:
        nominal_step = true;
        method = "central (own dtype)";
        break;
      case LowPrecisionMethod::kRidders: use_ridders(); break;
      case LowPrecisionMethod::kAuto:
      case LowPrecisionMethod::kFloat64Reference: {
        std::string why = "no float64 evaluator";
        if (f.eval_reference) {
          try {
            at::NoGradGuard no_grad;
            std::vector<at::Tensor> p64;
            p64.reserve(point.size());
            for (const auto& p : point) p64.push_back(clone_like(p, at::kDouble));
            auto outs = f.eval_reference(p64);
            bool all_double = true;
            for (const auto& o : outs) {
              if (o.defined() && at::isFloatingType(o.scalar_type()) &&
                  o.scalar_type() != at::kDouble) {
                all_double = false;
              }
            }
            if (all_double) {
              reference = true;
              reference_base = std::move(outs);
            } else {
              why = "its outputs stay low precision for float64 inputs";
            }
          } catch (const std::exception& e) {
            why = one_line_error(e);
          }
        }
        if (reference) {
          method = "central (float64 reference)";
        } else {
          use_ridders();
          result.notes.push_back(std::string(so ? "second order: " : "") +
                                 "float64 reference unavailable (" + why +
                                 "); using Ridders' extrapolation in " + dtype_name(low));
        }
        break;
      }
    }
  }
  if (!so) result.method = method;
  const std::string steps = rule.ridders ? "Ridders steps " + short_sci(rule.initial) +
                                               " * max(1, |x|) / " + short_sci(rule.shrink) +
                                               "^k, " + std::to_string(rule.levels) + " levels"
                                         : "eps " + short_sci(rule.eps);

  Numerical num(f, point, reference, rule, std::move(reference_base));
  num.set_input_names(f.input_names);

  // Forward under grad mode against the forward without it (same dtype).
  if (cfg.check_forward_grad_mode) {
    std::vector<at::Tensor> plain;
    if (reference) {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> copies;
      copies.reserve(point.size());
      for (const auto& p : point) copies.push_back(clone_like(p));
      plain = f.eval(copies);
    } else {
      plain = num.base();
    }
    for (std::size_t o = 0; o < c.outputs.size() && o < plain.size(); ++o) {
      const auto& a = c.outputs[o];
      const auto& b = plain[o];
      if (!a.defined() || !b.defined() || !at::isFloatingType(a.scalar_type())) continue;
      if (a.sizes() != b.sizes()) continue;  // the stability check reports it
      const at::Tensor da = flat_double(a), db = flat_double(b);
      const bool same = at::allclose(da, db, cfg.tol.rtol, cfg.tol.atol, /*equal_nan=*/true);
      if (!same) {
        const double worst = (da - db).abs().max().item<double>();
        fail(Check::kForwardGradMode, -1, -1,
             "forward output " + std::to_string(o) + " ('" + out_name(o) +
                 "') differs with and without grad mode",
             "  max |difference| " + sci(worst) +
                 "; the Jacobian check needs a deterministic "
                 "forward that ignores grad mode");
      }
    }
  }

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);

  // Outputs not connected to any input: the numerical Jacobian must be zero.
  if (c.diff.empty()) {
    result.notes.push_back(std::string(so ? "second order: " : "") +
                           "no output requires grad: checking that the numerical Jacobian is zero");
    try {
      for (std::size_t j = 0; j < num_inputs; ++j) {
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
        if (cfg.mode == Mode::kSlow) {
          for (int64_t k = 0; k < num.numel(j); ++k) scan(num.sample_element(j, k));
        } else {
          scan(num.sample_direction(j, unit_randn(num.numel(j), gen)));
        }
        if (worst_row >= 0) {
          std::size_t o = 0;
          while (o + 1 < c.outputs.size() && num.rows(o).second <= worst_row) ++o;
          fail(Check::kNonDifferentiableOutput, -1, static_cast<int>(j),
               "Numerical gradient for output " + std::to_string(o) + " with respect to " +
                   in_label(j) + " expected to be zero",
               "  no output requires grad (none is connected to an input that requires grad), "
               "yet perturbing '" +
                   f.input_names[j] + "' changes output " + std::to_string(o) + " ('" +
                   out_name(o) + "'): max |numerical derivative| " + sci(worst));
        }
      }
    } catch (const UnstableOutputs& e) {
      fail(Check::kOutputStability, -1, -1,
           "Expected the function to return outputs with the same count, shape and dtype when "
           "inputs are perturbed",
           std::string("  ") + e.what());
    }
    return c;
  }

  const std::size_t num_outputs = c.diff.size();
  std::vector<at::Tensor> diff_outputs;
  for (auto o : c.diff) diff_outputs.push_back(c.outputs[o]);

  if (cfg.mode == Mode::kSlow) {
    std::int64_t in_elems = 0, out_elems = 0;
    for (const auto& l : c.leaves) in_elems += l.numel();
    for (const auto& y : diff_outputs) out_elems += y.numel();
    const double entries = static_cast<double>(in_elems) * static_cast<double>(out_elems);
    TORCH_CHECK_VALUE(entries <= static_cast<double>(cfg.max_jacobian_entries),
                      "slow mode would build Jacobians of ", in_elems, " input elements x ",
                      out_elems, " output elements = ", entries, " entries (", in_elems,
                      " forward pairs, ", out_elems,
                      " VJPs), above max_jacobian_entries = ", cfg.max_jacobian_entries,
                      "; use fast mode (Mode::kFast, --mode fast) or smaller sample inputs");
  }

  // Grad metadata: recorded once per input, reported after the Jacobian failures.
  std::vector<std::pair<int, std::string>> metadata_issues;
  std::vector<bool> metadata_seen(num_inputs, false);
  auto check_metadata = [&](const std::vector<at::Tensor>& grads) {
    if (!cfg.check_grad_metadata) return;
    for (std::size_t j = 0; j < num_inputs; ++j) {
      const auto& g = grads[j];
      const auto& x = c.leaves[j];
      if (!g.defined() || metadata_seen[j]) continue;
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
      metadata_seen[j] = true;
      metadata_issues.emplace_back(static_cast<int>(j), os.str());
    }
  };
  auto to_rows = [&](const std::vector<at::Tensor>& grads, std::size_t j) {
    const auto& g = grads[j];
    if (!g.defined()) return at::zeros({c.leaves[j].numel()}, at::kDouble);
    return flat_double(g);
  };

  double reentrancy_worst = 0;
  int reentrancy_input = -1;
  auto note_reentrancy = [&](const at::Tensor& a, const at::Tensor& b, std::size_t j) {
    if (a.numel() == 0) return;
    double d = (a - b).abs().max().item<double>();
    if (std::isnan(d)) d = INFINITY;
    if (reentrancy_input < 0 || d > reentrancy_worst) {
      reentrancy_worst = d;
      reentrancy_input = static_cast<int>(j);
    }
  };

  // Analytical rows for output i (slow): [m_i, n_j] per input.
  auto analytical_block = [&](std::size_t i, bool twice) {
    const auto& y = diff_outputs[i];
    const int64_t m = y.numel();
    std::vector<at::Tensor> rows(num_inputs);
    for (std::size_t j = 0; j < num_inputs; ++j) {
      rows[j] = at::zeros({m, c.leaves[j].numel()}, at::kDouble);
    }
    for (int64_t r = 0; r < m; ++r) {
      at::Tensor g = at::zeros({m}, y.options().requires_grad(false));
      g[r] = 1;
      g = g.view(y.sizes());
      const auto grads = vjp({y}, {g}, c.leaves, result.counts);
      check_metadata(grads);
      std::vector<at::Tensor> again;
      if (twice) again = vjp({y}, {g}, c.leaves, result.counts);
      for (std::size_t j = 0; j < num_inputs; ++j) {
        const at::Tensor row = to_rows(grads, j);
        if (row.numel() == rows[j].size(1)) rows[j][r].copy_(row);
        if (twice) note_reentrancy(row, to_rows(again, j), j);
      }
    }
    return rows;
  };

  // Numerical block for input j (slow): [M, n_j] estimate, error, left, right.
  struct NumBlock {
    at::Tensor value, error, left, right;
  };
  auto numerical_block = [&](std::size_t j) {
    const int64_t n = num.numel(j);
    NumBlock b;
    b.value = at::zeros({num.total(), n}, at::kDouble);
    b.error = at::zeros_like(b.value);
    b.left = at::zeros_like(b.value);
    b.right = at::zeros_like(b.value);
    for (int64_t k = 0; k < n; ++k) {
      const Sampled s = num.sample_element(j, k);
      std::vector<at::Tensor> samples;
      for (const auto& l : s.levels) {
        const double w = l.w.item<double>();
        samples.push_back(nominal_step ? l.diff : (w != 0 ? l.diff / w : at::zeros_like(l.diff)));
      }
      const Estimate e = ridders_extrapolate(samples, rule.shrink);
      b.value.select(1, k).copy_(e.value);
      b.error.select(1, k).copy_(e.error);
      b.left.select(1, k).copy_(s.left);
      b.right.select(1, k).copy_(s.right);
    }
    return b;
  };

  auto keep = [&](const PairReport& p) {
    return cfg.keep_jacobians || (!p.passed && p.entries <= (int64_t{1} << 22));
  };

  auto report_pair = [&](BlockCompare& bc, std::size_t i, std::size_t j,
                         const std::string& fast_detail) {
    PairReport& p = bc.pair;
    const std::string on = out_name(c.diff[i]);
    const std::string& in = f.input_names[j];
    if (p.passed) {
      if (!fast_detail.empty()) {
        // Fast mode flagged the pair, but no single entry is out of tolerance.
        fail(
            Check::kJacobian, static_cast<int>(i), static_cast<int>(j),
            "Jacobian mismatch for output " + std::to_string(i) + " with respect to " + in_label(j),
            fast_detail +
                "\n  slow mode on this pair found every entry within tolerance (the "
                "projection adds up many small errors)");
      }
      return;
    }
    if (p.bad_entries == p.nondifferentiable_entries) {
      const auto& w = bc.worst_nd;
      std::ostringstream os;
      os << "  output " << i << " ('" << on << "')" << format_index(w.output_index)
         << ": left and right one-sided differences disagree; central difference "
         << sci(w.numerical) << ", analytical " << sci(w.analytical) << " (" << p.bad_entries
         << " such entries); move the sample away from the kink";
      fail(Check::kNotDifferentiable, static_cast<int>(i), static_cast<int>(j),
           "not differentiable at " + in + format_index(w.input_index) + " (output " +
               std::to_string(i) + " with respect to " + in_label(j) + ")",
           (fast_detail.empty() ? "" : fast_detail + "\n") + os.str());
      return;
    }
    fail(Check::kJacobian, static_cast<int>(i), static_cast<int>(j),
         "Jacobian mismatch for output " + std::to_string(i) + " with respect to " + in_label(j),
         (fast_detail.empty() ? "" : fast_detail + "\n") +
             describe_worst(p, on, in, cfg.tol, steps, cfg.seed));
  };

  bool backward_failed = false;
  auto backward_error = [&](const std::exception& e, const std::string& when) {
    backward_failed = true;
    fail(Check::kBackwardError, -1, -1, "backward raised an error " + when,
         "  " + one_line_error(e));
  };

  try {
    if (cfg.mode == Mode::kSlow) {
      std::vector<std::vector<at::Tensor>> ana(num_outputs);
      try {
        for (std::size_t i = 0; i < num_outputs; ++i) ana[i] = analytical_block(i, true);
      } catch (const UnstableOutputs&) {
        throw;
      } catch (const std::exception& e) {
        backward_error(e, "computing the analytical Jacobian (one VJP per output element)");
      }
      if (!backward_failed) {
        for (std::size_t j = 0; j < num_inputs; ++j) {
          const NumBlock nb = numerical_block(j);
          for (std::size_t i = 0; i < num_outputs; ++i) {
            const auto [r0, r1] = num.rows(c.diff[i]);
            const auto& y = diff_outputs[i];
            BlockCompare bc =
                compare_block(nb.value.slice(0, r0, r1), ana[i][j], nb.error.slice(0, r0, r1),
                              nb.left.slice(0, r0, r1), nb.right.slice(0, r0, r1), cfg.tol,
                              cfg.detect_nondifferentiable, y.sizes(), c.leaves[j].sizes());
            bc.pair.output = static_cast<int>(i);
            bc.pair.input = static_cast<int>(j);
            bc.pair.output_name = out_name(c.diff[i]);
            bc.pair.input_name = f.input_names[j];
            if (keep(bc.pair)) {
              bc.pair.numerical = nb.value.slice(0, r0, r1).clone();
              bc.pair.analytical = ana[i][j];
            }
            report_pair(bc, i, j, "");
            pairs.push_back(std::move(bc.pair));
          }
        }
      }
    } else {
      // Fast mode: u per input, v per output, from the seeded generator.
      std::vector<at::Tensor> u(num_inputs), v(num_outputs), v_double(num_outputs);
      for (std::size_t j = 0; j < num_inputs; ++j) u[j] = unit_randn(num.numel(j), gen);
      for (std::size_t i = 0; i < num_outputs; ++i) {
        const auto& y = diff_outputs[i];
        v[i] = unit_randn(y.numel(), gen).to(y.options().requires_grad(false)).view(y.sizes());
        v_double[i] = flat_double(v[i]);  // as rounded to the output's dtype
      }
      std::vector<std::vector<at::Tensor>> vj(num_outputs);  // (v_i^T J_ij) [n_j]
      try {
        for (std::size_t i = 0; i < num_outputs; ++i) {
          const auto g1 = vjp({diff_outputs[i]}, {v[i]}, c.leaves, result.counts);
          const auto g2 = vjp({diff_outputs[i]}, {v[i]}, c.leaves, result.counts);
          check_metadata(g1);
          for (std::size_t j = 0; j < num_inputs; ++j) {
            vj[i].push_back(to_rows(g1, j));
            note_reentrancy(vj[i][j], to_rows(g2, j), j);
          }
        }
      } catch (const std::exception& e) {
        backward_error(e, "computing v^T J (one VJP per output)");
      }
      if (!backward_failed) {
        // Tilt u towards the analytical v^T J: the projection then stays away from 0, where
        // atol would hide a relative error (a 1% scale error on a tiny v^T J u); the random
        // part still sees errors orthogonal to v^T J. Both sides use the same u.
        for (std::size_t j = 0; j < num_inputs; ++j) {
          at::Tensor toward = at::zeros_like(u[j]);
          for (std::size_t i = 0; i < num_outputs; ++i) {
            const double na = vj[i][j].norm().item<double>();
            if (na > 0 && std::isfinite(na)) toward += vj[i][j] / na;
          }
          const double nt = toward.norm().item<double>();
          if (nt > 0 && std::isfinite(nt)) {
            const at::Tensor mixed = u[j] + toward / nt;
            const double nm = mixed.norm().item<double>();
            if (nm > 0) u[j] = mixed / nm;
          }
        }
        for (std::size_t j = 0; j < num_inputs; ++j) {
          const Sampled s = num.sample_direction(j, u[j]);
          std::vector<std::size_t> failing;
          std::vector<PairReport> fast_pairs;
          for (std::size_t i = 0; i < num_outputs; ++i) {
            const auto [r0, r1] = num.rows(c.diff[i]);
            const at::Tensor& a = vj[i][j];
            std::vector<at::Tensor> e_levels;
            for (const auto& l : s.levels) {
              const at::Tensor nv = (v_double[i] * l.diff.slice(0, r0, r1)).sum();
              const at::Tensor av = nominal_step ? (a * u[j]).sum() : (a * l.w).sum();
              e_levels.push_back(nv - av);
            }
            const Estimate e = ridders_extrapolate(e_levels, rule.shrink);
            const double analytical = (a * u[j]).sum().item<double>();
            const double numerical = analytical + e.value.item<double>();
            PairReport p;
            p.output = static_cast<int>(i);
            p.input = static_cast<int>(j);
            p.output_name = out_name(c.diff[i]);
            p.input_name = f.input_names[j];
            p.projected = true;
            p.entries = 1;
            const double abs_err = std::abs(numerical - analytical);
            const double tolerance =
                cfg.tol.atol + cfg.tol.rtol * std::abs(numerical) + e.error.item<double>();
            p.passed = abs_err <= tolerance;
            p.bad_entries = p.passed ? 0 : 1;
            p.worst_abs_error = abs_err;
            p.worst_rel_error = numerical != 0 ? abs_err / std::abs(numerical) : abs_err;
            p.worst = {{}, {}, numerical, analytical, abs_err, p.worst_rel_error, tolerance};
            if (!p.passed) failing.push_back(i);
            fast_pairs.push_back(std::move(p));
          }
          if (!failing.empty()) {
            // Slow mode on the failing pairs, for the report.
            const NumBlock nb = numerical_block(j);
            for (auto i : failing) {
              const auto [r0, r1] = num.rows(c.diff[i]);
              std::vector<at::Tensor> rows;
              try {
                rows = analytical_block(i, false);
              } catch (const UnstableOutputs&) {
                throw;
              } catch (const std::exception& e) {
                backward_error(e, "computing the analytical Jacobian for the report");
                break;
              }
              const auto& fp = fast_pairs[i];
              std::ostringstream fd;
              fd << "  fast mode: v^T J u numerical " << sci(fp.worst.numerical) << ", analytical "
                 << sci(fp.worst.analytical) << ", abs error " << sci(fp.worst.abs_error)
                 << " (tolerance " << sci(fp.worst.tolerance) << ", seed " << cfg.seed << ")";
              BlockCompare bc = compare_block(
                  nb.value.slice(0, r0, r1), rows[j], nb.error.slice(0, r0, r1),
                  nb.left.slice(0, r0, r1), nb.right.slice(0, r0, r1), cfg.tol,
                  cfg.detect_nondifferentiable, diff_outputs[i].sizes(), c.leaves[j].sizes());
              bc.pair.output = static_cast<int>(i);
              bc.pair.input = static_cast<int>(j);
              bc.pair.output_name = fp.output_name;
              bc.pair.input_name = fp.input_name;
              bc.pair.numerical = nb.value.slice(0, r0, r1).clone();
              bc.pair.analytical = rows[j];
              report_pair(bc, i, j, fd.str());
              // Keep the fast verdict, with the slow details.
              PairReport merged = std::move(bc.pair);
              merged.passed = false;
              merged.projected = false;
              merged.bad_entries = std::max<int64_t>(merged.bad_entries, 1);
              fast_pairs[i] = std::move(merged);
            }
          }
          for (auto& p : fast_pairs) pairs.push_back(std::move(p));
        }
      }
    }
  } catch (const UnstableOutputs& e) {
    fail(Check::kOutputStability, -1, -1,
         "Expected the function to return outputs with the same count, shape and dtype when "
         "inputs are perturbed",
         std::string("  ") + e.what());
  }

  // Reentrancy.
  if (!backward_failed && reentrancy_input >= 0 && !(reentrancy_worst <= cfg.nondet_tol)) {
    const auto j = static_cast<std::size_t>(reentrancy_input);
    fail(Check::kReentrancy, -1, static_cast<int>(j),
         "Backward is not reentrant, i.e., running backward with the same input and grad_output "
         "twice gives different values",
         "  max difference " + sci(reentrancy_worst) + " in the grad of " + in_label(j) +
             ", above nondet_tol " + sci(cfg.nondet_tol) +
             " (nondeterministic kernels, e.g. atomicAdd: raise nondet_tol)");
  }
  for (const auto& [j, what] : metadata_issues) {
    fail(Check::kGradMetadata, -1, j,
         "Gradient for " + in_label(static_cast<std::size_t>(j)) + " " + what);
  }

  // Zero in, zero out.
  if (cfg.check_grad_output_scaling && !backward_failed) {
    std::vector<at::Tensor> zeros;
    zeros.reserve(diff_outputs.size());
    for (const auto& y : diff_outputs) zeros.push_back(at::zeros_like(y).requires_grad_(false));
    try {
      const auto grads = vjp(diff_outputs, zeros, c.leaves, result.counts);
      for (std::size_t j = 0; j < num_inputs; ++j) {
        const auto& g = grads[j];
        if (g.defined() && g.numel() > 0 && (g != 0).any().item<bool>()) {
          const double worst = flat_double(g).abs().max().item<double>();
          fail(Check::kGradOutputScaling, -1, static_cast<int>(j),
               "backward not multiplied by grad_output",
               "  with every grad_output zero, the grad of " + in_label(j) +
                   " is not zero (max |grad| " + sci(worst) + ")");
        }
      }
    } catch (const std::exception& e) {
      fail(Check::kGradOutputScaling, -1, -1, "backward not multiplied by grad_output",
           "  with every grad_output zero, backward raised: " + one_line_error(e));
    }
  }

  // Undefined output grads: all at once, then (several outputs) each in turn.
  if (cfg.check_undefined_grad && !backward_failed) {
    std::vector<std::vector<bool>> scenarios{std::vector<bool>(num_outputs, true)};
    if (num_outputs > 1) {
      for (std::size_t k = 0; k < num_outputs; ++k) {
        std::vector<bool> s(num_outputs, false);
        s[k] = true;
        scenarios.push_back(std::move(s));
      }
    }
    for (const auto& undefined : scenarios) {
      std::vector<at::Tensor> wrapped, zeros;
      std::string which;
      for (std::size_t i = 0; i < num_outputs; ++i) {
        const auto& y = diff_outputs[i];
        wrapped.push_back(undefined[i] ? UndefinedGradFunction::apply(y) : y);
        zeros.push_back(at::zeros_like(y).requires_grad_(false));
        if (undefined[i]) {
          which +=
              (which.empty() ? "" : ", ") + std::to_string(i) + " ('" + out_name(c.diff[i]) + "')";
        }
      }
      const bool all = std::count(undefined.begin(), undefined.end(), true) ==
                       static_cast<std::ptrdiff_t>(num_outputs);
      const std::string scenario = all && num_outputs > 1
                                       ? "with every output grad undefined"
                                       : "with the grad of output " + which + " undefined";
      try {
        const auto grads = vjp(wrapped, zeros, c.leaves, result.counts);
        bool bad = false;
        for (std::size_t j = 0; j < num_inputs; ++j) {
          const auto& g = grads[j];
          if (g.defined() && g.numel() > 0 && (g != 0).any().item<bool>()) {
            fail(Check::kUndefinedGrad, -1, static_cast<int>(j),
                 "backward must handle undefined output grads: input grads must be undefined "
                 "or zero when every output grad is undefined or zero",
                 "  " + scenario + ", the grad of " + in_label(j) + " is not zero");
            bad = true;
            break;
          }
        }
        if (bad) break;
      } catch (const std::exception& e) {
        fail(Check::kUndefinedGrad, -1, -1,
             "backward must handle undefined output grads, but it raised an error",
             "  " + scenario + ": " + one_line_error(e));
        break;
      }
    }
  }
  return c;
}

}  // namespace customop::gradcheck::detail
