// The launcher contract of cuda_kernels/masked_softmax.cu (masked_softmax_params.h): the
// guards and the error codes they return, and a launch that writes the masked softmax (a null
// mask keeps everything).
// NB: launch_masked_softmax_fwd checks the sizes, returns for an empty shape, then checks the
// input and output pointers and the dtype, all before its first CUDA runtime call: the
// MaskedSoftmaxLauncher tests run without a GPU (their pointers are host addresses it never
// dereferences). The MaskedSoftmaxLauncherCuda tests launch kernels and skip without a device.

#include "cuda_kernels/masked_softmax_params.h"
#include "support/cuda_device.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

using customop::cuda_kernels::DType;
using customop::cuda_kernels::launch_masked_softmax_fwd;
using customop::cuda_kernels::MaskedSoftmaxParams;
using customop::testing::all_close;
using customop::testing::CudaLaunchTest;
using customop::testing::DeviceBuffer;
using customop::testing::kUnknownDType;
using customop::testing::test_values;

// Non-null stand-ins for device pointers, for guards that return before using them.
float g_input[1];
float g_output[1];

MaskedSoftmaxParams nonempty_params() {
  return {.input = g_input, .output = g_output, .outer = 2, .size = 3, .inner = 4};
}

TEST(MaskedSoftmaxLauncher, NegativeSizesAreInvalidValue) {
  for (const std::array<std::int64_t, 3>& s :
       {std::array<std::int64_t, 3>{-1, 3, 4}, {2, -1, 4}, {2, 3, -1}, {0, -1, 0}}) {
    MaskedSoftmaxParams p = nonempty_params();
    p.outer = s[0];
    p.size = s[1];
    p.inner = s[2];
    EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaErrorInvalidValue)
        << s[0] << " x " << s[1] << " x " << s[2];
  }
}

TEST(MaskedSoftmaxLauncher, NullInputOrOutputIsInvalidValue) {
  MaskedSoftmaxParams p = nonempty_params();
  p.input = nullptr;
  EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaErrorInvalidValue) << "input";
  p = nonempty_params();
  p.output = nullptr;
  EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaErrorInvalidValue) << "output";
}

TEST(MaskedSoftmaxLauncher, UnknownDtypeIsInvalidValue) {
  MaskedSoftmaxParams p = nonempty_params();
  p.dtype = kUnknownDType;
  EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaErrorInvalidValue);
}

TEST(MaskedSoftmaxLauncher, EmptyShapeSucceedsWithoutLaunchingEvenWithNullPointers) {
  for (const std::array<std::int64_t, 3>& s :
       {std::array<std::int64_t, 3>{0, 3, 4}, {2, 0, 4}, {2, 3, 0}}) {
    const MaskedSoftmaxParams p{.outer = s[0], .size = s[1], .inner = s[2]};
    EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaSuccess)
        << s[0] << " x " << s[1] << " x " << s[2];
  }
}

class MaskedSoftmaxLauncherCuda : public CudaLaunchTest {};

/// Softmax over the kept elements of each [o, :, j] slice, 0 where masked (an empty `mask`
/// keeps everything); a fully masked slice is all zeros.
template <class T>
std::vector<T> reference(const std::vector<T>& x, const std::vector<std::uint8_t>& mask,
                         std::int64_t outer, std::int64_t size, std::int64_t inner) {
  std::vector<T> y(x.size(), T(0));
  auto at = [&](std::int64_t o, std::int64_t s, std::int64_t j) {
    return static_cast<std::size_t>((o * size + s) * inner + j);
  };
  auto kept = [&](std::size_t i) { return mask.empty() || mask[i] != 0; };
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      double m = -INFINITY;
      for (std::int64_t s = 0; s < size; ++s) {
        if (kept(at(o, s, j))) m = std::fmax(m, static_cast<double>(x[at(o, s, j)]));
      }
      double sum = 0;
      for (std::int64_t s = 0; s < size; ++s) {
        if (kept(at(o, s, j))) sum += std::exp(static_cast<double>(x[at(o, s, j)]) - m);
      }
      for (std::int64_t s = 0; s < size; ++s) {
        const std::size_t i = at(o, s, j);
        if (kept(i)) y[i] = static_cast<T>(std::exp(static_cast<double>(x[i]) - m) / sum);
      }
    }
  }
  return y;
}

template <class T>
void expect_masked_softmax(DType dtype, std::int64_t outer, std::int64_t size, std::int64_t inner,
                           bool with_mask, double tol) {
  SCOPED_TRACE(::testing::Message() << outer << " x " << size << " x " << inner
                                    << (with_mask ? ", masked" : ", no mask"));
  const auto n = static_cast<std::size_t>(outer * size * inner);
  const std::vector<T> x = test_values<T>(n);
  std::vector<std::uint8_t> mask;
  if (with_mask) {
    mask.resize(n);
    for (std::size_t i = 0; i < n; ++i) mask[i] = (i % 3 != 1) ? 1 : 0;
    // Slice [0, :, 0] fully masked.
    for (std::int64_t s = 0; s < size; ++s) mask[static_cast<std::size_t>(s * inner)] = 0;
  }
  const std::vector<T> expected = reference(x, mask, outer, size, inner);
  DeviceBuffer<T> d_x(x), d_y(n, T(-7));
  DeviceBuffer<std::uint8_t> d_mask(with_mask ? mask : std::vector<std::uint8_t>(1, 0));
  const MaskedSoftmaxParams p{.input = d_x.get(),
                              .mask = with_mask ? d_mask.get() : nullptr,
                              .output = d_y.get(),
                              .outer = outer,
                              .size = size,
                              .inner = inner,
                              .dtype = dtype};
  ASSERT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaSuccess);
  EXPECT_TRUE(all_close(d_y.to_host(), expected, tol));
}

TEST_F(MaskedSoftmaxLauncherCuda, LaunchSucceedsAndWritesTheMaskedSoftmax) {
  // inner 1: a warp per slice (size 8: 16-byte vector loads, cached in registers; 7: scalar;
  // 1024: 8 cached vectors a lane for float, the three-pass kernel for double), a block per
  // slice (1100: cached; 40000: too long to cache, three passes); inner 5: the split strided
  // kernel.
  for (auto [size, inner] : {std::pair<std::int64_t, std::int64_t>{8, 1},
                             {7, 1},
                             {1024, 1},
                             {1100, 1},
                             {40000, 1},
                             {7, 5}}) {
    for (bool with_mask : {true, false}) {
      expect_masked_softmax<float>(DType::kFloat32, 3, size, inner, with_mask, 1e-5);
      expect_masked_softmax<double>(DType::kFloat64, 3, size, inner, with_mask, 1e-12);
    }
  }
}

TEST_F(MaskedSoftmaxLauncherCuda, RejectedOrEmptyLaunchWritesNothing) {
  DeviceBuffer<float> d_x(6, 1.0f), d_y(6, -7.0f);
  MaskedSoftmaxParams p{.input = d_x.get(),
                        .output = d_y.get(),
                        .outer = 2,
                        .size = 3,
                        .inner = 1,
                        .dtype = kUnknownDType};
  EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaErrorInvalidValue);
  p.dtype = DType::kFloat32;
  p.size = 0;
  EXPECT_EQ(launch_masked_softmax_fwd(p, nullptr), cudaSuccess);
  EXPECT_EQ(d_y.to_host(), std::vector<float>(6, -7.0f));
}

}  // namespace
