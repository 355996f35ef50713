// The schema as a template argument: a return type the compile-time parser does not read.
// expect-error: [customop] a return of the schema is not Tensor, Tensor[], int, float or bool
// expect-errors-at-most: 2
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x) -> Device">(); }
