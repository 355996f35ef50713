// A generic lambda as backward: its parameter types cannot be read.
// expect-error: [customop] backward must be a function or a lambda with explicit parameter types
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_backward([](const auto&, const auto& g) { return customop::Grads{{"x", g}}; });
}
