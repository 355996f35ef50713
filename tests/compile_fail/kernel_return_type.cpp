// A kernel whose result does not convert to the op's Ret.
// expect-error: [customop] the kernel's return type must convert to the op's Ret
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.impl(c10::DeviceType::CPU, [](const Args&) { return std::string("not a tensor"); });
}
