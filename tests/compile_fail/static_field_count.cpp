// S7 with the schema as a template argument: a missing field.
// expect-error: [customop] the args struct must have one field per schema argument
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x, float alpha) -> Tensor">(); }
