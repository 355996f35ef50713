#include "draws.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/full.h>
#include <ATen/ops/rand.h>
#include <c10/util/Exception.h>

namespace customop::gradcheck::detail {

namespace {

void require_cpu(const at::Generator& gen) {
  TORCH_CHECK(gen.defined() && gen.device().is_cpu(),
              "customop gradcheck: the harness draws on the CPU and moves the result, but got a ",
              gen.defined() ? gen.device().str() : std::string("undefined"), " generator");
}

const at::TensorOptions kCpu64 = at::TensorOptions().dtype(at::kDouble).device(at::kCPU);

}  // namespace

at::Generator cpu_generator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

at::Tensor uniform_cpu(int64_t n, at::Generator& gen, double low, double high) {
  require_cpu(gen);
  at::Tensor u = at::rand({n}, gen, kCpu64);
  return (low == 0.0 && high == 1.0) ? u : u * (high - low) + low;
}

at::Tensor uniform_like(const at::Tensor& like, at::Generator& gen, double low, double high) {
  return to_device_of(uniform_cpu(like.numel(), gen, low, high).view(like.sizes()), like);
}

at::Tensor signs_like(const at::Tensor& like, at::Generator& gen) {
  require_cpu(gen);
  const at::Tensor coin = at::bernoulli(at::full(like.sizes(), 0.5, kCpu64), gen);
  return to_device_of(coin * 2 - 1, like);
}

at::Tensor to_device_of(const at::Tensor& cpu, const at::Tensor& like) {
  return cpu.to(like.options().requires_grad(false));
}

}  // namespace customop::gradcheck::detail
