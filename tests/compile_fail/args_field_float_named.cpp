// A `float` field: the error names the field (CheckArgField<FieldName<5>{"alpha"}, float>).
// expect-error: CheckArgField<customop::detail::FieldName<5>{"alpha"}, float>
#include <customop/customop.h>

struct Args {
  at::Tensor x;
  float alpha;
};

void misuse() { customop::define<Args>("compile_fail::op(Tensor x, float alpha) -> Tensor"); }
