// An args struct with a base class, with the schema as a template argument.
// expect-error: [customop] the args struct must be an aggregate
#include <customop/static_schema.h>

struct Base {
  virtual ~Base() = default;
};
struct Args : Base {
  at::Tensor x;
};

void misuse() { customop::define<Args, "compile_fail::op(Tensor x) -> Tensor">(); }
