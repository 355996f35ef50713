// The launcher contract of cuda_kernels/max_along.cu (max_along_params.h): the guards and the
// error codes they return, and a launch that writes the max and its index.
// NB: launch_max_along_fwd checks the sizes, returns when there is no output
// (outer * inner == 0), refuses an empty reduction, then checks the pointers and the dtype,
// all before its first CUDA runtime call: the MaxAlongLauncher tests run without a GPU (their
// pointers are host addresses it never dereferences). The MaxAlongLauncherCuda tests launch
// kernels and skip without a device.

#include "cuda_kernels/max_along_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

using customop::cuda_kernels::DType;
using customop::cuda_kernels::launch_max_along_fwd;
using customop::cuda_kernels::MaxAlongParams;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
float g_input[1];
float g_values[1];
std::int64_t g_indices[1];

MaxAlongParams nonempty_params() {
  return {.input = g_input,
          .values = g_values,
          .indices = g_indices,
          .outer = 2,
          .size = 3,
          .inner = 4};
}

TEST(MaxAlongLauncher, NegativeSizesAreInvalidValue) {
  for (const std::array<std::int64_t, 3>& s :
       {std::array<std::int64_t, 3>{-1, 3, 4}, {2, -1, 4}, {2, 3, -1}, {0, -1, 0}}) {
    MaxAlongParams p = nonempty_params();
    p.outer = s[0];
    p.size = s[1];
    p.inner = s[2];
    EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue)
        << s[0] << " x " << s[1] << " x " << s[2];
  }
}

TEST(MaxAlongLauncher, EmptyReductionWithOutputsIsInvalidValue) {
  MaxAlongParams p = nonempty_params();
  p.size = 0;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(MaxAlongLauncher, NullPointersAreInvalidValue) {
  MaxAlongParams p = nonempty_params();
  p.input = nullptr;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue) << "input";
  p = nonempty_params();
  p.values = nullptr;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue) << "values";
  p = nonempty_params();
  p.indices = nullptr;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue) << "indices";
}

TEST(MaxAlongLauncher, UnknownDtypeIsInvalidValue) {
  MaxAlongParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(MaxAlongLauncher, NoOutputSucceedsWithoutLaunchingEvenWithNullPointersOrAnEmptyReduction) {
  for (const std::array<std::int64_t, 3>& s :
       {std::array<std::int64_t, 3>{0, 3, 4}, {2, 3, 0}, {0, 0, 4}, {2, 0, 0}}) {
    const MaxAlongParams p{.outer = s[0], .size = s[1], .inner = s[2]};
    EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaSuccess)
        << s[0] << " x " << s[1] << " x " << s[2];
  }
}

class MaxAlongLauncherCuda : public CudaLaunchTest {};

template <class T>
void expect_max_and_argmax(DType dtype, std::int64_t outer, std::int64_t size, std::int64_t inner) {
  SCOPED_TRACE(::testing::Message() << outer << " x " << size << " x " << inner);
  const std::vector<T> x = test_values<T>(static_cast<std::size_t>(outer * size * inner));
  std::vector<T> values(static_cast<std::size_t>(outer * inner));
  std::vector<std::int64_t> indices(values.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      std::int64_t best = 0;
      for (std::int64_t s = 1; s < size; ++s) {
        if (x[static_cast<std::size_t>((o * size + s) * inner + j)] >
            x[static_cast<std::size_t>((o * size + best) * inner + j)]) {
          best = s;
        }
      }
      const auto out = static_cast<std::size_t>(o * inner + j);
      values[out] = x[static_cast<std::size_t>((o * size + best) * inner + j)];
      indices[out] = best;
    }
  }
  DeviceBuffer<T> d_x(x), d_values(values.size(), T(-7));
  DeviceBuffer<std::int64_t> d_indices(indices.size(), -1);
  const MaxAlongParams p{.input = d_x.get(),
                         .values = d_values.get(),
                         .indices = d_indices.get(),
                         .outer = outer,
                         .size = size,
                         .inner = inner,
                         .dtype = dtype};
  ASSERT_EQ(launch_max_along_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_values.to_host(), values, 0.0));
  EXPECT_EQ(d_indices.to_host(), indices);
}

TEST_F(MaxAlongLauncherCuda, LaunchSucceedsAndWritesTheMaxAndItsIndex) {
  // inner 1: a warp per row (size 8: 16-byte vector loads; 7: scalar; 1100: a block per row);
  // inner 5: the split strided kernel.
  for (auto [size, inner] :
       {std::pair<std::int64_t, std::int64_t>{8, 1}, {7, 1}, {1100, 1}, {7, 5}}) {
    expect_max_and_argmax<float>(DType::kFloat32, 3, size, inner);
    expect_max_and_argmax<double>(DType::kFloat64, 3, size, inner);
  }
}

TEST_F(MaxAlongLauncherCuda, RejectedOrEmptyLaunchWritesNothing) {
  DeviceBuffer<float> d_x(6, 1.0f), d_values(2, -7.0f);
  DeviceBuffer<std::int64_t> d_indices(2, -1);
  MaxAlongParams p{.input = d_x.get(),
                   .values = d_values.get(),
                   .indices = d_indices.get(),
                   .outer = 2,
                   .size = 3,
                   .inner = 1,
                   .dtype = kUnknownDType};
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.outer = 0;
  EXPECT_EQ(launch_max_along_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_values.to_host(), std::vector<float>(2, -7.0f));
  EXPECT_EQ(d_indices.to_host(), std::vector<std::int64_t>(2, -1));
}

}  // namespace
