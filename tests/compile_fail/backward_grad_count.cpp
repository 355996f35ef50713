// backward with one grad parameter for an op with two returns.
// expect-error: [customop] backward takes the saved state then exactly one grad per return
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args, std::tuple<at::Tensor, at::Tensor>>(
      "compile_fail::op(Tensor x) -> (Tensor, Tensor)");
  op.impl_backward([](const Saved&, const at::Tensor& g) { return customop::Grads{{"x", g}}; });
}
