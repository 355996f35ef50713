#pragma once
/// \file
/// `customop::VmapLevel`: torch.func.vmap's level from C++ (functorch's dynamic layer), for
/// running an op's batching rule (Op::vmap) without Python: in tests, and in the gradcheck
/// harness's transforms check. Header-only.

#include <ATen/ATen.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>

#include <cstdint>
#include <vector>

namespace customop {

/// One vmap level for the life of the object (pushed on construction, popped on destruction,
/// exceptions included), as `torch.func.vmap(f, randomness="error")` holds one around f.
/// Not copyable; levels nest (the innermost is the current one).
///
/// Example (4 examples of x [3], batched along dim 1 of xs [3, 4]):
///   at::Tensor out;
///   {
///     customop::VmapLevel vmap(4);
///     out = vmap.unbatch(op({.x = vmap.batch(xs, 1)}));  // [4, 3]: example b at index b
///   }
class VmapLevel {
 public:
  /// \param batch_size  the number of examples (>= 0)
  explicit VmapLevel(int64_t batch_size)
      : batch_size_(batch_size),
        level_(at::functorch::initAndPushDynamicLayer(
            at::functorch::TransformType::Vmap, batch_size, at::functorch::RandomnessType::Error)) {
  }
  ~VmapLevel() { at::functorch::popDynamicLayerAndDeleteMetadata(); }
  VmapLevel(const VmapLevel&) = delete;
  VmapLevel& operator=(const VmapLevel&) = delete;

  /// The level's id (what BatchedTensors record).
  int64_t level() const { return level_; }
  int64_t batch_size() const { return batch_size_; }

  /// `t` seen per example: dim `dim` (negative counts from the end) of `t`, of size
  /// batch_size(), becomes the batch dim at this level. Throws c10::Error when that dim's size
  /// is not batch_size().
  at::Tensor batch(const at::Tensor& t, int64_t dim) const {
    const int64_t d = dim < 0 ? dim + t.dim() : dim;
    TORCH_CHECK(d >= 0 && d < t.dim() && t.size(d) == batch_size_, "VmapLevel::batch: dim ", dim,
                " of a tensor of shape ", t.sizes(), " is not a batch of ", batch_size_);
    return at::functorch::addBatchDim(t, d, level_);
  }

  /// A result of a call made at this level, as a plain tensor with the batch at dim 0 (an
  /// unbatched result, the same for every example, is expanded along it).
  at::Tensor unbatch(const at::Tensor& t) const {
    if (!at::functorch::isBatchedAtLevel(t, level_)) {
      std::vector<int64_t> sizes{batch_size_};
      sizes.insert(sizes.end(), t.sizes().begin(), t.sizes().end());
      return t.unsqueeze(0).expand(sizes);
    }
    auto [value, bdim] = at::functorch::unwrapTensorAtLevel(t, level_);
    return value.movedim(*bdim, 0);
  }

 private:
  int64_t batch_size_;
  int64_t level_;
};

}  // namespace customop
