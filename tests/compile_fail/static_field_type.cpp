// S7 with the schema as a template argument: at::Tensor for a Tensor? argument.
// expect-error: [customop] an args struct field does not match its schema argument type
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
  at::Tensor bias;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x, Tensor? bias) -> Tensor">(); }
