// G1 at compile time: backward returns something that is not a grads mapping.
// expect-error: [customop] backward must return customop::Grads (by name), c10::IValue
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_backward([](const Saved&, const at::Tensor&) { return 1; });
}
