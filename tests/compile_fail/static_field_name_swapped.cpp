// Two same-typed fields in the other order than the schema's arguments: the types match, the
// names do not.
// expect-error: [customop] an args struct field is named differently from its schema argument
#include <customop/customop.h>
#include <customop/static_schema.h>

struct Args {
  at::Tensor x;
  double scale;
  double negative_slope;
};

void misuse() {
  customop::define<Args,
                   "compile_fail::op(Tensor x, float negative_slope, float scale) -> Tensor">();
}
