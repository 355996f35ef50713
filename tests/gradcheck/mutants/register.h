#pragma once
// Registration of the corpus ops; each function registers its ops once.

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace customop_mutants::detail {

void register_elementwise();
void register_structured();
void register_schema_bugs();
void register_transform_bugs();

/// Sample tensors: the device and dtype the harness asks for, values from the global RNG
/// (the harness seeds it), kept away from 0 where `away_from_zero`.
inline at::Tensor sample(std::vector<int64_t> shape, c10::Device device, c10::ScalarType dtype,
                         bool away_from_zero = false) {
  at::Tensor t = at::randn(shape, at::TensorOptions().dtype(at::kDouble));
  if (away_from_zero) t = t.sign() * (t.abs() * 0.5 + 0.5);
  return t.to(at::TensorOptions().dtype(dtype).device(device));
}

}  // namespace customop_mutants::detail
