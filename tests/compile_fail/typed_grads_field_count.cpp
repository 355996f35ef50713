// A typed grads aggregate with a field for a non-tensor argument.
// expect-error: [customop] the typed grads struct needs exactly one field per Tensor-like argument
#include <customop/customop.h>

struct Args {
  at::Tensor x;
  int64_t dim;
};
struct Saved {};
struct Grads2 {
  at::Tensor x;
  at::Tensor dim;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x, int dim) -> Tensor");
  op.impl_backward([](const Saved&, const at::Tensor& g) { return Grads2{g, g}; });
}
