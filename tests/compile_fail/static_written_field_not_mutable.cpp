// The schema as a template argument: Tensor(a!) with an at::Tensor field (the write would go
// undeclared in the args struct).
// expect-error: [customop] the schema writes an argument (Tensor(a!)) whose args struct field
// expect-errors-at-most: 2
#include <customop/static_schema.h>

struct Args {
  at::Tensor acc;
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor(a!) acc, Tensor x) -> ()">(); }
