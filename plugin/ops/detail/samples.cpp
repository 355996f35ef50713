#include "detail/samples.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>

namespace customop::ops::detail {

at::Tensor sample_randn(at::IntArrayRef sizes, uint64_t seed, c10::Device device,
                        c10::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(sizes, gen, at::TensorOptions().dtype(at::kDouble))
      .to(at::TensorOptions().device(device).dtype(dtype));
}

}  // namespace customop::ops::detail
