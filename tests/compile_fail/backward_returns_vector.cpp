// The autograd::Function habit: backward returns a std::vector of grads. One clear error.
// expect-error: [customop] backward must return customop::Grads (by name), c10::IValue
// expect-errors-at-most: 1
#include <customop/customop.h>

#include <vector>

struct Args {
  at::Tensor x;
  at::Tensor bias;
};
struct Saved {};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x, Tensor bias) -> Tensor");
  op.impl_backward([](const Saved&, const at::Tensor& g) { return std::vector<at::Tensor>{g, g}; });
}
