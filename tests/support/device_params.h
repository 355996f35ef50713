#pragma once
/// \file
/// Device x dtype parameters for value-parameterised suites. Instantiate a suite twice:
///   INSTANTIATE_TEST_SUITE_P(Cpu, MySuite, testing::ValuesIn(cpu_params()), param_name);
///   INSTANTIATE_TEST_SUITE_P(Cuda, MySuite, testing::ValuesIn(cuda_params()), param_name);
/// and derive the fixture from DeviceTest: CUDA cases skip when no GPU is present. The test
/// CMakeLists gives the tests named Cuda/* the ctest label `gpu`.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <ostream>
#include <string>
#include <vector>

namespace customop::testing {

struct DeviceDtype {
  c10::DeviceType device;
  c10::ScalarType dtype;

  at::TensorOptions options() const { return at::TensorOptions().device(device).dtype(dtype); }
  bool is_cuda() const { return device == c10::DeviceType::CUDA; }
  /// float16/bfloat16 (accumulate in float32; compare with looser tolerances).
  bool reduced() const { return dtype == at::kHalf || dtype == at::kBFloat16; }
};

/// gtest prints a parameter with this (instead of its bytes).
inline void PrintTo(const DeviceDtype& p, std::ostream* os) {
  *os << c10::DeviceTypeName(p.device, /*lower_case=*/true) << " "
      << c10::getDtypeNames(p.dtype).first;
}

inline std::vector<DeviceDtype> cpu_params() {
  return {{c10::DeviceType::CPU, at::kFloat},
          {c10::DeviceType::CPU, at::kDouble},
          {c10::DeviceType::CPU, at::kHalf},
          {c10::DeviceType::CPU, at::kBFloat16}};
}

inline std::vector<DeviceDtype> cuda_params() {
  return {{c10::DeviceType::CUDA, at::kFloat},
          {c10::DeviceType::CUDA, at::kDouble},
          {c10::DeviceType::CUDA, at::kHalf},
          {c10::DeviceType::CUDA, at::kBFloat16}};
}

inline std::string param_name(const ::testing::TestParamInfo<DeviceDtype>& info) {
  return std::string(info.param.device == c10::DeviceType::CUDA ? "cuda_" : "cpu_") +
         std::string(c10::getDtypeNames(info.param.dtype).first);
}

class DeviceTest : public ::testing::TestWithParam<DeviceDtype> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && !torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device";
    }
  }
  const DeviceDtype& p() const { return GetParam(); }
};

}  // namespace customop::testing
