// The schema as a template argument: a customop::MutableTensor field for a plain Tensor
// argument (the schema would not declare the write).
// expect-error: [customop] an args struct field is a customop::MutableTensor, but the schema
// expect-errors-at-most: 2
#include <customop/static_schema.h>

struct Args {
  customop::MutableTensor acc;
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor acc, Tensor x) -> Tensor">(); }
