// save_for_backward returning a tensor instead of a saved-state aggregate.
// expect-error: [customop] save_for_backward must return an aggregate struct
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_save_for_backward([](const Args& a, const at::Tensor&) { return a.x; });
}
