#pragma once
// The backward run in float64 at a float32 or 16-bit point: the analytical rows that decide
// the entries a coarser backward passes only by its block's rounding bound (compare.h).
// Internal to customop_gradcheck.

#include "detail/function.h"
#include "detail/numerical.h"

#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// The op's backward at float64 copies of a float32/16-bit point, through
/// Function::eval_reference (every floating argument in float64), one VJP per row, cached.
///
/// A float32 backward's rounding bound scales with its intermediate terms, which the largest
/// entry of its block stands for (compare.h); an entry within that bound but not within its own
/// row's and column's may be rounding (tanh's 1 - y^2 near y = 1) or a wrong formula whose
/// error is small against the block's largest entry. The float64 run tells them apart: its
/// rounding is 2^29 times smaller, so a float64 value as far from the differences as the
/// float32 one is the formula's error.
class Float64Backward {
 public:
  /// `f`, the point (values only, any device; float64 copies are made when first needed), and
  /// `diff`, the flat indices of the differentiable outputs. Its VJPs count in `counts` (one
  /// per row), its forward in the op's forward count. `f` and `counts` must outlive it.
  Float64Backward(const Function& f, const std::vector<at::Tensor>& point,
                  std::vector<std::size_t> diff, OpCounts& counts);

  /// Float64 CPU [m_i, n_j]: rows `rows` (flat element numbers of differentiable output i) of
  /// d output / d input j of the op run in float64, NaN in every other row. Undefined when that
  /// run is unavailable: no float64 evaluator, the op or its backward raised, an output is not
  /// float64 or does not require grad there (why() says which, first time only).
  at::Tensor block(std::size_t i, std::size_t j, int64_t input_numel,
                   const std::vector<int64_t>& rows);

  /// Float64 CPU [n_j]: v^T d output / d input j of the op run in float64, `v` the flat
  /// cotangent of differentiable output i (any dtype; used in float64). One VJP per output,
  /// cached for every input. Undefined when the float64 run is unavailable, as block().
  at::Tensor projection(std::size_t i, const at::Tensor& v, std::size_t j, int64_t input_numel);

  /// Why the float64 run is unavailable; empty while it is (or has not been tried).
  const std::string& why() const { return why_; }

 private:
  bool start();

  const Function& f_;
  std::vector<at::Tensor> point_;
  std::vector<std::size_t> diff_;
  OpCounts& counts_;
  bool started_ = false;
  std::vector<at::Tensor> leaves_, outputs_;  // float64, with the run's autograd graph
  std::string why_;
  /// (output i, row r) -> the VJP's grads per input, flat float64 CPU (undefined: not reached).
  std::map<std::pair<std::size_t, int64_t>, std::vector<at::Tensor>> rows_;
  /// Output i -> v^T J per input (projection()).
  std::map<std::size_t, std::vector<at::Tensor>> projections_;
  /// The VJP of outputs_[i] with cotangent `v` (float64, its shape), flat float64 CPU per input
  /// (undefined: not reached); empty when it raised (why_ says so).
  std::vector<at::Tensor> run_vjp(std::size_t i, const at::Tensor& v);
};

/// The entries `failed` (flat numbers in the [m, n] block `value`, output rows r0 .. r0 + m of
/// input j) that the float64 backward failed, confirmed: each one's column is sampled again at
/// eps / 2 (two forward calls per column), and where the central difference moves by more than
/// an eighth of the float64 value's distance to it, |D(eps) - D(eps / 2)| > |ana64 - D(eps)| / 8
/// (its own error, ~4/3 of that move, could then be a sixth of the mismatch: x |x| at 0, where
/// f'' jumps, gives D(eps) = eps against f'(0) = 0 with both one-sided differences equal), the
/// entry's `ana64` becomes NaN: not judged by it. Returns whether any did.
bool drop_unconverged(Numerical& num, std::size_t j, int64_t r0, double eps,
                      const at::Tensor& value, const std::vector<int64_t>& failed,
                      at::Tensor& ana64);

}  // namespace customop::gradcheck::detail
