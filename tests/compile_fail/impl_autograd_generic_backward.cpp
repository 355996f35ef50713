// impl_autograd with a generic lambda as backward.
// expect-error: [customop] backward must have explicit parameter types
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_autograd([](const Args&, const at::Tensor&) { return Saved{}; },
                   [](const auto&, const at::Tensor& g) {
                     return customop::Grads{{"x", g}};
                   });
}
