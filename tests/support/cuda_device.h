#pragma once
/// \file
/// Helpers for the tests of the torch-free CUDA launchers (tests/cuda_kernels): whether a CUDA
/// device is present, a fixture that skips without one, and device buffers filled from and
/// read back to host vectors. Torch-free, as the launchers are.

#include "cuda_kernels/common.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace customop::testing {

/// A DType value no launcher knows (the enum's underlying int allows it): what a caller gets
/// from a corrupted or newer params struct.
inline constexpr auto kUnknownDType = static_cast<customop::cuda_kernels::DType>(99);

/// Throws std::runtime_error "<what>: <CUDA error string>" unless `err` is cudaSuccess, so a
/// failed allocation or copy fails the test that made it (gtest reports the exception).
inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

/// True when the CUDA runtime sees at least one device; false without a GPU or a driver.
inline bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // NB: clear the error, or the next runtime call returns it
    return false;
  }
  return count > 0;
}

/// Fixture of the tests that launch kernels: they skip when no CUDA device is present (the
/// test CMakeLists gives suites named *Cuda the ctest label `gpu`). After each test, the
/// runtime must hold no pending error (a launch a test did not expect to fail).
class CudaLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)";
  }
  void TearDown() override {
    if (IsSkipped()) return;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
};

/// `n` elements of T in device memory, freed on destruction.
/// Example:
///   DeviceBuffer<float> x(std::vector<float>{1, 2, 3});
///   launch(x.get(), ...);
///   std::vector<float> y = x.to_host();
template <class T>
class DeviceBuffer {
 public:
  /// A copy of `host` on the current device.
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()), "cudaMalloc");
    check_cuda(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  /// `n` copies of `value`.
  DeviceBuffer(std::size_t n, T value) : DeviceBuffer(std::vector<T>(n, value)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(data_); }

  T* get() const { return data_; }
  std::size_t size() const { return size_; }
  /// The contents, copied back after the work queued on the legacy default stream (which
  /// cudaMemcpy waits for).
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    check_cuda(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  T* data_ = nullptr;
  std::size_t size_;
};

/// `n` distinct, deterministic values in about [-1.3, 2.3] of type T, shifted by `phase`: test
/// inputs without a random number generator (no ties among the first 1000 for any phase).
template <class T>
std::vector<T> test_values(std::size_t n, double phase = 0.0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(i);
    v[i] = static_cast<T>(std::sin(0.7 * x + phase) + 0.001 * x - 0.3 * std::cos(1.3 * x));
  }
  return v;
}

/// |actual - expected| <= tol * (1 + |expected|) elementwise, same length; the first bad
/// element in the failure message.
template <class T>
::testing::AssertionResult all_close(const std::vector<T>& actual, const std::vector<T>& expected,
                                     double tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "length " << actual.size() << " != expected " << expected.size();
  }
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double e = static_cast<double>(expected[i]);
    const double err = a > e ? a - e : e - a;
    if (!(err <= tol * (1.0 + (e < 0 ? -e : e)))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", expected " << e << " (tol " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace customop::testing
