// A5: a return type that cannot take a backward formula (here: str) cannot even be named.
// expect-error: [customop] unsupported return type
#include <customop/customop.h>

struct Args {
  at::Tensor x;
};

void misuse() { customop::define<Args, std::string>("compile_fail::op(Tensor x) -> str"); }
