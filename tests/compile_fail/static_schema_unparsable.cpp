// S1 with the schema as a template argument: no "->" before the returns.
// expect-error: [customop] the schema literal does not parse
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x) Tensor">(); }
