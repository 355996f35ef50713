// define_backward: the backward args struct's first field must take the grad of the op's
// Tensor output (an at::Tensor), not a double.
// expect-error: [customop] define_backward: the backward args struct's first fields receive
// expect-errors-at-most: 1
#include <customop/customop.h>

struct Args {
  at::Tensor x;
  double alpha;
};
struct BackwardArgs {
  double alpha;
  at::Tensor grad;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x, float alpha) -> Tensor");
  op.define_backward<BackwardArgs>(
      [](const Args& a, const at::Tensor&) { return BackwardArgs{.alpha = a.alpha}; });
}
