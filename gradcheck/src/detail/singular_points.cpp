#include "detail/singular_points.h"

#include "detail/checker.h"
#include "detail/compare.h"
#include "detail/function.h"

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace customop::gradcheck::detail {

namespace {

/// The element a failed check blames, and why f is not differentiable there.
struct Blamed {
  int input = 0;
  std::vector<int64_t> index;
  std::string reason;
};

/// The checks check_function runs on the grads at the point, which a non-finite grad at a
/// singularity also fails (inf - inf is not 0; 0 * inf is not 0): the rerun decides them.
bool rerun_decides(Check c) {
  switch (c) {
    case Check::kJacobian:
    case Check::kNotDifferentiable:
    case Check::kReentrancy:
    case Check::kGradOutputScaling:
    case Check::kUndefinedGrad: return true;
    default: return false;
  }
}

/// The column of the numerical Jacobian of `p` (kept for a failing pair) where f is not
/// finite within the step, and that entry: the first whose analytical column is not finite
/// either (the grad is infinite there: asin at 1, log1p at -1), else the first with a
/// non-finite numerical entry; nullopt when every numerical entry is finite. (An output that
/// is itself not finite, log1p(-1), makes its row NaN in every column: the analytical side
/// tells which column is the element's.)
std::optional<std::pair<int64_t, double>> singular_column(const PairReport& p) {
  if (!p.numerical.defined() || p.numerical.dim() != 2 || p.numerical.numel() == 0) {
    return std::nullopt;
  }
  const at::Tensor bad = at::isfinite(p.numerical).logical_not();
  at::Tensor cols = bad.any(0);
  if (!cols.any().item<bool>()) return std::nullopt;
  if (p.analytical.defined() && p.analytical.sizes() == p.numerical.sizes()) {
    const at::Tensor both = cols & at::isfinite(p.analytical).logical_not().any(0);
    if (both.any().item<bool>()) cols = both;
  }
  const int64_t col = cols.nonzero()[0][0].item<int64_t>();
  const int64_t row = bad.select(1, col).nonzero()[0][0].item<int64_t>();
  return std::pair{col, p.numerical[row][col].item<double>()};
}

/// True when a failing pair of the blamed input in `r` holds non-finite numerical and
/// analytical entries in the blamed element's column: still at the singularity.
bool column_not_finite(const GradcheckResult& r, const Blamed& b,
                       const std::vector<at::Tensor>& point) {
  const auto j = static_cast<std::size_t>(b.input);
  if (j >= point.size()) return false;
  int64_t col = 0;  // row-major, as the Jacobian's columns run over the input's elements
  const auto sizes = point[j].sizes();
  for (std::size_t d = 0; d < sizes.size() && d < b.index.size(); ++d) {
    col = col * sizes[d] + b.index[d];
  }
  for (const auto& p : r.pairs) {
    if (p.passed || p.input != b.input || !p.numerical.defined() || p.numerical.dim() != 2 ||
        col >= p.numerical.size(1)) {
      continue;
    }
    const bool grad_finite = !p.analytical.defined() || p.analytical.dim() != 2 ||
                             at::isfinite(p.analytical.select(1, col)).all().item<bool>();
    if (!grad_finite && !at::isfinite(p.numerical.select(1, col)).all().item<bool>()) return true;
  }
  return false;
}

/// The blamed element when every failure is first-order and at a non-differentiable point;
/// nullopt otherwise.
std::optional<Blamed> blame(const GradcheckResult& r, const std::vector<at::Tensor>& point) {
  if (r.passed || r.failures.empty()) return std::nullopt;
  std::optional<Blamed> out;
  for (const auto& f : r.failures) {
    if (f.second_order || !rerun_decides(f.check)) return std::nullopt;
    if (f.check != Check::kNotDifferentiable && f.check != Check::kJacobian) continue;
    const PairReport* pair = nullptr;
    for (const auto& p : r.pairs) {
      if (!p.passed && p.output == f.output && p.input == f.input) pair = &p;
    }
    if (pair == nullptr || pair->projected) return std::nullopt;
    // A kink whose analytical value lies outside the one-sided derivatives (relu's backward
    // giving 5 at 0) is a value no limit of f supports: that failure stands (the mutant
    // corpus's relu_bad_subgradient), and one inside them passed already.
    if (f.check == Check::kNotDifferentiable) return std::nullopt;
    // The column where f is not finite within the step (not the worst entry: a NaN there
    // makes the error estimates of its whole row NaN, and a reduction's healthy entries then
    // look worst).
    const auto column = singular_column(*pair);
    const auto j = static_cast<std::size_t>(pair->input);
    if (!column || j >= point.size()) return std::nullopt;  // f is smooth here: a failure
    const std::vector<int64_t> index = unravel(column->first, point[j].sizes());
    const std::string reason =
        "a singularity: f is not finite within the step (numerical " + sci(column->second) + ")";
    if (!out) out = Blamed{pair->input, index, reason};
  }
  return out;
}

/// The element of `t` at `index`, as a 0-dim view (any strides).
at::Tensor element(const at::Tensor& t, const std::vector<int64_t>& index) {
  at::Tensor e = t;
  for (const int64_t i : index) e = e.select(0, i);
  return e;
}

}  // namespace

void move_off_singular_points(const Function& f, const std::vector<at::Tensor>& point,
                              const GradcheckOptions& options, GradcheckResult& result) {
  if (!result.tolerances.estimated) return;
  std::optional<Blamed> b = blame(result, point);
  if (!b) return;
  GradcheckOptions o = options;
  o.raise_exception = false;
  o.check_second_order = false;
  std::vector<at::Tensor> moved;
  moved.reserve(point.size());
  for (const auto& p : point) moved.push_back(clone_like(p));
  std::vector<std::string> notes;
  GradcheckResult last;
  bool ran = false;
  for (int move = 0; move < kMaxMoves && b; ++move) {
    const auto j = static_cast<std::size_t>(b->input);
    if (j >= moved.size()) return;
    const double x = element(point[j].detach(), b->index).item<double>();
    const double step = kMoveSteps * result.tolerances.eps * std::max(1.0, std::abs(x));
    std::optional<GradcheckResult> settled;
    double to = x;
    for (const double sign : {1.0, -1.0}) {
      to = x + sign * step;
      {
        at::NoGradGuard no_grad;
        element(moved[j], b->index).fill_(to);
      }
      GradcheckResult scratch;
      scratch.tolerances = result.tolerances;
      try {
        check_function(f, moved, o, result.tolerances, Order::kFirst, scratch);
      } catch (const std::exception&) {
        continue;  // f raised at the moved point: try the other side
      }
      result.counts.forward_calls += scratch.counts.forward_calls;
      result.counts.vjp_calls += scratch.counts.vjp_calls;
      // Still singular when f is not finite within the step of the moved element (asin
      // moved above 1): try the other side.
      const bool same = !scratch.passed && column_not_finite(scratch, *b, moved);
      if (!same) {
        settled = std::move(scratch);
        break;
      }
    }
    if (!settled) return;  // neither side of the element could be judged: the failure stands
    std::ostringstream note;
    note << "not differentiable here: "
         << (j < f.input_names.size() ? f.input_names[j] : "input " + std::to_string(j))
         << format_index(b->index) << " = " << sci(x) << " (input " << j << ") is at " << b->reason
         << "; skipped, and the Jacobian check ran again with it moved to " << sci(to);
    notes.push_back(note.str());
    last = std::move(*settled);
    ran = true;
    b = blame(last, moved);
  }
  if (!ran) return;
  // The Jacobian verdict of the last point replaces the first point's.
  std::vector<Failure> kept;
  for (auto& fl : result.failures) {
    if (fl.second_order || !rerun_decides(fl.check)) kept.push_back(fl);
  }
  for (auto& fl : last.failures) kept.push_back(std::move(fl));
  result.failures = std::move(kept);
  result.passed = result.failures.empty();
  result.pairs = std::move(last.pairs);
  for (auto& n : notes) result.notes.push_back(std::move(n));
}

}  // namespace customop::gradcheck::detail
