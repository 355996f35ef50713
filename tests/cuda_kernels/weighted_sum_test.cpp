// The launcher contract of cuda_kernels/weighted_sum.cu (weighted_sum_params.h): the guards
// and the error codes they return, a launch that writes sum_k w_k * x_k, and K == 0 writing
// zeros without an input table.
// NB: launch_weighted_sum_fwd checks the sizes, returns for numel == 0, then checks the
// pointers and the dtype, all before its first CUDA runtime call: the WeightedSumLauncher
// tests run without a GPU (their pointers are host addresses it never dereferences). The
// WeightedSumLauncherCuda tests launch kernels and skip without a device.

#include "cuda_kernels/weighted_sum_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace {

using customop::cuda_kernels::DType;
using customop::cuda_kernels::kWeightedSumMaxHostTable;
using customop::cuda_kernels::launch_weighted_sum_fwd;
using customop::cuda_kernels::WeightedSumParams;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
const void* g_inputs[2];
double g_weights[2];
float g_output[1];

WeightedSumParams nonempty_params() {
  return {.inputs = g_inputs, .weights = g_weights, .output = g_output, .k = 2, .numel = 4};
}

TEST(WeightedSumLauncher, NegativeSizesAreInvalidValue) {
  for (auto [k, numel] : {std::pair<std::int64_t, std::int64_t>{-1, 4}, {2, -1}, {-1, 0}}) {
    WeightedSumParams p = nonempty_params();
    p.k = k;
    p.numel = numel;
    EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << k << ", " << numel;
  }
}

TEST(WeightedSumLauncher, NullPointersAreInvalidValue) {
  WeightedSumParams p = nonempty_params();
  p.inputs = nullptr;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << "inputs";
  p = nonempty_params();
  p.weights = nullptr;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << "weights";
  p = nonempty_params();
  p.output = nullptr;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << "output";
  p = nonempty_params();
  p.k = 0;
  p.output = nullptr;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << "output, k = 0";
}

TEST(WeightedSumLauncher, HostTableOfMoreThanItsMaximumIsInvalidValue) {
  std::vector<const void*> ptrs(kWeightedSumMaxHostTable + 1, g_output);
  std::vector<double> ws(ptrs.size(), 1.0);
  WeightedSumParams p = nonempty_params();
  p.inputs = ptrs.data();
  p.weights = ws.data();
  p.table_on_host = true;
  p.k = kWeightedSumMaxHostTable + 1;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(WeightedSumLauncher, UnknownDtypeIsInvalidValue) {
  WeightedSumParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue);
  p.k = 0;  // no input table to check: the dtype is still checked
  p.inputs = nullptr;
  p.weights = nullptr;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue) << "k = 0";
}

TEST(WeightedSumLauncher, ZeroNumelSucceedsWithoutLaunchingEvenWithNullPointers) {
  for (std::int64_t k : {0, 3}) {
    const WeightedSumParams p{.k = k, .numel = 0};
    EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaSuccess) << "k = " << k;
  }
}

class WeightedSumLauncherCuda : public CudaLaunchTest {};

template <class T>
void expect_weighted_sum(DType dtype, std::int64_t numel, double tol, bool table_on_host) {
  SCOPED_TRACE(::testing::Message() << "numel " << numel << (table_on_host ? ", host table" : ""));
  const auto n = static_cast<std::size_t>(numel);
  const std::vector<double> w = {0.5, -1.25, 2.0};
  std::vector<std::vector<T>> xs;
  for (std::size_t k = 0; k < w.size(); ++k) xs.push_back(test_values<T>(n, 1.0 + double(k)));
  std::vector<T> expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    double acc = 0;
    for (std::size_t k = 0; k < w.size(); ++k) acc += w[k] * static_cast<double>(xs[k][i]);
    expected[i] = static_cast<T>(acc);
  }
  DeviceBuffer<T> d_x0(xs[0]), d_x1(xs[1]), d_x2(xs[2]), d_y(n, T(-7));
  const std::vector<const void*> table = {d_x0.get(), d_x1.get(), d_x2.get()};
  DeviceBuffer<const void*> d_table(table);
  DeviceBuffer<double> d_w(w);
  // The host table (the kernel's parameters) or the device table: the same sums.
  const WeightedSumParams p{.inputs = table_on_host ? table.data() : d_table.get(),
                            .weights = table_on_host ? w.data() : d_w.get(),
                            .table_on_host = table_on_host,
                            .output = d_y.get(),
                            .k = 3,
                            .numel = numel,
                            .dtype = dtype};
  ASSERT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_y.to_host(), expected, tol));
}

TEST_F(WeightedSumLauncherCuda, LaunchSucceedsAndWritesTheWeightedSum) {
  for (bool table_on_host : {false, true}) {
    for (std::int64_t numel : {1, 7, 64, 1001}) {
      expect_weighted_sum<float>(DType::kFloat32, numel, 1e-5, table_on_host);
      expect_weighted_sum<double>(DType::kFloat64, numel, 1e-12, table_on_host);
    }
  }
}

TEST_F(WeightedSumLauncherCuda, NoInputsWriteZerosWithoutAnInputTable) {
  DeviceBuffer<float> d_y(5, -7.0f);
  const WeightedSumParams p{.output = d_y.get(), .k = 0, .numel = 5, .dtype = DType::kFloat32};
  ASSERT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(5, 0.0f));
}

TEST_F(WeightedSumLauncherCuda, RejectedOrEmptyLaunchWritesNothing) {
  DeviceBuffer<float> d_y(4, -7.0f);
  WeightedSumParams p{.output = d_y.get(), .k = 0, .numel = 4, .dtype = kUnknownDType};
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.numel = 0;
  EXPECT_EQ(launch_weighted_sum_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(4, -7.0f));
}

}  // namespace
