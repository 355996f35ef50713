// The built-in ops that write their arguments: customop::fused_add_rms_norm_ (input and
// residual) and customop::paged_kv_write (the two caches). Results against an ATen composite,
// non-contiguous written tensors, the version bump, and bad input: every refused call leaves
// every argument unchanged.

#include <customop/ops/fused_add_rms_norm.h>
#include <customop/ops/paged_kv_write.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/tensor_assertions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using customop::ops::FusedAddRmsNormArgs;
using customop::ops::PagedKvWriteArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::tensors_close;
using customop::testing::tensors_equal;
using customop::testing::tolerance_for;
using ::testing::AllOf;
using ::testing::HasSubstr;

void fused_add_rms_norm(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w,
                        double eps = 1e-6) {
  customop::ops::fused_add_rms_norm_op()(FusedAddRmsNormArgs{x, r, w, eps});
}

void paged_kv_write(const at::Tensor& k, const at::Tensor& v, const at::Tensor& kc,
                    const at::Tensor& vc, const at::Tensor& slots) {
  customop::ops::paged_kv_write_op()(PagedKvWriteArgs{k, v, kc, vc, slots});
}

class FusedAddRmsNormDevice : public DeviceTest {};

// The stated semantics with ATen ops: residual += input (rounded to the dtype), then input =
// rms_norm(residual) * weight computed in float64 from the rounded residual.
TEST_P(FusedAddRmsNormDevice, WritesResidualSumAndNormalizedInput) {
  torch::manual_seed(3);
  for (int64_t d : {1, 7, 8, 33, 256, 1025}) {
    for (std::vector<int64_t> lead : {std::vector<int64_t>{}, {5}, {2, 3}}) {
      auto shape = lead;
      shape.push_back(d);
      SCOPED_TRACE("shape " + c10::str(at::IntArrayRef(shape)));
      const auto x = at::randn(shape, p().options());
      const auto r = at::randn(shape, p().options());
      const auto w = at::randn({d}, p().options());
      const auto expected_r = (r + x).to(p().dtype);
      const auto s = expected_r.to(at::kDouble);
      const auto expected_x =
          s * at::rsqrt(s.square().mean(-1, /*keepdim=*/true) + 1e-6) * w.to(at::kDouble);
      fused_add_rms_norm(x, r, w);
      EXPECT_TRUE(tensors_equal(r, expected_r));
      EXPECT_TRUE(tensors_close(x, expected_x, tolerance_for(p().dtype)));
    }
  }
}

TEST_P(FusedAddRmsNormDevice, NonContiguousWrittenTensorsAreWrittenInPlace) {
  const auto x_base = at::randn({6, 8}, p().options());
  const auto r_base = at::randn({8, 6}, p().options());
  const auto x = x_base.slice(0, 0, 6, 2);   // rows 0, 2, 4: strided
  const auto r = r_base.t().slice(0, 0, 3);  // transposed [3, 8]
  const auto w = at::randn({8}, p().options());
  const auto xc = x.clone();
  const auto rc = r.clone();
  fused_add_rms_norm(xc, rc, w);
  const auto untouched = x_base.slice(0, 1, 6, 2).clone();
  const auto vx = x._version();
  fused_add_rms_norm(x, r, w);
  EXPECT_TRUE(tensors_equal(x, xc));
  EXPECT_TRUE(tensors_equal(r, rc));
  EXPECT_TRUE(tensors_equal(x_base.slice(0, 1, 6, 2), untouched));  // rows between: unchanged
  EXPECT_GT(x._version(), vx);
}

TEST_P(FusedAddRmsNormDevice, BadInputIsRefusedAndWritesNothing) {
  const auto x = at::randn({4, 8}, p().options());
  const auto r = at::randn({4, 8}, p().options());
  const auto w = at::randn({8}, p().options());
  const auto x0 = x.clone();
  const auto r0 = r.clone();
  EXPECT_THAT(error_message([&] { fused_add_rms_norm(x, r, at::randn({7}, p().options())); }),
              AllOf(HasSubstr("fused_add_rms_norm_: weight must have shape [D] = [8]")));
  EXPECT_THAT(error_message([&] { fused_add_rms_norm(x, r.slice(0, 0, 2), w); }),
              HasSubstr("residual must have input's shape [4, 8]"));
  EXPECT_THAT(error_message([&] { fused_add_rms_norm(x, x, w); }),
              AllOf(HasSubstr("argument 'input'"), HasSubstr("the same tensor")));
  EXPECT_THAT(error_message([&] { fused_add_rms_norm(x, r, w, -1.0); }),
              HasSubstr("eps must be >= 0"));
  EXPECT_THAT(error_message([&] {
                fused_add_rms_norm(x, at::randn({1, 8}, p().options()).expand({4, 8}), w);
              }),
              AllOf(HasSubstr("argument 'residual'"), HasSubstr("share one memory location")));
  const auto xr = x.clone().requires_grad_();
  EXPECT_THAT(error_message([&] { fused_add_rms_norm(xr, r, w); }),
              AllOf(HasSubstr("argument 'input'"), HasSubstr("requires grad")));
  EXPECT_TRUE(tensors_equal(x, x0));
  EXPECT_TRUE(tensors_equal(r, r0));
  EXPECT_TRUE(tensors_equal(xr.detach(), x0));
}

INSTANTIATE_TEST_SUITE_P(Cpu, FusedAddRmsNormDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, FusedAddRmsNormDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

class PagedKvWriteDevice : public DeviceTest {};

TEST_P(PagedKvWriteDevice, WritesEachTokenIntoItsSlotAndNothingElse) {
  const int64_t blocks = 4, block_size = 3, heads = 2, head_size = 5;
  const auto kc = at::randn({blocks, block_size, heads, head_size}, p().options());
  const auto vc = at::randn({blocks, block_size, heads, head_size}, p().options());
  const auto kc0 = kc.clone();
  const auto vc0 = vc.clone();
  const auto k = at::randn({4, heads, head_size}, p().options());
  const auto v = at::randn({heads, 4, head_size}, p().options()).transpose(0, 1);  // strided
  const auto slots = at::tensor({7, -1, 0, 11}, at::TensorOptions(p().device).dtype(at::kLong));
  paged_kv_write(k, v, kc, vc, slots);
  auto expect_k = kc0.clone();
  auto expect_v = vc0.clone();
  for (int64_t t : {0, 2, 3}) {
    const int64_t s = std::vector<int64_t>{7, -1, 0, 11}[static_cast<size_t>(t)];
    expect_k[s / block_size][s % block_size].copy_(k[t]);
    expect_v[s / block_size][s % block_size].copy_(v[t]);
  }
  EXPECT_TRUE(tensors_equal(kc, expect_k));
  EXPECT_TRUE(tensors_equal(vc, expect_v));
}

TEST_P(PagedKvWriteDevice, BadSlotsAndShapesAreRefusedAndTheCachesKeepTheirContents) {
  const auto opts = p().options();
  const auto kc = at::randn({2, 4, 1, 3}, opts);
  const auto vc = at::randn({2, 4, 1, 3}, opts);
  const auto kc0 = kc.clone();
  const auto vc0 = vc.clone();
  const auto k = at::randn({3, 1, 3}, opts);
  const auto v = at::randn({3, 1, 3}, opts);
  const auto longs = at::TensorOptions(p().device).dtype(at::kLong);
  EXPECT_THAT(error_message([&] {
                paged_kv_write(k, v, kc, vc, at::tensor({0, 8, 1}, longs));
              }),
              AllOf(HasSubstr("paged_kv_write: slot_mapping[1] = 8"), HasSubstr("8 slots"),
                    HasSubstr("nothing was written")));
  EXPECT_THAT(error_message([&] {
                paged_kv_write(k, v, kc, vc, at::tensor({2, 5, 2}, longs));
              }),
              AllOf(HasSubstr("map to slot"), HasSubstr("Nothing was written")));
  EXPECT_THAT(error_message([&] {
                paged_kv_write(k, v, kc, vc, at::tensor({0, 1, 2}, longs).to(at::kInt));
              }),
              HasSubstr("slot_mapping must be int64"));
  EXPECT_THAT(error_message([&] {
                paged_kv_write(k, v, kc, vc.transpose(0, 1).contiguous().transpose(0, 1),
                               at::tensor({0, 1, 2}, longs));
              }),
              HasSubstr("must be contiguous"));
  EXPECT_THAT(error_message([&] {
                paged_kv_write(k, v, kc, kc, at::tensor({0, 1, 2}, longs));
              }),
              AllOf(HasSubstr("argument 'key_cache'"), HasSubstr("the same tensor")));
  EXPECT_THAT(error_message([&] {
                paged_kv_write(at::randn({3, 2, 3}, opts), at::randn({3, 2, 3}, opts), kc, vc,
                               at::tensor({0, 1, 2}, longs));
              }),
              HasSubstr("with key's heads and head_size"));
  EXPECT_TRUE(tensors_equal(kc, kc0));
  EXPECT_TRUE(tensors_equal(vc, vc0));
}

INSTANTIATE_TEST_SUITE_P(Cpu, PagedKvWriteDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, PagedKvWriteDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

TEST(MutatingOps, SchemasDeclareTheirWrites) {
  const auto& fused = customop::ops::fused_add_rms_norm_op();
  EXPECT_TRUE(fused.mutates());
  EXPECT_TRUE(fused.args()[0].written && fused.args()[1].written && !fused.args()[2].written);
  EXPECT_TRUE(fused.returns().empty());
  const auto& paged = customop::ops::paged_kv_write_op();
  EXPECT_TRUE(paged.args()[2].written && paged.args()[3].written);
  EXPECT_FALSE(paged.args()[0].written || paged.args()[1].written || paged.args()[4].written);
}

}  // namespace
