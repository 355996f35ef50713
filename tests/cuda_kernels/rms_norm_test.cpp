// The launcher contract of cuda_kernels/rms_norm.cu (rms_norm_params.h): the guards and the
// error codes they return, and a launch that writes the normalised rows.
// NB: launch_rms_norm_fwd checks the sizes, returns for an empty shape, then checks the
// pointers and the dtype, all before its first CUDA runtime call: the RmsNormLauncher tests
// run without a GPU (their pointers are host addresses it never dereferences). The
// RmsNormLauncherCuda tests launch kernels and skip without a device.

#include "cuda_kernels/rms_norm_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

using customop::cuda_kernels::DType;
using customop::cuda_kernels::launch_rms_norm_fwd;
using customop::cuda_kernels::RmsNormParams;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
float g_input[1];
float g_weight[1];
float g_output[1];

RmsNormParams nonempty_params() {
  return {.input = g_input, .weight = g_weight, .output = g_output, .rows = 2, .cols = 3};
}

TEST(RmsNormLauncher, NegativeSizesAreInvalidValue) {
  for (auto [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{-1, 3}, {2, -1}, {-1, 0}, {0, -1}}) {
    RmsNormParams p = nonempty_params();
    p.rows = rows;
    p.cols = cols;
    EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue) << rows << " x " << cols;
  }
}

TEST(RmsNormLauncher, NullPointersAreInvalidValue) {
  RmsNormParams p = nonempty_params();
  p.input = nullptr;
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue) << "input";
  p = nonempty_params();
  p.weight = nullptr;
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue) << "weight";
  p = nonempty_params();
  p.output = nullptr;
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue) << "output";
}

TEST(RmsNormLauncher, UnknownDtypeIsInvalidValue) {
  RmsNormParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(RmsNormLauncher, EmptyShapeSucceedsWithoutLaunchingEvenWithNullPointers) {
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {2, 0}, {0, 0}}) {
    const RmsNormParams p{.rows = rows, .cols = cols};
    EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaSuccess) << rows << " x " << cols;
  }
}

class RmsNormLauncherCuda : public CudaLaunchTest {};

template <class T>
void expect_rows_normalised(DType dtype, std::int64_t rows, std::int64_t cols, double tol) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
  const std::vector<T> x = test_values<T>(static_cast<std::size_t>(rows * cols));
  const std::vector<T> w = test_values<T>(static_cast<std::size_t>(cols), 1.0);
  const double eps = 1e-5;
  std::vector<T> expected(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = static_cast<double>(x[static_cast<std::size_t>(r * cols + c)]);
      sum_sq += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(cols) + eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      expected[i] = static_cast<T>(static_cast<double>(x[i]) * inv_rms *
                                   static_cast<double>(w[static_cast<std::size_t>(c)]));
    }
  }
  DeviceBuffer<T> d_x(x), d_w(w), d_y(x.size(), T(-7));
  const RmsNormParams p{.input = d_x.get(),
                        .weight = d_w.get(),
                        .output = d_y.get(),
                        .rows = rows,
                        .cols = cols,
                        .eps = eps,
                        .dtype = dtype};
  ASSERT_EQ(launch_rms_norm_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_y.to_host(), expected, tol));
}

TEST_F(RmsNormLauncherCuda, LaunchSucceedsAndWritesTheNormalisedRows) {
  // cols 8: 16-byte vector loads, the row cached in registers (one vector a lane); 5: scalar;
  // 1024: a warp per row, 8 cached vectors a lane (float) or the two-pass kernel (double);
  // 1100, 4096: a block per row, cached; 40000: a block per row, too long to cache.
  for (std::int64_t cols : {8, 5, 1024, 1100, 4096, 40000}) {
    expect_rows_normalised<float>(DType::kFloat32, 3, cols, 1e-5);
    expect_rows_normalised<double>(DType::kFloat64, 3, cols, 1e-12);
  }
}

TEST_F(RmsNormLauncherCuda, RejectedOrEmptyLaunchWritesNothing) {
  DeviceBuffer<float> d_x(6, 1.0f), d_w(3, 1.0f), d_y(6, -7.0f);
  RmsNormParams p{.input = d_x.get(),
                  .weight = d_w.get(),
                  .output = d_y.get(),
                  .rows = 2,
                  .cols = 3,
                  .dtype = kUnknownDType};
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.rows = 0;
  EXPECT_EQ(launch_rms_norm_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(6, -7.0f));
}

}  // namespace
