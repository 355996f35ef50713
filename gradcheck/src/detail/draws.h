#pragma once
// Every random tensor the harness makes: drawn on the CPU from the harness's seeded CPU
// generator, then moved to the device (and dtype) of the tensor it is for. Internal to
// customop_gradcheck.
//
// NB: a CPU generator cannot draw on another device (at::bernoulli of a CUDA tensor with a CPU
// generator raised in every bfloat16/float16 case of the first GPU run), and a device's own
// generator would make the numbers depend on the device. Drawing on the CPU keeps a check's
// draws the same on every device for one seed. tests/python/test_harness_devices.py runs the
// harness on tensors of a simulated device and fails on any tensor made elsewhere.

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace customop::gradcheck::detail {

/// A CPU generator seeded with `seed`: the only kind the harness draws from.
at::Generator cpu_generator(uint64_t seed);

/// float64 values uniform in [low, high), `n` of them, on the CPU (for the harness's own
/// arithmetic: projections, coins). Throws c10::Error when `gen` is not a CPU generator.
at::Tensor uniform_cpu(int64_t n, at::Generator& gen, double low = 0.0, double high = 1.0);

/// Values uniform in [low, high), drawn in float64 on the CPU, shaped like `like` and moved to
/// its device and dtype (not requiring grad).
at::Tensor uniform_like(const at::Tensor& like, at::Generator& gen, double low, double high);

/// +1 or -1 with probability 1/2 each, shaped like `like`, on its device, of its dtype.
at::Tensor signs_like(const at::Tensor& like, at::Generator& gen);

/// `cpu` (a tensor the harness made on the CPU) on the device of `like`, of its dtype, not
/// requiring grad.
at::Tensor to_device_of(const at::Tensor& cpu, const at::Tensor& like);

}  // namespace customop::gradcheck::detail
