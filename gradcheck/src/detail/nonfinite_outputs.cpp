#include "detail/nonfinite_outputs.h"

#include "detail/compare.h"
#include "detail/function.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>
#include <string>

namespace customop::gradcheck::detail {

void report_nonfinite_outputs(const Checked& checked, GradcheckResult& result) {
  const bool jacobian_failed =
      std::any_of(result.failures.begin(), result.failures.end(),
                  [](const Failure& f) { return f.check == Check::kJacobian && !f.second_order; });
  if (!jacobian_failed) return;
  for (const std::size_t o : checked.diff) {
    const at::Tensor y = checked.outputs[o].detach();
    if (!y.defined() || y.numel() == 0 || y.is_meta()) continue;
    const at::Tensor bad = at::isfinite(y).logical_not_().reshape({-1});
    const int64_t count = bad.sum().item<int64_t>();
    if (count == 0) continue;
    // The first bad element in row-major order.
    const int64_t flat = bad.nonzero().select(0, 0).item<int64_t>();
    const double value = y.reshape({-1})[flat].item<double>();
    const std::string name = o < checked.output_names.size() ? checked.output_names[o] : "";
    std::ostringstream detail;
    detail << "  " << output_label(o, name) << format_index(unravel(flat, y.sizes())) << " is "
           << sci(value) << " at the sample point (" << count << " of " << y.numel()
           << " elements not finite); no derivative exists there to check, so the failures "
              "below may say nothing of the backward: choose a sample inside the "
              "function's domain, or look for an overflow in the forward";
    add_failure(result, Check::kForwardError, false, -1, -1,
                "the function returned a non-finite value", detail.str());
    // First: the failures after it follow from it.
    std::rotate(result.failures.begin(), result.failures.end() - 1, result.failures.end());
    return;
  }
}

}  // namespace customop::gradcheck::detail
