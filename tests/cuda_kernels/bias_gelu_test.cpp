// The launcher contract of cuda_kernels/bias_gelu.cu (bias_gelu_params.h): the guards and the
// error codes they return, and a launch that writes gelu(x + bias).
// NB: launch_bias_gelu_fwd checks the sizes and `approximate`, returns for an empty shape,
// then checks the pointers and the dtype, all before its first CUDA runtime call: the
// BiasGeluLauncher tests run without a GPU (their pointers are host addresses it never
// dereferences). The BiasGeluLauncherCuda tests launch kernels and skip without a device.

#include "cuda_kernels/bias_gelu_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

using customop::cuda_kernels::BiasGeluParams;
using customop::cuda_kernels::DType;
using customop::cuda_kernels::launch_bias_gelu_fwd;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
float g_input[1];
float g_bias[1];
float g_output[1];

BiasGeluParams nonempty_params() {
  return {.input = g_input, .bias = g_bias, .output = g_output, .n_rows = 2, .cols = 3};
}

TEST(BiasGeluLauncher, NegativeSizesAreInvalidValue) {
  for (auto [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{-1, 3}, {2, -1}, {-1, 0}, {0, -1}}) {
    BiasGeluParams p = nonempty_params();
    p.n_rows = rows;
    p.cols = cols;
    EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << rows << " x " << cols;
  }
}

TEST(BiasGeluLauncher, ApproximateOtherThanZeroOrOneIsInvalidValueEvenForAnEmptyShape) {
  for (int approximate : {-1, 2}) {
    BiasGeluParams p = nonempty_params();
    p.approximate = approximate;
    EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << approximate;
    p.n_rows = 0;
    EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << approximate << ", empty";
  }
}

TEST(BiasGeluLauncher, NullPointersAreInvalidValue) {
  BiasGeluParams p = nonempty_params();
  p.input = nullptr;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << "input";
  p = nonempty_params();
  p.bias = nullptr;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << "bias";
  p = nonempty_params();
  p.output = nullptr;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue) << "output";
}

TEST(BiasGeluLauncher, UnknownDtypeIsInvalidValue) {
  BiasGeluParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(BiasGeluLauncher, EmptyShapeSucceedsWithoutLaunchingEvenWithNullPointers) {
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {2, 0}, {0, 0}}) {
    const BiasGeluParams p{.n_rows = rows, .cols = cols};
    EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaSuccess) << rows << " x " << cols;
  }
}

class BiasGeluLauncherCuda : public CudaLaunchTest {};

double gelu(double s, int approximate) {
  if (approximate == 0) return 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * s * (1.0 + std::tanh(k * (s + 0.044715 * s * s * s)));
}

template <class T>
void expect_gelu_of_sum(DType dtype, std::int64_t rows, std::int64_t cols, int approximate,
                        double tol) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << cols << ", approximate " << approximate);
  const std::vector<T> x = test_values<T>(static_cast<std::size_t>(rows * cols));
  const std::vector<T> b = test_values<T>(static_cast<std::size_t>(cols), 2.0);
  std::vector<T> expected(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T s = static_cast<T>(x[i] + b[i % static_cast<std::size_t>(cols)]);  // rounded to T
    expected[i] = static_cast<T>(gelu(static_cast<double>(s), approximate));
  }
  DeviceBuffer<T> d_x(x), d_b(b), d_y(x.size(), T(-7));
  const BiasGeluParams p{.input = d_x.get(),
                         .bias = d_b.get(),
                         .output = d_y.get(),
                         .n_rows = rows,
                         .cols = cols,
                         .approximate = approximate,
                         .dtype = dtype};
  ASSERT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_y.to_host(), expected, tol));
}

TEST_F(BiasGeluLauncherCuda, LaunchSucceedsAndWritesGeluOfInputPlusBias) {
  // cols 8: 16-byte vector loads; 5: scalar.
  for (std::int64_t cols : {8, 5}) {
    for (int approximate : {0, 1}) {
      expect_gelu_of_sum<float>(DType::kFloat32, 3, cols, approximate, 1e-5);
      expect_gelu_of_sum<double>(DType::kFloat64, 3, cols, approximate, 1e-12);
    }
  }
}

TEST_F(BiasGeluLauncherCuda, RejectedOrEmptyLaunchWritesNothing) {
  DeviceBuffer<float> d_x(6, 1.0f), d_b(3, 1.0f), d_y(6, -7.0f);
  BiasGeluParams p{.input = d_x.get(),
                   .bias = d_b.get(),
                   .output = d_y.get(),
                   .n_rows = 2,
                   .cols = 3,
                   .dtype = kUnknownDType};
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.approximate = 2;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaErrorInvalidValue);
  p.approximate = 0;
  p.cols = 0;
  EXPECT_EQ(launch_bias_gelu_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(6, -7.0f));
}

}  // namespace
