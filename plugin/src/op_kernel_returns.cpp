// What a device kernel of an op takes and returns, checked around every call (device_kernel in
// op_dispatch.cpp): a fake (Meta) kernel gets meta tensors only; each Tensor a kernel returns
// is defined, on the kernel's device, shares memory with no argument and overlaps no other
// output;
// and an op's outputs come either from its shape function or from allocating kernels, never
// from both.
//
// Why: an output that is a view or alias of an input lets a later in-place write change the
// input with no version bump (a saved input then reads new values: silently wrong grads); an
// undefined output reaches Python as None where the schema says Tensor; a CPU kernel that
// returns a meta tensor returns no data; and a call mixing a meta tensor with real ones
// reaches the fake kernel (Meta dispatches first), which answers with meta tensors computed
// from nothing.

#include "op_core_internal.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace customop {

namespace {

// Where a storage's memory lies, [begin, end); empty for one without data (meta).
std::pair<uintptr_t, uintptr_t> memory_of(const c10::StorageImpl* s) {
  const void* data = s->data_ptr().get();
  const std::optional<int64_t> nbytes = s->sym_nbytes().maybe_as_int();
  if (data == nullptr || !nbytes) return {0, 0};
  const auto begin = reinterpret_cast<uintptr_t>(data);
  return {begin, begin + static_cast<uintptr_t>(*nbytes)};
}

// One storage object, or two whose memory overlaps (at::from_blob over another's data).
bool same_memory(const c10::StorageImpl* a, const c10::StorageImpl* b) {
  if (a == b) return true;
  const auto [a0, a1] = memory_of(a);
  const auto [b0, b1] = memory_of(b);
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

// The bytes [begin, end) that the elements of `t` (with data, numel > 0) span.
std::pair<uintptr_t, uintptr_t> extent_of(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {begin, begin + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

// t's bytes as a view of `mask` (one uint8 per byte of memory from `mask`'s start, t's first
// byte at `offset`).
at::Tensor bytes_of(const at::Tensor& mask, const at::Tensor& t, int64_t offset) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end());
  c10::SmallVector<int64_t, 6> strides;
  for (const int64_t s : t.strides()) strides.push_back(s * item);
  sizes.push_back(item);
  strides.push_back(1);
  return mask.as_strided(sizes, strides, offset);
}

// Past this span, two strided views ATen cannot judge are taken as apart.
constexpr uintptr_t kMaxMaskBytes = uintptr_t{64} << 20;

// Whether two outputs share a byte of memory: ATen's answer for dense tensors of one storage;
// else (a strided or expanded view, two storage objects) the bytes each touches, marked on
// the host over the span of both (only sizes, strides and addresses are read, never data).
bool share_bytes(const at::Tensor& a, const at::Tensor& b) {
  // A fake kernel's outputs (meta, maybe symbolic sizes): the same tensor twice only.
  if (a.is_meta() || b.is_meta()) return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
  if (a.numel() == 0 || b.numel() == 0) return false;
  const at::MemOverlapStatus status = at::get_overlap_status(a, b);
  if (status == at::MemOverlapStatus::Full || status == at::MemOverlapStatus::Partial) return true;
  // ATen's "no" holds within one storage object; two objects may still hold the same memory
  // (at::from_blob over another's data).
  if (status == at::MemOverlapStatus::No && a.storage().is_alias_of(b.storage())) return false;
  if (a.const_data_ptr() == nullptr || b.const_data_ptr() == nullptr) return false;
  const auto [a0, a1] = extent_of(a);
  const auto [b0, b1] = extent_of(b);
  if (a0 >= b1 || b0 >= a1) return false;
  const uintptr_t lo = std::min(a0, b0);
  const uintptr_t hi = std::max(a1, b1);
  if (hi - lo > kMaxMaskBytes) return false;
  const at::Tensor mask = at::zeros({static_cast<int64_t>(hi - lo)}, at::kByte);
  bytes_of(mask, a, static_cast<int64_t>(a0 - lo)).fill_(1);
  return bytes_of(mask, b, static_cast<int64_t>(b0 - lo)).any().item<bool>();
}

std::string element_text(int32_t element) {
  return element < 0 ? std::string() : "[" + std::to_string(element) + "]";
}

}  // namespace

const char* detail::kernel_role(c10::DeviceType device) {
  switch (device) {
    case c10::DeviceType::CPU: return "CPU kernel";
    case c10::DeviceType::CUDA: return "CUDA kernel";
    case c10::DeviceType::Meta: return "fake (Meta) kernel";
    default: return "kernel";
  }
}

detail::ArgStorages OpCore::kernel_arg_storages(c10::DeviceType device,
                                                const torch::jit::Stack& stack) const {
  detail::ArgStorages out;
  const size_t n = args_.size();
  const bool meta = device == c10::DeviceType::Meta;
  // A Meta call: the first argument that is not a meta tensor (its device), and the first that
  // is; named only for the error.
  std::optional<c10::Device> real_device;
  std::optional<std::pair<uint32_t, int32_t>> real_at, fake_at;
  const auto note = [&](const at::Tensor& t, uint32_t arg, int32_t element) {
    if (!t.defined()) return;
    if (meta) {
      if (!t.is_meta() && !real_at) {
        real_device = t.device();
        real_at.emplace(arg, element);
      } else if (t.is_meta() && !fake_at) {
        fake_at.emplace(arg, element);
      }
    }
    if (t.has_storage()) out.push_back({t.storage().unsafeGetStorageImpl(), arg, element});
  };
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[stack.size() - n + i];
    if (v.isTensor()) {
      note(v.toTensor(), static_cast<uint32_t>(i), -1);
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        note(list.get(k), static_cast<uint32_t>(i), static_cast<int32_t>(k));
      }
    }
  }
  TORCH_CHECK(!real_at || !fake_at, name_, ": argument '", args_[real_at->first].name,
              element_text(real_at->second), "' is a ", *real_device, " tensor but '",
              args_[fake_at->first].name, element_text(fake_at->second),
              "' is a meta tensor; a call with a meta tensor runs the fake kernel, which computes "
              "no values: put every tensor argument on one device");
  return out;
}

void OpCore::check_kernel_returns(c10::DeviceType device, const detail::KernelEntry& entry,
                                  const detail::ArgStorages& args,
                                  const torch::jit::Stack& stack) const {
  const size_t num_returns = returns_.size();
  // The outputs so far, for the check that no two outputs overlap in memory.
  c10::SmallVector<std::pair<at::Tensor, std::string>, 4> outputs;
  const auto check = [&](const at::Tensor& t, size_t r, int32_t element) {
    const std::string which = "output " + std::to_string(r) + element_text(element);
    if (returns_grads_ && !t.defined()) return;  // a backward op's None grad
    TORCH_CHECK(t.defined(), name_, ": the ", detail::kernel_role(device), " at ",
                format_location(entry.loc), " returned an undefined tensor as ", which,
                "; return a tensor (an op that returns nothing declares `-> ()`)");
    const c10::DeviceType got = t.device().type();
    const bool device_ok =
        got == device || (device == c10::DeviceType::CUDA && got == c10::DeviceType::CPU);
    TORCH_CHECK(device_ok, name_, ": the ", detail::kernel_role(device), " at ",
                format_location(entry.loc), " returned ", which, " on ", t.device(),
                device == c10::DeviceType::Meta
                    ? "; a fake kernel returns meta tensors: allocate with an input's options, "
                      "e.g. at::empty_symint(a.x.sym_sizes(), a.x.options())"
                    : std::string("; a ") + c10::DeviceTypeName(device) +
                          " kernel returns tensors on its own device");
    // A grad may be the incoming grad itself; an empty output holds no memory to share.
    // NB: sym_numel: a fake kernel's outputs may have symbolic sizes (numel() throws).
    if (returns_grads_ || !t.has_storage() || t.sym_numel().maybe_as_int() == 0) return;
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    for (const auto& a : args) {
      if (!same_memory(a.storage, storage)) continue;
      const std::string& arg = args_[a.arg].name;
      TORCH_CHECK(false, name_, ": the ", detail::kernel_role(device), " at ",
                  format_location(entry.loc), " returned ", which,
                  " sharing memory with argument '", arg, element_text(a.element),
                  "' (the tensor itself, a view or an alias of it); a functional op's returns "
                  "must be new tensors (return a copy, e.g. ",
                  arg, ".clone())");
    }
    // NB: autograd sees two outputs as independent tensors: where their memory overlaps, an
    // in-place write to one silently changes the other. Disjoint parts of one buffer
    // (`y.chunk(n)`) are fine.
    for (const auto& [other_tensor, other] : outputs) {
      TORCH_CHECK(!share_bytes(t, other_tensor), name_, ": the ", detail::kernel_role(device),
                  " at ", format_location(entry.loc), " returned ", which, " sharing memory with ",
                  other,
                  " (the same tensor, a view or an alias of it); each output must be a tensor of "
                  "its own (return a copy of one of them, e.g. with .clone())");
    }
    if (num_returns > 1 || element >= 0) outputs.emplace_back(t, which);
  };
  for (size_t r = 0; r < num_returns; ++r) {
    const c10::IValue& v = stack[stack.size() - num_returns + r];
    if (v.isTensor()) {
      check(v.toTensor(), r, -1);
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) check(list.get(k), r, static_cast<int32_t>(k));
    } else if (v.isNone() && returns_[r] == ArgKind::kTensor && !returns_grads_) {
      TORCH_CHECK(false, name_, ": the ", detail::kernel_role(device), " at ",
                  format_location(entry.loc), " returned an undefined tensor as output ", r,
                  "; return a tensor (an op that returns nothing declares `-> ()`)");
    }
  }
}

void OpCore::note_allocating_kernel(c10::DeviceType device, const std::source_location& loc) {
  TORCH_CHECK(!has_shape(), name_, ": the ", c10::DeviceTypeName(device), " kernel at ",
              format_location(loc),
              " allocates its outputs (kernel(const Args&)), but the op has a shape function "
              "(declared at ",
              format_location(*shape_loc_),
              ") that allocates them: write the kernel as kernel(const Args&, outputs), which "
              "fills the outputs the shape function states (customop/op.h)");
  if (!allocating_kernel_) allocating_kernel_.emplace(device, loc);
}

void OpCore::check_no_allocating_kernel(const std::source_location& loc) const {
  TORCH_CHECK(!allocating_kernel_, name_, ": the shape function at ", format_location(loc),
              " comes after the ", c10::DeviceTypeName(allocating_kernel_->first), " kernel at ",
              format_location(allocating_kernel_->second),
              ", which allocates its outputs (kernel(const Args&)); an op with a shape function "
              "takes kernels that fill the outputs it states: declare op.shape(fn) first and "
              "write kernel(const Args&, outputs) (customop/op.h)");
}

}  // namespace customop
