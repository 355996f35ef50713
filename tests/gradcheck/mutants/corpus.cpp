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
      {"customop_mutants::exp_near_ten", "", "", ""},
      {"customop_mutants::abs_near_kink", "", "", ""},
      {"customop_mutants::cube_tail", "", "", ""},
      {"customop_mutants::sum_4096", "", "", "", false, false, true},
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
      {"customop_mutants::cube_scale_0p1pct", "customop_mutants::cube",
       "backward 0.1% too large everywhere (a wrong constant)", "jacobian", false, true},
      {"customop_mutants::exp_near_ten_0p1pct", "customop_mutants::exp_near_ten",
       "backward 0.1% too large, on values near 2e4", "jacobian", false, true},
      {"customop_mutants::cube_tail_slip", "customop_mutants::cube_tail",
       "backward drops the last of 15 grads (a SIMD tail slip)", "jacobian"},
      {"customop_mutants::sum_4096_tail_slip", "customop_mutants::sum_4096",
       "backward drops the last of 4096 grads", "jacobian", false, false, true},
      {"customop_mutants::relu_bad_subgradient", "customop_mutants::relu",
       "backward gives 5 at the kink, outside the one-sided derivatives [0, 1]",
       "not_differentiable"},
  };
  return entries;
}

const std::vector<SchemaCorpusEntry>& schema_corpus() {
  detail::register_schema_bugs();
  static const std::vector<SchemaCorpusEntry> entries = {
      {"customop_mutants::double_it", "", "", ""},
      {"customop_mutants::add_one_", "", "", ""},
      {"customop_mutants::pad_row", "", "", ""},
      {"customop_mutants::tall_copy", "", "", ""},
      {"customop_mutants::scale3", "", "", ""},
      {"customop_mutants::halve", "", "", ""},
      {"customop_mutants::add_iota", "", "", ""},
      {"customop_mutants::double_it_writes_input", "customop_mutants::double_it",
       "writes its input (Tensor, not Tensor(a!)) and returns a copy", "mutation"},
      {"customop_mutants::add_one_no_bump_", "customop_mutants::add_one_",
       "registered by hand: writes through data_ptr, no ADInplaceOrView kernel (no version "
       "bump)",
       "mutation"},
      {"customop_mutants::pad_row_locks_size", "customop_mutants::pad_row",
       "fake kernel reads the row count with guard_int (the size is locked)", "shape_lock"},
      {"customop_mutants::tall_copy_fake_contiguous", "customop_mutants::tall_copy",
       "kernel returns column-major output for tall inputs; the fake is always row-major",
       "fake_kernel"},
      {"customop_mutants::halve_upcasts", "customop_mutants::halve",
       "kernel returns float32 for bfloat16/float16 input; the fake states the input's dtype",
       "fake_kernel"},
      {"customop_mutants::add_iota_walks_memory", "customop_mutants::add_iota",
       "in-place variant registered by hand adds i to the i-th element of memory, not of the "
       "logical order",
       "inplace_variant"},
      {"customop_mutants::add_iota_no_bump", "customop_mutants::add_iota",
       "in-place variant registered by hand writes below ADInplaceOrView: no version bump",
       "inplace_variant"},
      {"customop_mutants::halve_loses_grad", "customop_mutants::halve",
       "in-place variant registered by hand at the Autograd key writes below ADInplaceOrView "
       "and records no backward: grads pass through as the identity's",
       "inplace_variant"},
      {"customop_mutants::scale3_out_off", "customop_mutants::scale3",
       "out= overload registered by hand computes 3.003 x, the functional op 3 x", "out_variant"},
      {"customop_mutants::scale3_out_reads", "customop_mutants::scale3",
       "out= overload adds into its buffer instead of overwriting it", "out_variant"},
  };
  return entries;
}

namespace {
// Loading libcustomop_mutants.so registers every op with the dispatcher.
[[maybe_unused]] const bool registered =
    (corpus(), schema_corpus(), detail::register_transform_bugs(), true);
}  // namespace

}  // namespace customop_mutants
