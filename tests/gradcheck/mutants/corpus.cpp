// The corpus table, and the static initializer that registers every op on load.

#include "mutants/corpus.h"
#include "mutants/register.h"

namespace customop_mutants {

const std::vector<CorpusEntry>& corpus() {
  detail::register_elementwise();
  detail::register_structured();
  static const std::vector<CorpusEntry> entries = {
      // Correct ops.
      {"customop_mutants::scale", "", "", ""},
      {"customop_mutants::cube", "", "", ""},
      {"customop_mutants::relu", "", "", ""},
      {"customop_mutants::mul", "", "", ""},
      {"customop_mutants::weighted_square", "", "", ""},
      {"customop_mutants::drop_first", "", "", ""},
      {"customop_mutants::sincos", "", "", ""},
      {"customop_mutants::sum_list", "", "", ""},
      {"customop_mutants::max_with_index", "", "", ""},
      {"customop_mutants::f32_softplus", "", "", "", true},
      // Mutants.
      {"customop_mutants::cube_sign_flip", "customop_mutants::cube", "sign flip", "jacobian"},
      {"customop_mutants::cube_missing_factor", "customop_mutants::cube", "missing factor 3",
       "jacobian"},
      {"customop_mutants::cube_scale_1pct", "customop_mutants::cube", "1% scale error", "jacobian"},
      {"customop_mutants::cube_jitter", "customop_mutants::cube",
       "nondeterministic jitter (relative 1e-6)", "reentrancy"},
      {"customop_mutants::cube_crash_on_undefined", "customop_mutants::cube",
       "crashes on an undefined (all-zero) grad_output", "undefined_grad"},
      {"customop_mutants::scale_ignores_grad_output", "customop_mutants::scale",
       "adds a constant instead of scaling by grad_output", "grad_output_scaling"},
      {"customop_mutants::scale_off_by_hundredth", "customop_mutants::scale",
       "every Jacobian entry off by +0.01", "jacobian"},
      {"customop_mutants::scale_disconnected", "customop_mutants::scale",
       "output marked non-differentiable though it depends on x", "nondifferentiable_output"},
      {"customop_mutants::mul_wrong_reduction", "customop_mutants::mul",
       "broadcast dim reduced with mean instead of sum", "jacobian"},
      {"customop_mutants::mul_grad_wrong_shape", "customop_mutants::mul",
       "grad_w reduced over the wrong dim (wrong shape)", "backward_error"},
      {"customop_mutants::weighted_square_swapped", "customop_mutants::weighted_square",
       "grads sent to the wrong argument", "jacobian"},
      {"customop_mutants::drop_first_off_by_one", "customop_mutants::drop_first",
       "off-by-one index in the scatter", "jacobian"},
      {"customop_mutants::sincos_swapped_grads", "customop_mutants::sincos",
       "uses the other output's grad", "jacobian"},
      {"customop_mutants::scale_contiguous_grad_output", "customop_mutants::scale",
       "backward reads grad_output's memory as if contiguous", "layout"},
      {"customop_mutants::cube_contiguous_input", "customop_mutants::cube",
       "forward reads its input's memory as if contiguous", "layout"},
      {"customop_mutants::f32_softplus_scale_1pct", "customop_mutants::f32_softplus",
       "1% scale error in a float32-only kernel", "jacobian", true},
  };
  return entries;
}

namespace {
// Loading libcustomop_mutants.so registers every op with the dispatcher.
[[maybe_unused]] const bool registered = (corpus(), true);
}  // namespace

}  // namespace customop_mutants
