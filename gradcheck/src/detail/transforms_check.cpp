// The transforms check (GradcheckOptions::check_transforms): the op under torch.func's
// transforms as they reach C++ kernels (functorch's vmap layers, forward-mode dual tensors),
// with torch's per-example vmap fallback switched off, each against a reference that does not
// use the transform on the op:
//   - jvp: forward-mode AD along random tangents, against the VJP of the same call by the
//     dot-product identity  u . (J t) = (J^T u) . t.  The VJP is what the gradient checks of the
//     same run compare with finite differences, so the JVP is checked against them too;
//   - vmap: a batch of 3 perturbed copies of the differentiable inputs, each alone and all
//     together, batched along dim 0 and along the last dim (the other arguments unbatched),
//     against a loop over the batch;
//   - vmap(vjp): the VJP with a batch of 3 cotangents (the backward runs batched: per-sample
//     gradients take this path) against a loop of VJPs.
// What the op does not support is a note, not a failure: no forward-mode formula (jvp skipped),
// no batching rule (no kernel at the FuncTorchBatched key: vmap and vmap(vjp) skipped). Any
// other error a transform raises fails the check with its message. float64 and float32
// samples (tolerances as the Python check's, _transforms_check.py); ops that write their
// arguments are not checked. The Python API runs its own, fuller check (jacrev, jacfwd, hessian,
// vmap(jvp) besides), so python_op.cpp turns this one off.

#include "detail/checker.h"
#include "detail/op_checks.h"
#include "detail/stack_tensors.h"

#include <customop/vmap_level.h>

#include <ATen/ATen.h>
#include <ATen/functorch/BatchedFallback.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/forward_grad.h>

#include <cmath>
#include <iomanip>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

constexpr int64_t kBatch = 3;

// A forward-mode AD level for the scope. torch has one level for the whole process (not per
// thread), so checks on other threads wait for it.
std::mutex& dual_level_mutex() {
  static std::mutex m;
  return m;
}

class DualLevel {
 public:
  DualLevel()
      : lock_(dual_level_mutex()), level_(torch::autograd::ForwardADLevel::get_next_idx()) {}
  ~DualLevel() { torch::autograd::ForwardADLevel::release_idx(level_); }
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  int64_t level() const { return static_cast<int64_t>(level_); }

 private:
  std::lock_guard<std::mutex> lock_;
  uint64_t level_;
};

// torch's per-example fallback off while any transforms check runs (the harness checks
// samples on several threads; the switch is process-wide): the first to enter turns it off,
// the last to leave restores what it was.
class NoVmapFallback {
 public:
  NoVmapFallback() {
    const std::lock_guard<std::mutex> lock(mutex());
    if (active()++ == 0) {
      saved() = at::functorch::isVmapFallbackEnabled();
      at::functorch::setVmapFallbackEnabled(false);
    }
  }
  ~NoVmapFallback() {
    const std::lock_guard<std::mutex> lock(mutex());
    if (--active() == 0) at::functorch::setVmapFallbackEnabled(saved());
  }
  NoVmapFallback(const NoVmapFallback&) = delete;
  NoVmapFallback& operator=(const NoVmapFallback&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& active() {
    static int n = 0;
    return n;
  }
  static bool& saved() {
    static bool b = true;
    return b;
  }
};

struct Mismatch {
  std::string step;
  std::string what;
};

// The differentiable inputs of a sample: floating tensors that require grad, as positions
// (argument, element of a Tensor[] or -1) and names.
struct Slot {
  size_t arg;
  int64_t element;
  std::string name;
};

class Transforms {
 public:
  Transforms(const c10::OperatorHandle& op, const torch::jit::Stack& args)
      : op_(op), args_(args), gen_(at::make_generator<at::CPUGeneratorImpl>(0)) {}

  // Fills slots_ and the dtype; false (and why) when the check does not apply.
  bool applies(std::string& why) {
    const auto& schema = op_.schema();
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string name =
          i < schema.arguments().size() ? schema.arguments()[i].name() : c10::str("argument ", i);
      if (args_[i].isTensor()) {
        const at::Tensor& t = args_[i].toTensor();
        if (t.defined() && t.requires_grad() && t.is_floating_point()) {
          slots_.push_back({i, -1, name});
        }
      } else if (args_[i].isTensorList()) {
        const auto list = args_[i].toTensorVector();
        for (size_t k = 0; k < list.size(); ++k) {
          if (list[k].defined() && list[k].requires_grad() && list[k].is_floating_point()) {
            slots_.push_back({i, static_cast<int64_t>(k), c10::str(name, "[", k, "]")});
          }
        }
      }
    }
    if (slots_.empty()) {
      why = "no input requires grad";
      return false;
    }
    dtype_ = primal(slots_[0]).scalar_type();
    if (dtype_ != at::kDouble && dtype_ != at::kFloat) {
      why = c10::str(c10::toString(dtype_), " (float64 and float32 only)");
      return false;
    }
    for (const auto& v : args_) {
      const bool meta = v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta();
      if (meta) {
        why = "meta tensors";
        return false;
      }
    }
    return true;
  }

  // Runs the steps; std::nullopt when all passed. Notes go to `notes`.
  std::optional<Mismatch> run(std::vector<std::string>& ran, std::vector<std::string>& notes) {
    const NoVmapFallback no_fallback;
    // The untransformed call and VJP are the references; when they raise, the gradient checks
    // report it, and there is nothing to compare the transforms with.
    std::vector<at::Tensor> outs, cot, tan, grads;
    try {
      outs = call(primals());
      for (const auto& o : outs) cot.push_back(randn_like(o));
      for (const auto& p : primals()) tan.push_back(randn_like(p));
      if (!outs.empty()) grads = vjp(cot);
    } catch (const std::exception& e) {
      note_caught_error();
      notes.push_back(
          c10::str("not checked: the op raised without a transform (", first_line(e.what()), ")"));
      return std::nullopt;
    }
    if (outs.empty()) {
      notes.emplace_back("not checked: no floating output");
      return std::nullopt;
    }
    std::string step = "jvp";
    try {
      std::optional<std::vector<at::Tensor>> jt;
      try {
        jt = jvp(tan);
      } catch (const std::exception& e) {
        if (!no_jvp(e.what())) throw;
        note_caught_error();
        notes.push_back(
            c10::str("forward-mode AD: no JVP (", first_line(e.what()), "); jvp not checked"));
      }
      if (jt) {
        double fwd = 0, rev = 0, scale = 0;
        for (size_t i = 0; i < outs.size(); ++i) {
          fwd += (*jt)[i].to(at::kDouble).mul(cot[i].to(at::kDouble)).sum().item<double>();
        }
        for (size_t j = 0; j < grads.size(); ++j) {
          const at::Tensor g = grads[j].to(at::kDouble), t = tan[j].to(at::kDouble);
          rev += g.mul(t).sum().item<double>();
          scale += g.abs().mul(t.abs()).sum().item<double>();
        }
        // (fwd == rev: infinities of one sign at a singular sample agree; NaN on both sides,
        // a singular element where J holds 0 * inf, judges nothing.)
        if (std::isnan(fwd) && std::isnan(rev)) {
          notes.emplace_back(
              "jvp: not judged at this sample: u . (J t) and (J^T u) . t are both NaN (a "
              "singular element)");
        } else if (!(fwd == rev || std::abs(fwd - rev) <= rtol() * scale + 1e-300)) {
          std::ostringstream what;
          what << std::setprecision(10) << "u . (J t) = " << fwd
               << " along the JVP but (J^T u) . t = " << rev << " along the VJP (tolerance "
               << std::setprecision(3) << rtol() * scale
               << "): the JVP (op.impl_jvp) disagrees with the backward";
          return Mismatch{step, what.str()};
        } else {
          ran.push_back(step);
        }
      }

      if (!op_.hasKernelForDispatchKey(c10::DispatchKey::FuncTorchBatched)) {
        notes.emplace_back(
            "vmap: no batching rule (no kernel at FuncTorchBatched; customop: "
            "op.vmap); vmap and vmap(vjp) not checked");
        return std::nullopt;
      }
      step = "vmap";
      try {
        for (size_t alone = 0; alone <= slots_.size(); ++alone) {
          // alone < size: that input batched alone; alone == size: all of them.
          for (const int64_t dim : {int64_t{0}, int64_t{-1}}) {
            std::vector<bool> batched(slots_.size(), alone == slots_.size());
            if (alone < slots_.size()) batched[alone] = true;
            if (auto m = vmap_vs_loop(batched, dim)) return m;
          }
        }
        ran.push_back(step);

        step = "vmap(vjp)";
        std::vector<std::vector<at::Tensor>> cots(kBatch);
        for (auto& c : cots) {
          for (const auto& o : outs) c.push_back(randn_like(o));
        }
        if (auto m = vmap_vjp_vs_loop(cots)) return m;
        ran.push_back(step);
      } catch (const std::exception& e) {
        if (!no_batch_rule(e.what())) throw;
        note_caught_error();
        notes.push_back(c10::str(step, ": an op on the way has no batching rule (",
                                 first_line(e.what()), "); not checked"));
      }
    } catch (const std::exception& e) {
      note_caught_error();
      return Mismatch{step, c10::str("raised: ", first_line(e.what()))};
    }
    return std::nullopt;
  }

 private:
  double rtol() const { return dtype_ == at::kDouble ? 1e-7 : 1e-3; }
  double same_rtol() const { return dtype_ == at::kDouble ? 1e-10 : 1e-5; }

  static std::string first_line(const std::string& s) {
    const auto nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl);
  }
  static bool has(const std::string& m, const char* part) {
    return m.find(part) != std::string::npos;
  }
  // The op (or an op it calls) has no forward-mode formula: customop's refusal names impl_jvp;
  // torch's say "forward AD" / "jvp" with "not implemented" or "does not support".
  static bool no_jvp(const std::string& m) {
    return has(m, "impl_jvp") || has(m, "has no JVP formula") ||
           ((has(m, "forward AD") || has(m, "forward-mode") || has(m, "jvp")) &&
            (has(m, "not implemented") || has(m, "does not support") || has(m, "not supported")));
  }
  // An op on the way has no batching rule, and the fallback is off.
  static bool no_batch_rule(const std::string& m) {
    return has(m, "Batching rule not implemented") || has(m, "hit the vmap fallback");
  }

  at::Tensor randn_like(const at::Tensor& t) {
    return at::randn(t.sizes(), gen_, t.options().device(at::kCPU).requires_grad(false))
        .to(t.device());
  }
  at::Tensor primal(const Slot& s) const {
    if (s.element < 0) return args_[s.arg].toTensor();
    return args_[s.arg].toTensorVector()[static_cast<size_t>(s.element)];
  }
  std::vector<at::Tensor> primals() const {
    std::vector<at::Tensor> p;
    for (const auto& s : slots_) p.push_back(primal(s).detach());
    return p;
  }

  // The op on the sample with the differentiable inputs replaced by `xs`; its floating tensor
  // outputs (Tensor[] elements in order).
  std::vector<at::Tensor> call(const std::vector<at::Tensor>& xs) const {
    torch::jit::Stack s = map_stack_tensors(args_, [](const at::Tensor& t) { return t.detach(); });
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (slots_[j].element < 0) {
        s[slots_[j].arg] = xs[j];
      } else {
        auto list = s[slots_[j].arg].toTensorVector();
        list[static_cast<size_t>(slots_[j].element)] = xs[j];
        s[slots_[j].arg] = c10::IValue(std::move(list));
      }
    }
    op_.callBoxed(s);
    std::vector<at::Tensor> outs;
    for (const auto& v : s) {
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_floating_point()) {
        outs.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        for (const auto& t : v.toTensorVector()) {
          if (t.defined() && t.is_floating_point()) outs.push_back(t);
        }
      }
    }
    return outs;
  }

  std::vector<at::Tensor> vjp(const std::vector<at::Tensor>& cot) const {
    std::vector<at::Tensor> leaves;
    for (const auto& p : primals()) leaves.push_back(p.clone().requires_grad_());
    const at::AutoGradMode grad_mode(true);
    const std::vector<at::Tensor> outs = call(leaves);
    auto grads = torch::autograd::grad(outs, leaves, cot, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t j = 0; j < grads.size(); ++j) {
      if (!grads[j].defined()) grads[j] = at::zeros_like(leaves[j]);
    }
    return grads;
  }

  std::vector<at::Tensor> jvp(const std::vector<at::Tensor>& tan) const {
    const DualLevel level;
    std::vector<at::Tensor> duals;
    const std::vector<at::Tensor> p = primals();
    for (size_t j = 0; j < p.size(); ++j) {
      duals.push_back(at::_make_dual(p[j].clone(), tan[j], level.level()));
    }
    const std::vector<at::Tensor> outs = call(duals);
    std::vector<at::Tensor> tangents;
    for (const auto& o : outs) {
      at::Tensor t = std::get<1>(at::_unpack_dual(o, level.level()));
      tangents.push_back(t.defined() ? t.clone() : at::zeros_like(o));
    }
    return tangents;
  }

  // Compares per output; a Mismatch naming the step, output and element when off.
  std::optional<Mismatch> close(const std::string& step, const std::vector<at::Tensor>& got,
                                const std::vector<at::Tensor>& want, double rtol) const {
    if (got.size() != want.size()) {
      return Mismatch{step, c10::str(got.size(), " outputs, expected ", want.size())};
    }
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k].sizes() != want[k].sizes()) {
        return Mismatch{step, c10::str("output ", k, ": shape ", got[k].sizes(), ", expected ",
                                       want[k].sizes())};
      }
      if (want[k].numel() == 0) continue;
      const at::Tensor g = got[k].detach().to(at::kCPU, at::kDouble);
      const at::Tensor w = want[k].detach().to(at::kCPU, at::kDouble);
      const double scale = w.abs().max().item<double>();
      const at::Tensor err = (g - w).abs();
      const double worst = err.max().item<double>();
      const bool nan_mismatch = !g.isnan().equal(w.isnan());
      if (nan_mismatch || worst > rtol * scale + 1e-300) {
        const int64_t flat = (nan_mismatch ? g.isnan().ne(w.isnan()) : err.eq(worst))
                                 .reshape(-1)
                                 .nonzero()
                                 .select(0, 0)
                                 .item<int64_t>();
        std::vector<int64_t> index(static_cast<size_t>(g.dim()));
        int64_t rest = flat;
        for (int64_t d = g.dim() - 1; d >= 0; --d) {
          index[static_cast<size_t>(d)] = rest % g.size(d);
          rest /= g.size(d);
        }
        std::ostringstream what;
        what << std::setprecision(10) << "output " << k << " element " << c10::IntArrayRef(index)
             << ": " << g.reshape(-1)[flat].item<double>() << ", expected "
             << w.reshape(-1)[flat].item<double>() << " (tolerance " << std::setprecision(3)
             << rtol * scale << ")";
        return Mismatch{step, what.str()};
      }
    }
    return std::nullopt;
  }

  // vmap over the inputs marked in `batched` (3 perturbed copies stacked at `dim`) against a
  // loop over the copies.
  std::optional<Mismatch> vmap_vs_loop(const std::vector<bool>& batched, int64_t dim) {
    const std::vector<at::Tensor> p = primals();
    std::vector<std::string> names;
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (!batched[j]) continue;
      if (dim == -1 && p[j].dim() == 0) return std::nullopt;  // no last dim to batch along
      names.push_back("'" + slots_[j].name + "'");
    }
    // copies[b][j]: example b's input j.
    std::vector<std::vector<at::Tensor>> copies(kBatch);
    for (int64_t b = 0; b < kBatch; ++b) {
      for (size_t j = 0; j < p.size(); ++j) {
        copies[b].push_back(batched[j] ? p[j] + 0.01 * static_cast<double>(b) * randn_like(p[j])
                                       : p[j]);
      }
    }
    std::vector<std::vector<at::Tensor>> per_example;
    for (int64_t b = 0; b < kBatch; ++b) per_example.push_back(call(copies[b]));
    std::vector<at::Tensor> want;
    for (size_t k = 0; k < per_example[0].size(); ++k) {
      std::vector<at::Tensor> ks;
      ks.reserve(per_example.size());
      for (const auto& e : per_example) ks.push_back(e[k]);
      want.push_back(at::stack(ks));
    }
    std::vector<at::Tensor> got;
    {
      const customop::VmapLevel level(kBatch);
      std::vector<at::Tensor> xs;
      for (size_t j = 0; j < p.size(); ++j) {
        if (!batched[j]) {
          xs.push_back(p[j]);
          continue;
        }
        std::vector<at::Tensor> ex;
        for (int64_t b = 0; b < kBatch; ++b) ex.push_back(copies[b][j]);
        const int64_t d = dim == 0 ? 0 : p[j].dim();
        xs.push_back(level.batch(at::stack(ex, d), d));
      }
      for (const auto& o : call(xs)) got.push_back(level.unbatch(o));
    }
    return close(c10::str("vmap over ", c10::Join(", ", names), " (in_dim ", dim, ")"), got, want,
                 same_rtol());
  }

  // The VJP with `cots[b]` as the cotangents of example b, batched under vmap, against a loop.
  std::optional<Mismatch> vmap_vjp_vs_loop(const std::vector<std::vector<at::Tensor>>& cots) {
    std::vector<at::Tensor> leaves;
    for (const auto& p : primals()) leaves.push_back(p.clone().requires_grad_());
    const at::AutoGradMode grad_mode(true);
    const std::vector<at::Tensor> outs = call(leaves);
    std::vector<std::vector<at::Tensor>> want;
    for (const auto& c : cots) {
      auto g = torch::autograd::grad(outs, leaves, c, /*retain_graph=*/true, false, true);
      for (size_t j = 0; j < g.size(); ++j) {
        if (!g[j].defined()) g[j] = at::zeros_like(leaves[j]);
      }
      want.push_back(std::move(g));
    }
    std::vector<at::Tensor> got;
    {
      const customop::VmapLevel level(kBatch);
      std::vector<at::Tensor> batched;
      for (size_t k = 0; k < outs.size(); ++k) {
        std::vector<at::Tensor> ks;
        ks.reserve(cots.size());
        for (const auto& c : cots) ks.push_back(c[k]);
        batched.push_back(level.batch(at::stack(ks), 0));
      }
      auto g = torch::autograd::grad(outs, leaves, batched, /*retain_graph=*/true, false, true);
      for (size_t j = 0; j < g.size(); ++j) {
        if (g[j].defined()) {
          got.push_back(level.unbatch(g[j]));
        } else {
          std::vector<int64_t> sizes{kBatch};
          sizes.insert(sizes.end(), leaves[j].sizes().begin(), leaves[j].sizes().end());
          got.push_back(at::zeros(sizes, leaves[j].options()));
        }
      }
    }
    for (int64_t b = 0; b < kBatch; ++b) {
      std::vector<at::Tensor> got_b;
      got_b.reserve(got.size());
      for (const auto& g : got) got_b.push_back(g[b]);
      if (auto m = close(c10::str("vmap(vjp) example ", b), got_b, want[static_cast<size_t>(b)],
                         rtol())) {
        return m;
      }
    }
    return std::nullopt;
  }

  const c10::OperatorHandle& op_;
  const torch::jit::Stack& args_;
  at::Generator gen_;
  std::vector<Slot> slots_;
  c10::ScalarType dtype_ = at::kDouble;
};

void check_transforms(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                      GradcheckResult& result) {
  Transforms t(op, args);
  std::string why;
  if (!t.applies(why)) {
    result.notes.push_back("transforms: not checked (" + why + ")");
    return;
  }
  std::vector<std::string> ran, notes;
  const std::optional<Mismatch> m = t.run(ran, notes);
  for (const auto& n : notes) result.notes.push_back("transforms: " + n);
  if (m) {
    add_failure(result, Check::kTransforms, false, -1, -1,
                c10::str("transforms: ", op.schema().name(), " fails torch.func's ", m->step),
                c10::str("  ", m->what, "\n  passed before it: ",
                         ran.empty() ? std::string("none") : c10::Join(", ", ran),
                         " (vmap fallback off: the op's batching rule must serve)"));
  } else if (!ran.empty()) {
    result.notes.push_back("transforms: passed " + c10::Join(", ", ran));
  }
}

bool transforms_enabled(const c10::OperatorHandle& op, const GradcheckOptions& options,
                        std::string& why_not) {
  if (op.schema().is_mutable()) {
    why_not = "the op writes its arguments";
    return false;
  }
  why_not = "check_transforms off";
  return options.check_transforms;
}

}  // namespace

const OpCheck kTransformsCheck = {"transforms", &transforms_enabled, &check_transforms};

}  // namespace customop::gradcheck::detail
