// The mutation audit (GradcheckOptions::check_mutation): every tensor argument gets a private
// copy of its whole base storage, the op runs once, and each storage is compared byte for
// byte with its copy from before the call. What changed is judged against the schema's
// alias annotations: a write to an argument that is not `Tensor(a!)`, a write outside a
// written argument's own view, and an output sharing storage with an argument all fail.

#include "detail/mutation_audit.h"

#include "detail/checker.h"
#include "detail/function.h"
#include "detail/op_checks.h"

#include <customop/gradcheck/gradcheck.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

// One tensor argument (or list element) as the audited call sees it.
struct Audited {
  std::string name;   // "argument 'x'" or "argument 'xs' element 1"
  std::string label;  // "'x'" or "'xs'[1]"
  bool declared = false;
  at::Tensor view;      // the tensor the op gets: the argument's view of `bytes`
  at::Tensor bytes;     // the private copy of its whole base storage, as uint8
  at::Tensor before;    // `bytes` before the call
  int64_t version = 0;  // view's version counter before the call
};

// The whole storage under `t`, as a flat uint8 tensor on t's device (no copy).
at::Tensor storage_bytes(const at::Tensor& t) {
  const auto nbytes = static_cast<int64_t>(t.storage().nbytes());
  return at::empty({0}, t.options().dtype(at::kByte)).set_(t.storage(), 0, {nbytes}, {1});
}

Audited make_audited(const at::Tensor& t, std::string name, std::string label, bool declared) {
  Audited a;
  a.name = std::move(name);
  a.label = std::move(label);
  a.declared = declared;
  a.bytes = storage_bytes(t).clone();
  a.before = a.bytes.clone();
  a.view = at::empty({0}, t.options())
               .set_(a.bytes.storage(), t.storage_offset(), t.sizes(), t.strides());
  a.version = static_cast<int64_t>(a.view._version());
  return a;
}

// Storage element `e` of `a` (in the argument's dtype) from `bytes`, for a message.
std::string element_text(const Audited& a, const at::Tensor& bytes, int64_t e) {
  const at::Tensor v =
      at::empty({0}, a.view.options()).set_(bytes.storage(), e, {1}, {1}).to(at::kCPU);
  std::ostringstream os;
  if (at::isFloatingType(v.scalar_type()) || at::isIntegralType(v.scalar_type(), true)) {
    os << v.to(at::kDouble).item<double>();
  } else {
    os << v;
  }
  return os.str();
}

// Storage element indices (of the argument's dtype) the view covers, flat.
at::Tensor view_elements(const Audited& a, int64_t storage_elems) {
  return at::arange(storage_elems, at::TensorOptions().dtype(at::kLong))
      .as_strided(a.view.sizes(), a.view.strides(), a.view.storage_offset())
      .flatten();
}

// "[i, j]" of the first position of the view at storage element `e`, or "" when none.
std::string view_index_of(const Audited& a, int64_t storage_elems, int64_t e) {
  const at::Tensor where =
      (at::arange(storage_elems, at::TensorOptions().dtype(at::kLong))
           .as_strided(a.view.sizes(), a.view.strides(), a.view.storage_offset()) == e)
          .nonzero();
  if (where.size(0) == 0) return "";
  std::ostringstream os;
  os << "[";
  for (int64_t d = 0; d < where.size(1); ++d) os << (d ? ", " : "") << where[0][d].item<int64_t>();
  os << "]";
  return os.str();
}

void judge(const Audited& a, GradcheckResult& r, std::vector<std::string>& written) {
  const auto item = static_cast<int64_t>(a.view.element_size());
  const at::Tensor changed_bytes = (a.bytes != a.before).to(at::kCPU);
  if (!changed_bytes.any().item<bool>()) {
    if (a.declared) {
      r.notes.push_back("mutation: " + a.name +
                        " is declared written (Tensor(a!)) but this sample left it unchanged");
    }
    return;
  }
  written.push_back(a.label + (a.declared ? " (declared)" : " (NOT declared)"));
  const int64_t storage_elems = changed_bytes.numel() / item;
  // Per storage element: did any of its bytes change?
  const at::Tensor changed =
      changed_bytes.narrow(0, 0, storage_elems * item).view({storage_elems, item}).any(1);
  at::Tensor in_view = at::zeros({storage_elems}, at::TensorOptions().dtype(at::kBool));
  if (a.view.numel() > 0) in_view.index_fill_(0, view_elements(a, storage_elems), true);
  const at::Tensor outside = changed & in_view.logical_not();
  const at::Tensor inside = changed & in_view;
  // The first set element of `mask`, or storage_elems (bytes past the last whole element).
  auto first = [&](const at::Tensor& mask) {
    return mask.any().item<bool>() ? mask.nonzero()[0][0].item<int64_t>() : storage_elems;
  };
  auto describe = [&](int64_t e) {
    if (e >= storage_elems) return std::string("bytes past the storage's last whole element");
    const std::string index = view_index_of(a, storage_elems, e);
    return (index.empty() ? "storage element " + std::to_string(e) + " (outside its view)"
                          : "element " + index) +
           ": " + element_text(a, a.before, e) + " -> " + element_text(a, a.bytes, e);
  };
  if (!a.declared) {
    const int64_t e = inside.any().item<bool>() ? first(inside) : first(outside);
    add_failure(r, Check::kMutation, false, -1, -1,
                "undeclared write: " + a.name +
                    " was changed by the call, but the schema does not declare a write "
                    "(Tensor, not Tensor(a!))",
                "  first changed " + describe(e) + "; " +
                    std::to_string(changed.sum().item<int64_t>()) +
                    " element(s) changed. Autograd, torch.compile and torch.export assume it "
                    "is read only: declare it Tensor(a!) (customop::MutableTensor), or write "
                    "into a new tensor");
    return;
  }
  const bool trailing =
      storage_elems * item < changed_bytes.numel() &&
      changed_bytes.narrow(0, storage_elems * item, changed_bytes.numel() - storage_elems * item)
          .any()
          .item<bool>();
  if (static_cast<int64_t>(a.view._version()) == a.version) {
    // NB: autograd learns of an in-place write only through the version counter; a kernel
    // registered without an ADInplaceOrView kernel that writes through data_ptr leaves it.
    add_failure(r, Check::kMutation, false, -1, -1,
                "missing version bump: " + a.name +
                    " was written by the call, but its version counter did not change (" +
                    std::to_string(a.version) + " before and after)",
                "  first changed " +
                    describe(inside.any().item<bool>() ? first(inside) : first(outside)) +
                    ". Autograd then cannot see the write: a tensor saved for backward before "
                    "it is used with its new values and the grads are silently wrong. Register "
                    "an ADInplaceOrView kernel that calls torch::autograd::increment_version "
                    "on each written argument (customop::define does this for MutableTensor "
                    "fields)");
  }
  if (outside.any().item<bool>() || trailing) {
    add_failure(r, Check::kMutation, false, -1, -1,
                "write outside the view: " + a.name +
                    " is declared written, but the call also changed its base storage outside "
                    "the argument's own view (sizes " +
                    c10::str(a.view.sizes()) + ", strides " + c10::str(a.view.strides()) +
                    ", offset " + std::to_string(a.view.storage_offset()) + ")",
                "  first such " + describe(first(outside)) +
                    ". A kernel that writes a non-contiguous argument as if it were "
                    "contiguous does this");
  }
}

}  // namespace

namespace {
void audit(const c10::OperatorHandle& op, const torch::jit::Stack& args, GradcheckResult& result);
}  // namespace

void audit_mutation(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                    GradcheckResult& result) {
  // NB: tensors whose storage cannot be copied (a wrapper subclass from Python, a tensor
  // without data) make the audit impossible, not the op wrong: a note says so.
  try {
    audit(op, args, result);
  } catch (const std::exception& e) {
    result.notes.push_back("mutation: not audited (" + one_line_error(e) + ")");
  }
}

namespace {
void audit(const c10::OperatorHandle& op, const torch::jit::Stack& args, GradcheckResult& result) {
  const auto& schema = op.schema();
  const auto& sargs = schema.arguments();
  std::vector<Audited> audited;
  torch::jit::Stack call;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    const std::string arg = i < sargs.size() ? sargs[i].name() : "#" + std::to_string(i);
    const auto* alias = i < sargs.size() ? sargs[i].alias_info() : nullptr;
    const bool declared = alias != nullptr && alias->isWrite();
    auto usable = [](const at::Tensor& t) {
      return t.defined() && t.has_storage() && !t.is_meta() && t.layout() == at::kStrided;
    };
    if (v.isTensor() && usable(v.toTensor())) {
      audited.push_back(
          make_audited(v.toTensor().detach(), "argument '" + arg + "'", "'" + arg + "'", declared));
      call.emplace_back(audited.back().view);
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list;
      const auto tensors = v.toTensorVector();
      for (std::size_t k = 0; k < tensors.size(); ++k) {
        if (!usable(tensors[k])) {
          list.push_back(tensors[k]);
          continue;
        }
        audited.push_back(make_audited(tensors[k].detach(),
                                       "argument '" + arg + "' element " + std::to_string(k),
                                       "'" + arg + "'[" + std::to_string(k) + "]", declared));
        list.push_back(audited.back().view);
      }
      call.emplace_back(list);
    } else {
      call.push_back(v);
    }
  }
  if (audited.empty()) {
    result.notes.emplace_back("mutation: not audited (no tensor argument with storage)");
    return;
  }
  try {
    const at::NoGradGuard no_grad;
    op.callBoxed(call);
  } catch (const std::exception& e) {
    // An op that declares writes gets no other check that would run it: its error is the
    // report. Any other op's error is reported by the gradient checks.
    if (schema.is_mutable()) {
      add_failure(result, Check::kForwardError, false, -1, -1, "the op raised an error",
                  "  " + one_line_error(e));
    }
    return;
  }
  std::vector<std::string> written;
  for (const auto& a : audited) judge(a, result, written);
  // Outputs must not share storage with an argument unless the schema says they alias.
  const auto& returns = schema.returns();
  for (std::size_t o = 0; o < call.size() && o < returns.size(); ++o) {
    if (returns[o].alias_info() != nullptr) continue;
    std::vector<at::Tensor> outs;
    if (call[o].isTensor()) outs.push_back(call[o].toTensor());
    if (call[o].isTensorList()) outs = call[o].toTensorVector();
    for (const auto& out : outs) {
      if (!out.defined() || !out.has_storage()) continue;
      for (const auto& a : audited) {
        if (!out.storage().is_alias_of(a.bytes.storage())) continue;
        add_failure(
            result, Check::kMutation, false, static_cast<int>(o), -1,
            "undeclared alias: output " + std::to_string(o) + " shares storage with " + a.name,
            "  the schema returns a new tensor (no alias annotation), so callers "
            "(autograd, torch.compile) assume writing one leaves the other unchanged; "
            "return a copy, or declare the alias in the schema");
      }
    }
  }
  std::string summary = "mutation: " + std::to_string(audited.size()) +
                        " tensor argument(s) audited byte for byte; written: ";
  if (written.empty()) summary += "none";
  for (std::size_t k = 0; k < written.size(); ++k) summary += (k ? ", " : "") + written[k];
  result.notes.push_back(summary);
}
}  // namespace

namespace {
bool mutation_enabled(const c10::OperatorHandle& op, const GradcheckOptions& options,
                      std::string& why_not) {
  // NB: an op that declares writes is always audited: the audit is the only check that runs it.
  why_not = "check_mutation off";
  return options.check_mutation || op.schema().is_mutable();
}
}  // namespace

const OpCheck kMutationCheck = {"mutation", &mutation_enabled, &audit_mutation};

}  // namespace customop::gradcheck::detail
