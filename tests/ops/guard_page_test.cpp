// Every CPU kernel reads and writes only its tensors' bytes. Each input (and each argument an
// in-place op writes) is placed flush against a page the process may not touch, once ending
// at it and once starting right after one; a vector load or store past either end of a row
// or of the tensor then faults at once, whatever the allocator would have put there. (bench's
// kernels_cpu once died with SIGSEGV in one random benchmark order out of two: a read past the
// end of a large tensor faults only when the next page happens to be unmapped.)
// Each result must also equal the op's result on ordinary copies of the same inputs.
// Runs in every instruction-set build the CPU has (tests/ops/CMakeLists.txt: .default, .avx2).

#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/fused_add_rms_norm.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace ops = customop::ops;

enum class Flush { kEnd, kStart };  // the tensor's last byte before a guard / first after one

/// A contiguous tensor holding `like`'s values in its own mapping, with an inaccessible page
/// right after its last byte (kEnd) or right before its first (kStart).
at::Tensor guarded_copy(const at::Tensor& like, Flush flush) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = like.nbytes();
  const size_t data_pages = (bytes + page - 1) / page + 1;
  const size_t len = (data_pages + 2) * page;
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* b = static_cast<char*>(base);
  if (mprotect(b, page, PROT_NONE) != 0 ||
      mprotect(b + (data_pages + 1) * page, page, PROT_NONE) != 0) {
    munmap(base, len);
    throw std::runtime_error("mprotect failed");
  }
  char* data = flush == Flush::kEnd ? b + (data_pages + 1) * page - bytes : b + page;
  const at::Tensor src = like.contiguous();
  if (bytes > 0) std::memcpy(data, src.const_data_ptr(), bytes);
  return at::from_blob(
      data, like.sizes(), [base, len](void*) { munmap(base, len); }, like.options());
}

class GuardPage : public ::testing::TestWithParam<std::tuple<at::ScalarType, Flush>> {
 protected:
  at::ScalarType dtype() const { return std::get<0>(GetParam()); }
  Flush flush() const { return std::get<1>(GetParam()); }
  at::Tensor input(std::vector<int64_t> shape) const {
    return at::randn(shape, at::TensorOptions().dtype(at::kDouble)).mul(2).to(dtype());
  }
  at::Tensor guard(const at::Tensor& t) const { return guarded_copy(t, flush()); }
};

// Row lengths around every vector width (4, 8, 16, 32 lanes) and a long row.
const std::vector<int64_t> kLengths{1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 65, 1023, 1025};

void expect_same(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  EXPECT_TRUE(at::equal(got.isnan(), want.isnan()) &&
              at::equal(got.nan_to_num(0.0), want.nan_to_num(0.0)))
      << what;
}

TEST_P(GuardPage, RowOps) {
  for (const int64_t d : kLengths) {
    for (const int64_t rows : {1, 3}) {
      const std::string what = "[" + std::to_string(rows) + ", " + std::to_string(d) + "]";
      SCOPED_TRACE(what);
      const auto x = input({rows, d});
      const auto w = input({d});
      const auto gx = guard(x), gw = guard(w);
      expect_same(ops::rms_norm_op()(ops::RmsNormArgs{gx, gw, 1e-6}),
                  ops::rms_norm_op()(ops::RmsNormArgs{x, w, 1e-6}), "rms_norm " + what);
      for (const std::string approximate : {"none", "tanh"}) {
        expect_same(ops::bias_gelu_op()(ops::BiasGeluArgs{gx, gw, approximate}),
                    ops::bias_gelu_op()(ops::BiasGeluArgs{x, w, approximate}),
                    "bias_gelu " + approximate + " " + what);
      }
      const auto mask = at::rand({rows, d}) > 0.3;
      const auto gmask = guard(mask);
      for (const int64_t dim : {-1, 0}) {
        expect_same(ops::masked_softmax_op()(ops::MaskedSoftmaxArgs{gx, gmask, dim}),
                    ops::masked_softmax_op()(ops::MaskedSoftmaxArgs{x, mask, dim}),
                    "masked_softmax dim " + std::to_string(dim) + " " + what);
        const auto [gv, gi] = ops::max_along_op()(ops::MaxAlongArgs{gx, dim, false});
        const auto [v, i] = ops::max_along_op()(ops::MaxAlongArgs{x, dim, false});
        expect_same(gv, v, "max_along values dim " + std::to_string(dim) + " " + what);
        EXPECT_TRUE(at::equal(gi, i)) << "max_along indices dim " << dim << " " << what;
      }
    }
  }
}

TEST_P(GuardPage, ElementwiseOps) {
  for (const int64_t n : kLengths) {
    SCOPED_TRACE("numel " + std::to_string(n));
    const auto x = input({n}), y = input({n});
    const auto gx = guard(x), gy = guard(y);
    const auto [gc, gn] = ops::clamp_count_op()(ops::ClampCountArgs{gx, -0.5, 0.5});
    const auto [c, cn] = ops::clamp_count_op()(ops::ClampCountArgs{x, -0.5, 0.5});
    expect_same(gc, c, "clamp_count");
    EXPECT_TRUE(at::equal(gn, cn)) << "clamp_count count";
    expect_same(ops::weighted_sum_op()(ops::WeightedSumArgs{{gx, gy}, {0.5, 2.0}}),
                ops::weighted_sum_op()(ops::WeightedSumArgs{{x, y}, {0.5, 2.0}}), "weighted_sum");
  }
}

// rms_norm_ and bias_gelu_ write x with the ops' own kernels (InplaceWrite::kDirect), so a
// guarded x checks those kernels' stores too.
TEST_P(GuardPage, InPlaceVariantsWriteOnlyX) {
  c10::NoGradGuard no_grad;
  const auto rms_ = c10::Dispatcher::singleton().findSchemaOrThrow("customop::rms_norm_", "");
  const auto gelu_ = c10::Dispatcher::singleton().findSchemaOrThrow("customop::bias_gelu_", "");
  for (const int64_t d : kLengths) {
    SCOPED_TRACE("d " + std::to_string(d));
    const auto x = input({3, d}), w = input({d});
    const auto gw = guard(w);
    auto gx = guard(x);
    torch::jit::Stack call{gx, gw, 1e-6};
    rms_.callBoxed(call);
    expect_same(gx, ops::rms_norm_op()(ops::RmsNormArgs{x, w, 1e-6}), "rms_norm_");
    gx = guard(x);
    call = {gx, gw, std::string("none")};
    gelu_.callBoxed(call);
    expect_same(gx, ops::bias_gelu_op()(ops::BiasGeluArgs{x, w, "none"}), "bias_gelu_");
  }
}

// fused_add_rms_norm_ writes input and residual in place: its stores are guarded too.
TEST_P(GuardPage, InPlaceWrites) {
  for (const int64_t d : kLengths) {
    SCOPED_TRACE("d " + std::to_string(d));
    const auto x = input({3, d}), r = input({3, d}), w = input({d});
    const auto gx = guard(x), gr = guard(r), gw = guard(w);
    const auto x2 = x.clone(), r2 = r.clone();
    ops::fused_add_rms_norm_op()(ops::FusedAddRmsNormArgs{gx, gr, gw, 1e-6});
    ops::fused_add_rms_norm_op()(ops::FusedAddRmsNormArgs{x2, r2, w, 1e-6});
    expect_same(gx, x2, "fused_add_rms_norm_ input");
    expect_same(gr, r2, "fused_add_rms_norm_ residual");
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GuardPage,
                         ::testing::Combine(::testing::Values(at::kFloat, at::kDouble,
                                                              at::kBFloat16, at::kHalf),
                                            ::testing::Values(Flush::kEnd, Flush::kStart)),
                         [](const auto& info) {
                           return std::string(c10::toString(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == Flush::kEnd ? "_end" : "_start");
                         });

}  // namespace
