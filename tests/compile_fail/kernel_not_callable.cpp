// A kernel that does not take the args struct.
// expect-error: [customop] a kernel must be callable as kernel(const Args&)
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const at::Tensor& x) { return x; });
}
