// The schema as a template argument: an in-place op that returns its written argument.
// expect-error: [customop] the schema returns an alias of an input
// expect-errors-at-most: 2
#include <customop/static_schema.h>

struct Args {
  customop::MutableTensor acc;
  at::Tensor x;
};

void misuse() {
  customop::define<Args, "compile_fail::op(Tensor(a!) acc, Tensor x) -> Tensor(a!)">();
}
