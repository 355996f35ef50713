// A fake kernel for an op with a data-dependent int return: no fake kernel can compute it.
// expect-error: [customop] impl_fake: this op returns an int, float or bool
#include <customop/customop.h>

#include <tuple>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args, std::tuple<at::Tensor, int64_t>>(
      "compile_fail::op(Tensor x) -> (Tensor y, int n)");
  op.impl_fake([](const Args& a) { return std::tuple<at::Tensor, int64_t>{a.x, 0}; });
}
