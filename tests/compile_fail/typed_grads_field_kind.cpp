// A typed grads aggregate with a single tensor for a Tensor[] argument.
// expect-error: [customop] a typed grads field does not match its tensor-like argument
#include <customop/customop.h>

struct Args {
  std::vector<at::Tensor> xs;
};
struct Saved {};
struct XsGrads {
  at::Tensor xs;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor[] xs) -> Tensor");
  op.impl_backward([](const Saved&, const at::Tensor& g) { return XsGrads{g}; });
}
