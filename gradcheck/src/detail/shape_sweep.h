#pragma once
// The inputs the fake-kernel check compares on besides the given sample. Internal to
// customop_gradcheck.

#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// One variant of a sample: what changed, in words, and the arguments.
struct ShapeVariant {
  std::string what;  ///< "dims of size 4 -> 0 ('x' dim 0)", "every tensor at offset 1"
  torch::jit::Stack args;
};

/// Variants of `args` (no tensor of `args` is shared with them; values are fresh: randn for
/// floating dtypes, zeros otherwise):
///   - per distinct size n > 0 among the tensor arguments' dims (lists' elements included):
///     every dim of size n, across all tensors at once (so that dims the op ties together
///     stay equal), set to 0, to 1 and to n + 3, each tensor keeping the order of its strides
///     (a transposed input stays transposed);
///   - every floating tensor cast to each of float64, float32, bfloat16 and float16 that the
///     sample's (first floating tensor's) dtype is not, values and layout kept;
///   - every tensor of 2 or more dims with its last two dims transposed in memory;
///   - every tensor at storage offset 1 (a view one element into a larger buffer).
/// Many variants break an op's own rules (a cache index past the end): the caller runs the
/// real kernel first and skips the variants it refuses. At most `max_variants`, in that order.
std::vector<ShapeVariant> shape_variants(const torch::jit::Stack& args,
                                         const std::vector<std::string>& arg_names,
                                         std::size_t max_variants = 30);

}  // namespace customop::gradcheck::detail
