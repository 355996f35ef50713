#pragma once
// Saved tensors rounded to a coarser dtype, on one thread: the model of a 16-bit kernel that
// keeps what it saves for backward in its own dtype (as ATen's float16/bfloat16 kernels keep
// softmax's, sigmoid's and logsumexp's outputs). customop::gradcheck's low-precision rule
// without a reference runs the op's float64 run once more under it, so the rounding of a saved
// output is allowed for, as a reference's own 16-bit run allows for it (options.h).

#include <c10/core/ScalarType.h>

#include <optional>

namespace at {
class Tensor;
}

namespace customop {

/// While alive, every floating-point tensor that an op defined with customop saves for
/// backward on this thread (the tensor fields of its Saved struct), and whose dtype is finer
/// than `dtype`, is saved as its value rounded to `dtype` (round to nearest even), kept in its
/// own dtype. Saved tensors of `dtype` or coarser, and those of other kinds, are saved as they
/// are. The rounded copy is a new tensor: it is not an output, so no version check applies to
/// it. Scopes nest; the innermost wins. Not copyable.
/// Throws c10::ValueError when `dtype` is not a floating-point dtype.
class SavedRounding {
 public:
  explicit SavedRounding(c10::ScalarType dtype);
  ~SavedRounding();
  SavedRounding(const SavedRounding&) = delete;
  SavedRounding& operator=(const SavedRounding&) = delete;
  SavedRounding(SavedRounding&&) = delete;
  SavedRounding& operator=(SavedRounding&&) = delete;

 private:
  std::optional<c10::ScalarType> previous_;
};

/// While alive, nothing saved on this thread is rounded (a gradient check nested inside a
/// function under a low-precision check runs at full precision); the enclosing SavedRounding,
/// if any, is back on exit.
class SavedRoundingPause {
 public:
  SavedRoundingPause();
  ~SavedRoundingPause();
  SavedRoundingPause(const SavedRoundingPause&) = delete;
  SavedRoundingPause& operator=(const SavedRoundingPause&) = delete;
  SavedRoundingPause(SavedRoundingPause&&) = delete;
  SavedRoundingPause& operator=(SavedRoundingPause&&) = delete;

 private:
  std::optional<c10::ScalarType> previous_;
};

/// The dtype saved tensors are rounded to on this thread (the innermost SavedRounding), or
/// nullopt outside any.
std::optional<c10::ScalarType> saved_rounding();

/// `t` as SavedRounding saves it: rounded to saved_rounding() when one is active and t is a
/// floating-point tensor of a finer dtype; `t` itself otherwise (undefined stays undefined).
at::Tensor round_if_saved_rounding(const at::Tensor& t);

}  // namespace customop
