// save_for_backward that does not take (inputs, output).
// expect-error: [customop] save_for_backward must be callable as fn(const Args& inputs, const Ret&
// output)
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_save_for_backward([](const Args& a) { return Saved{a.x}; });
}
