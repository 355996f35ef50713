#include <customop/saved_rounding.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace customop {

namespace {

thread_local std::optional<c10::ScalarType> current;

/// Bits of significand (the implicit one included): which of two floating dtypes is finer.
int significand_bits(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Double: return 53;
    case c10::ScalarType::Float: return 24;
    case c10::ScalarType::Half: return 11;
    case c10::ScalarType::BFloat16: return 8;
    default: return 0;  // float8 and others: never rounded into, never rounded from
  }
}

}  // namespace

SavedRounding::SavedRounding(c10::ScalarType dtype) : previous_(current) {
  TORCH_CHECK_VALUE(significand_bits(dtype) > 0,
                    "customop::SavedRounding: dtype must be float64, float32, float16 or "
                    "bfloat16, got ",
                    c10::toString(dtype));
  current = dtype;
}

SavedRounding::~SavedRounding() { current = previous_; }

SavedRoundingPause::SavedRoundingPause() : previous_(current) { current.reset(); }

SavedRoundingPause::~SavedRoundingPause() { current = previous_; }

std::optional<c10::ScalarType> saved_rounding() { return current; }

at::Tensor round_if_saved_rounding(const at::Tensor& t) {
  if (!current || !t.defined()) return t;
  const int from = significand_bits(t.scalar_type());
  if (from == 0 || from <= significand_bits(*current)) return t;
  return t.detach().to(*current).to(t.scalar_type());
}

}  // namespace customop
