#pragma once
// Building blocks of the ops' sample inputs for the gradcheck harness.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace customop::ops::detail {

/// Standard-normal values drawn from a CPU generator seeded with `seed` (so a sample is the
/// same on every device and run), then moved to `device` as `dtype`. Contiguous, no grad.
at::Tensor sample_randn(at::IntArrayRef sizes, uint64_t seed, c10::Device device,
                        c10::ScalarType dtype);

}  // namespace customop::ops::detail
