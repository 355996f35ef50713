#pragma once
// Slow mode's Jacobians against options.max_jacobian_entries: a sample too large for them is
// judged in fast mode (one projection per pair) instead of refused, and a failing projection
// is compared entry by entry only where that pair's Jacobian fits. Internal to
// customop_gradcheck.

#include "detail/compare.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// The entries slow mode would hold: (elements of `inputs`) x (elements of `outputs`).
struct JacobianSize {
  std::int64_t input_elements = 0;
  std::int64_t output_elements = 0;
  double entries = 0;  ///< their product (a double: it may pass int64's range)

  bool fits(const GradcheckOptions& o) const {
    return entries <= static_cast<double>(o.max_jacobian_entries);
  }
  /// The note of a sample judged in fast mode instead: the sizes, the limit, what ran.
  std::string fast_mode_note(const GradcheckOptions& o) const;
};

JacobianSize jacobian_size(const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs);

/// The fast-mode figures of a failing projection `fp`, as the head of its failure's detail:
/// "  fast mode: v^T J u numerical .. (error estimate ..), analytical .., abs error ..
/// (tolerance .., seed ..)"; the estimates only under the estimated rule.
std::string fast_mode_figures(const PairReport& fp, bool estimated, std::uint64_t seed);

/// The detail line of a failing projection whose pair is too large to compare entry by entry
/// (`input_elements` x `output_elements` above the limit): the projection's verdict stands.
std::string recheck_skipped(std::int64_t input_elements, std::int64_t output_elements,
                            const GradcheckOptions& o);

}  // namespace customop::gradcheck::detail
