// A typed grads aggregate whose field is not a tensor type.
// expect-error: [customop] a typed grads field must be at::Tensor
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};
struct XGrads {
  double x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_backward([](const Saved&, const at::Tensor&) { return XGrads{1.0}; });
}
