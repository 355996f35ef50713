// S3 with the schema as a template argument: an op that returns nothing.
// expect-error: [customop] the schema returns nothing
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x) -> ()">(); }
