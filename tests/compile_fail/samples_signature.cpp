// samples() with a generator that returns bare args structs instead of (label, args) pairs.
// expect-error: [customop] samples() takes fn(c10::Device, c10::ScalarType)
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() {
  auto& op = customop::define<Args>("compile_fail::op(Tensor x) -> Tensor");
  op.samples([](c10::Device, c10::ScalarType) { return std::vector<Args>{}; });
}
