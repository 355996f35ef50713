// A5 with the schema as a template argument: a str return.
// expect-error: [customop] a return of the schema is not Tensor, Tensor[], int, float or bool
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x) -> str">(); }
