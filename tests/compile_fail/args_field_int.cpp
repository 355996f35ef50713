// S7 at compile time: an args-struct field of a type customop does not map (int, not int64_t).
// expect-error: [customop] unsupported args-struct field type
#include <customop/customop.h>

struct Args {
  at::Tensor x;
  int dim;
};

void misuse() { customop::define<Args>("compile_fail::op(Tensor x, int dim) -> Tensor"); }
