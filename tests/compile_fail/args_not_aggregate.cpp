// An args struct Boost.PFR cannot read: it has a constructor.
// expect-error: [customop] the args struct must be an aggregate
#include <customop/customop.h>

struct Args {
  explicit Args(at::Tensor t) : x(std::move(t)) {}
  at::Tensor x;
};

void misuse() { customop::define<Args>("compile_fail::op(Tensor x) -> Tensor"); }
