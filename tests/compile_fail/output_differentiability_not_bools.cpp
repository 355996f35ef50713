// O1: output_differentiability given as something other than a list of bools.
// expect-error: [customop] output_differentiability must be a list of bools
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_backward(
      [](const Saved&, const at::Tensor& g) {
        return customop::Grads{{"x", g}};
      },
      std::vector<int>{1});
}
