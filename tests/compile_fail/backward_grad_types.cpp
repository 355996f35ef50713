// backward taking a list grad for a Tensor return.
// expect-error: [customop] backward's grad parameters must be, per return
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl_backward([](const Saved&, const std::vector<at::Tensor>& g) {
    return customop::Grads{{"x", g[0]}};
  });
}
