#include "detail/fake_check.h"

#include "detail/checker.h"
#include "detail/op_checks.h"

#include "detail/shape_sweep.h"
#include "detail/stack_tensors.h"
#include <customop/op_core.h>

#include <ATen/ops/empty_strided.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <sstream>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

at::Tensor meta_like(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

// The output tensors of one return (one for Tensor, n for Tensor[]); empty otherwise.
std::vector<at::Tensor> tensors_of(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  if (v.isTensorList()) return v.toTensorVector();
  return {};
}

std::string kind_of(const c10::IValue& v) {
  if (v.isTensor()) return "Tensor";
  if (v.isTensorList()) return "Tensor[] of " + std::to_string(v.toTensorList().size());
  return v.tagKind();
}

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Strides of the dims of size > 1, as "[s0, -, s2]" (a dim of size 0 or 1 imposes no layout).
std::vector<int64_t> significant_strides(const at::Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < t.dim(); ++d) out.push_back(t.size(d) > 1 ? t.stride(d) : -1);
  return out;
}

std::string input_device(const torch::jit::Stack& args) {
  for (const auto& v : args) {
    for (const auto& t : tensors_of(v)) {
      if (t.defined()) return t.device().str();
    }
  }
  return "cpu";
}

}  // namespace

namespace {

enum class FakeOutcome : std::uint8_t { kRealRaised, kNoFake, kAgreed, kDiffered };

// Runs `op` on `args` and on meta copies, and adds a kFakeKernel failure per difference;
// `on` ("" for the sample itself, else " on <variant>") ends each headline.
FakeOutcome compare_fake_and_real(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                                  const std::string& on, GradcheckResult& result) {
  const c10::AutoGradMode no_grad(false);
  // Copies: an op may write its arguments (declared or not); the caller's stay as they are.
  torch::jit::Stack real = clone_stack_detached(args);
  try {
    op.callBoxed(real);
  } catch (const std::exception&) {
    note_caught_error();
    return FakeOutcome::kRealRaised;  // the real kernel's error is the other checks' to report
  }
  const std::size_t failures_before = result.failures.size();
  torch::jit::Stack fake = map_stack_tensors(args, meta_like);
  try {
    op.callBoxed(fake);
  } catch (const std::exception& e) {
    // A Meta kernel that only says there is no fake (torch.library.custom_op without
    // register_fake): the op has none to check, which is not a wrong one.
    const std::string what = e.what();
    if (what.find("no fake impl registered") != std::string::npos ||
        what.find("no fake (Meta) kernel registered") != std::string::npos) {
      result.notes.emplace_back("fake kernel: not checked (the op has no fake kernel)");
      return FakeOutcome::kNoFake;
    }
    add_failure(result, Check::kFakeKernel, false, -1, -1,
                "Fake kernel raised on meta copies of the inputs, where the real kernel ran" + on,
                "  " + one_line_error(e));
    return FakeOutcome::kDiffered;
  }
  const auto& rets = op.schema().returns();
  // "output 1 ('indices')", or "output 0" for an unnamed return.
  auto output = [&](size_t i) {
    std::string out = "output " + std::to_string(i);
    if (i < rets.size() && !rets[i].name().empty()) out += " ('" + rets[i].name() + "')";
    return out;
  };
  auto fail = [&](size_t i, const std::string& where, const std::string& what,
                  const std::string& fake_v, const std::string& real_v) {
    add_failure(result, Check::kFakeKernel, false, static_cast<int>(i), -1,
                "Fake kernel mismatch for " + output(i) + where + ": " + what + on,
                "  fake (Meta) kernel: " + fake_v + "\n  real kernel:        " + real_v);
  };
  if (fake.size() != real.size()) {
    add_failure(result, Check::kFakeKernel, false, -1, -1,
                "Fake kernel mismatch: it returned " + std::to_string(fake.size()) +
                    " values, the real kernel " + std::to_string(real.size()) + on);
    return FakeOutcome::kDiffered;
  }
  const std::string device = input_device(args);
  for (size_t i = 0; i < real.size(); ++i) {
    if (kind_of(fake[i]) != kind_of(real[i])) {
      fail(i, "", "kind", kind_of(fake[i]), kind_of(real[i]));
      continue;
    }
    const auto ft = tensors_of(fake[i]);
    const auto rt = tensors_of(real[i]);
    for (size_t k = 0; k < rt.size(); ++k) {
      const std::string where =
          real[i].isTensorList() ? " element " + std::to_string(k) : std::string();
      const at::Tensor& f = ft[k];
      const at::Tensor& r = rt[k];
      if (f.defined() != r.defined()) {
        fail(i, where, "definedness", f.defined() ? "a tensor" : "undefined",
             r.defined() ? "a tensor" : "undefined");
        continue;
      }
      if (!r.defined()) continue;
      if (f.sizes() != r.sizes()) {
        fail(i, where, "shape", str(f.sizes()), str(r.sizes()));
        continue;
      }
      if (f.scalar_type() != r.scalar_type()) {
        fail(i, where, "dtype", str(f.scalar_type()), str(r.scalar_type()));
      }
      // An empty tensor has no layout to agree on.
      if (r.numel() > 0 && significant_strides(f) != significant_strides(r)) {
        fail(i, where, "strides", str(f.strides()), str(r.strides()));
      }
      if (!f.is_meta()) {
        fail(i, where, "device", f.device().str() + " (expected meta)", r.device().str());
      }
      if (r.device().str() != device) {
        fail(i, where, "device", f.device().str(),
             r.device().str() + " (the inputs are on " + device + ")");
      }
    }
  }
  return result.failures.size() == failures_before ? FakeOutcome::kAgreed : FakeOutcome::kDiffered;
}

}  // namespace

void check_fake_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                       GradcheckResult& result) {
  if (compare_fake_and_real(op, args, "", result) != FakeOutcome::kAgreed) return;
  std::vector<std::string> names;
  for (const auto& a : op.schema().arguments()) names.push_back(a.name());
  const auto variants = shape_variants(args, names);
  std::size_t agreed = 0;
  std::size_t refused = 0;
  for (const auto& v : variants) {
    const FakeOutcome o =
        compare_fake_and_real(op, v.args, " (on a variant of the sample: " + v.what + ")", result);
    // One variant's failure says it; the rest add noise.
    if (o == FakeOutcome::kDiffered || o == FakeOutcome::kNoFake) return;
    (o == FakeOutcome::kAgreed ? agreed : refused) += 1;
  }
  result.notes.push_back("fake kernel: agreed with the real kernel on the sample and on " +
                         std::to_string(agreed) + " of " + std::to_string(variants.size()) +
                         " variants of its sizes, dtypes and layouts (the real kernel refused " +
                         std::to_string(refused) + ")");
}

namespace {
bool fake_enabled(const c10::OperatorHandle& op, const GradcheckOptions& options,
                  std::string& why_not) {
  if (!options.check_fake_kernel) {
    why_not = "check_fake_kernel off";
    return false;
  }
  // NB: customop registers a Meta kernel for every op, which raises when the op has none of
  // its own (an op for eager use only): that op has no fake kernel to check.
  const auto& schema = op.schema();
  const OpCore* core = schema.overload_name().empty() ? find_op(schema.name()) : nullptr;
  why_not = "the op has no fake (Meta) kernel";
  return core != nullptr ? core->has_fake_kernel()
                         : op.hasKernelForDispatchKey(c10::DispatchKey::Meta);
}
}  // namespace

const OpCheck kFakeKernelCheck = {"fake kernel", &fake_enabled, &check_fake_kernel};

}  // namespace customop::gradcheck::detail
