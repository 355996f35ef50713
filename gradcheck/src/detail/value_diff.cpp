// first_difference (value_diff.h): the out= and in-place variant checks' comparison.

#include "detail/value_diff.h"

#include <ATen/ATen.h>

#include <sstream>

namespace customop::gradcheck::detail {

std::string first_difference(const at::Tensor& got, const at::Tensor& want) {
  return first_difference(got, want, 8 * (want.scalar_type() == at::kDouble ? 1e-15 : 1e-6));
}

std::string first_difference(const at::Tensor& got, const at::Tensor& want, double eps) {
  if (got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "sizes " << got.sizes() << ", expected " << want.sizes();
    return os.str();
  }
  if (got.scalar_type() != want.scalar_type()) {
    std::ostringstream os;
    os << "dtype " << got.scalar_type() << ", expected " << want.scalar_type();
    return os.str();
  }
  if (want.numel() == 0) return "";
  const at::Tensor g = got.to(at::kCPU);
  const at::Tensor w = want.to(at::kCPU);
  at::Tensor bad;
  if (at::isFloatingType(w.scalar_type())) {
    const at::Tensor gd = g.to(at::kDouble);
    const at::Tensor wd = w.to(at::kDouble);
    const at::Tensor close = (gd - wd).abs() <= eps * wd.abs() + eps;
    // Equal values (infinities of one sign included: inf - inf is NaN) and NaN where NaN.
    bad =
        at::logical_not(close.logical_or(gd == wd).logical_or(gd.isnan().logical_and(wd.isnan())));
  } else {
    bad = g.ne(w);
  }
  if (!bad.any().item<bool>()) return "";
  const at::Tensor where = bad.nonzero()[0];
  std::ostringstream os;
  os << "element [";
  for (int64_t d = 0; d < where.numel(); ++d) os << (d ? ", " : "") << where[d].item<int64_t>();
  at::Tensor gv = g;
  at::Tensor wv = w;
  for (int64_t d = 0; d < where.numel(); ++d) {
    gv = gv.select(0, where[d].item<int64_t>());
    wv = wv.select(0, where[d].item<int64_t>());
  }
  os << "]: " << gv.to(at::kDouble).item<double>() << ", the functional op gives "
     << wv.to(at::kDouble).item<double>() << " (" << bad.sum().item<int64_t>() << " of "
     << bad.numel() << " elements differ)";
  return os.str();
}

}  // namespace customop::gradcheck::detail
