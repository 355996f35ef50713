#include "detail/jacobian_size.h"

#include <cmath>
#include <sstream>

namespace customop::gradcheck::detail {

JacobianSize jacobian_size(const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs) {
  JacobianSize s;
  for (const auto& x : inputs) s.input_elements += x.defined() ? x.numel() : 0;
  for (const auto& y : outputs) s.output_elements += y.defined() ? y.numel() : 0;
  s.entries = static_cast<double>(s.input_elements) * static_cast<double>(s.output_elements);
  return s;
}

std::string JacobianSize::fast_mode_note(const GradcheckOptions& o) const {
  std::ostringstream os;
  os << "slow mode would build Jacobians of " << input_elements << " input elements x "
     << output_elements << " output elements = " << entries
     << " entries, above max_jacobian_entries = " << o.max_jacobian_entries
     << ": judged in fast mode instead (one random projection v^T J u per pair; a failing pair "
        "is compared entry by entry where its own Jacobian fits)";
  return os.str();
}

std::string fast_mode_figures(const PairReport& fp, bool estimated, std::uint64_t seed) {
  std::ostringstream fd;
  fd << "  fast mode"
     << (std::isnan(fp.worst.float64_analytical) ? "" : ", the backward run in float64")
     << ": v^T J u numerical " << sci(fp.worst.numerical);
  if (estimated) fd << " (error estimate " << sci(fp.worst.error_estimate) << ")";
  fd << ", analytical " << sci(fp.worst.analytical);
  if (estimated) fd << " (rounding bound " << sci(fp.worst.rounding_bound) << ")";
  fd << ", abs error " << sci(fp.worst.abs_error) << " (tolerance " << sci(fp.worst.tolerance)
     << ", seed " << seed << ")";
  return fd.str();
}

std::string recheck_skipped(std::int64_t input_elements, std::int64_t output_elements,
                            const GradcheckOptions& o) {
  std::ostringstream os;
  os << "  not compared entry by entry: the pair's Jacobian (" << input_elements
     << " input elements x " << output_elements << " output elements) is above "
     << "max_jacobian_entries = " << o.max_jacobian_entries
     << "; the projection's verdict stands (smaller samples, or a larger limit, name the entry)";
  return os.str();
}

}  // namespace customop::gradcheck::detail
