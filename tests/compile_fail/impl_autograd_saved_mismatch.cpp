// impl_autograd whose backward takes another saved-state type than save_for_backward returns.
// expect-error: [customop] backward's first parameter must be the type save_for_backward returns
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};
struct OtherSaved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_autograd([](const Args&, const at::Tensor&) { return Saved{}; },
                   [](const OtherSaved&, const at::Tensor& g) {
                     return customop::Grads{{"x", g}};
                   });
}
