// The launcher contract of cuda_kernels/clamp_count.cu (clamp_count_params.h): the guards and
// the error codes they return, and a launch that clamps and ADDS the count to *count.
// NB: launch_clamp_count_fwd checks numel, returns for numel == 0, then checks the pointers
// and the dtype, all before its first CUDA runtime call: the ClampCountLauncher tests run
// without a GPU (their pointers are host addresses it never dereferences). The
// ClampCountLauncherCuda tests launch kernels and skip without a device.

#include "cuda_kernels/clamp_count_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using customop::cuda_kernels::ClampCountParams;
using customop::cuda_kernels::DType;
using customop::cuda_kernels::launch_clamp_count_fwd;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
float g_input[1];
float g_output[1];
unsigned long long g_count[1];

ClampCountParams nonempty_params() {
  return {
      .input = g_input, .output = g_output, .count = g_count, .numel = 4, .min = -0.5, .max = 0.7};
}

TEST(ClampCountLauncher, NegativeNumelIsInvalidValue) {
  ClampCountParams p = nonempty_params();
  p.numel = -1;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(ClampCountLauncher, NullPointersAreInvalidValue) {
  ClampCountParams p = nonempty_params();
  p.input = nullptr;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue) << "input";
  p = nonempty_params();
  p.output = nullptr;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue) << "output";
  p = nonempty_params();
  p.count = nullptr;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue) << "count";
}

TEST(ClampCountLauncher, UnknownDtypeIsInvalidValue) {
  ClampCountParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(ClampCountLauncher, ZeroNumelSucceedsWithoutLaunchingEvenWithNullPointers) {
  const ClampCountParams p{.numel = 0};
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaSuccess);
}

class ClampCountLauncherCuda : public CudaLaunchTest {};

template <class T>
void expect_clamped_and_counted(DType dtype, std::int64_t numel) {
  SCOPED_TRACE(::testing::Message() << "numel " << numel);
  const double lo = -0.5;
  const double hi = 0.7;
  const std::vector<T> x = test_values<T>(static_cast<std::size_t>(numel));
  std::vector<T> expected(x.size());
  unsigned long long clamped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T tlo = static_cast<T>(lo);  // the bounds are rounded to dtype first
    const T thi = static_cast<T>(hi);
    expected[i] = std::min(std::max(x[i], tlo), thi);
    clamped += (x[i] < tlo || x[i] > thi) ? 1 : 0;
  }
  ASSERT_GT(clamped, 0u);
  DeviceBuffer<T> d_x(x), d_y(x.size(), T(-7));
  DeviceBuffer<unsigned long long> d_count(1, 5);  // the kernel adds; it does not reset
  const ClampCountParams p{.input = d_x.get(),
                           .output = d_y.get(),
                           .count = d_count.get(),
                           .numel = numel,
                           .min = lo,
                           .max = hi,
                           .dtype = dtype};
  ASSERT_EQ(launch_clamp_count_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_y.to_host(), expected, 0.0));
  EXPECT_EQ(d_count.to_host()[0], 5 + clamped);
}

TEST_F(ClampCountLauncherCuda, LaunchSucceedsClampsAndAddsTheCountToCount) {
  for (std::int64_t numel : {7, 64, 1001}) {
    expect_clamped_and_counted<float>(DType::kFloat32, numel);
    expect_clamped_and_counted<double>(DType::kFloat64, numel);
  }
}

TEST_F(ClampCountLauncherCuda, RejectedOrEmptyLaunchWritesNothingAndLeavesTheCount) {
  DeviceBuffer<float> d_x(4, 2.0f), d_y(4, -7.0f);
  DeviceBuffer<unsigned long long> d_count(1, 5);
  ClampCountParams p{.input = d_x.get(),
                     .output = d_y.get(),
                     .count = d_count.get(),
                     .numel = 4,
                     .min = -0.5,
                     .max = 0.7,
                     .dtype = kUnknownDType};
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.numel = 0;
  EXPECT_EQ(launch_clamp_count_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(4, -7.0f));
  EXPECT_EQ(d_count.to_host()[0], 5u);
}

}  // namespace
