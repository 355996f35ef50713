// The in-place variants declared InplaceWrite::kDirect (rms_norm_, bias_gelu_): without grad,
// the op's out kernel writes x itself, so the call allocates no result and copies nothing; an
// x whose layout differs from the result's, or that shares memory with another argument, goes
// through the functional op and a copy instead, with the functional op's values either way.
// CUDA keeps the copy path (InplaceWrite's note): the Cuda cases check the values only.
// Observed through ATen's RecordFunction callbacks: the aten ops the call dispatches.

#include <customop/ops/bias_gelu.h>
#include <customop/ops/rms_norm.h>

#include "support/device_params.h"
#include "support/tensor_assertions.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using customop::testing::DeviceTest;
using customop::testing::tensors_close;
using customop::testing::tolerance_for;

thread_local std::vector<std::string>* g_seen = nullptr;

std::unique_ptr<at::ObserverContext> record_name(const at::RecordFunction& fn) {
  if (g_seen != nullptr) g_seen->emplace_back(fn.name());
  return nullptr;
}

/// The names of the ops `call` dispatches on this thread.
template <class F>
std::vector<std::string> ops_dispatched_by(F&& call) {
  std::vector<std::string> seen;
  g_seen = &seen;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&record_name).scopes({at::RecordScope::FUNCTION}));
  try {
    call();
  } catch (...) {
    at::removeCallback(handle);
    g_seen = nullptr;
    throw;
  }
  at::removeCallback(handle);
  g_seen = nullptr;
  return seen;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

at::Tensor call_inplace(const char* name, const at::Tensor& x, const at::Tensor& other,
                        const c10::IValue& scalar) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack{x, other, scalar};
  op.callBoxed(stack);
  return stack.at(0).toTensor();
}

class InplaceDirect : public DeviceTest {};

TEST_P(InplaceDirect, WritesXWithoutAResultOrACopy) {
  at::NoGradGuard no_grad;
  const auto x = at::randn({7, 33}, p().options());
  const auto w = at::randn({33}, p().options());
  for (const auto& [name, functional] :
       {std::pair<const char*, std::string>{"customop::rms_norm_", "customop::rms_norm"},
        {"customop::bias_gelu_", "customop::bias_gelu"}}) {
    SCOPED_TRACE(name);
    const bool rms = functional == "customop::rms_norm";
    const c10::IValue scalar = rms ? c10::IValue(1e-6) : c10::IValue(std::string("none"));
    const auto want =
        rms ? customop::ops::rms_norm_op()(customop::ops::RmsNormArgs{x, w, 1e-6})
            : customop::ops::bias_gelu_op()(customop::ops::BiasGeluArgs{x, w, "none"});
    auto xi = x.clone();
    const void* before = xi.const_data_ptr();
    at::Tensor got;
    const auto seen = ops_dispatched_by([&] { got = call_inplace(name, xi, w, scalar); });
    EXPECT_TRUE(has(seen, name)) << "the callback saw nothing";
    if (!p().is_cuda()) {
      EXPECT_FALSE(has(seen, functional)) << "went through the functional op";
      EXPECT_FALSE(has(seen, "aten::copy_")) << "copied a result into x";
    }
    EXPECT_EQ(got.const_data_ptr(), before);
    EXPECT_TRUE(tensors_close(xi, want, tolerance_for(p().dtype)));
  }
}

// bias = a row of x itself: writing x directly would change the bias under the kernel.
TEST_P(InplaceDirect, ArgumentSharingMemoryWithXGoesThroughACopy) {
  at::NoGradGuard no_grad;
  const auto x = at::randn({5, 16}, p().options());
  const auto want =
      customop::ops::bias_gelu_op()(customop::ops::BiasGeluArgs{x, x[0].clone(), "none"});
  auto xi = x.clone();
  const auto seen = ops_dispatched_by(
      [&] { call_inplace("customop::bias_gelu_", xi, xi[0], std::string("none")); });
  EXPECT_TRUE(has(seen, "customop::bias_gelu")) << "wrote x directly";
  EXPECT_TRUE(tensors_close(xi, want, tolerance_for(p().dtype)));
}

// Two tensors made over one buffer have separate storages (from_blob, NumPy, DLPack): the
// check is by address, so this one goes through the copy too.
TEST_P(InplaceDirect, SameMemoryUnderAnotherStorageGoesThroughACopy) {
  at::NoGradGuard no_grad;
  auto buffer = at::randn({5, 16}, p().options());
  const auto want = customop::ops::bias_gelu_op()(
      customop::ops::BiasGeluArgs{buffer.clone(), buffer[0].clone(), "none"});
  const auto xi = at::from_blob(buffer.data_ptr(), {5, 16}, buffer.options());
  const auto bias = at::from_blob(buffer.data_ptr(), {16}, buffer.options());
  const auto seen = ops_dispatched_by(
      [&] { call_inplace("customop::bias_gelu_", xi, bias, std::string("none")); });
  EXPECT_TRUE(has(seen, "customop::bias_gelu")) << "wrote x directly";
  EXPECT_TRUE(tensors_close(xi, want, tolerance_for(p().dtype)));
}

// An undefined bias gets the copy path's refusal (the functional kernel's TypeError naming it),
// and x is left as it was.
TEST_P(InplaceDirect, UndefinedArgumentGetsTheCopyPathsError) {
  at::NoGradGuard no_grad;
  auto xi = at::randn({2, 8}, p().options());
  const auto before = xi.clone();
  try {
    call_inplace("customop::bias_gelu_", xi, at::Tensor(), std::string("none"));
    ADD_FAILURE() << "no error";
  } catch (const c10::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(at::equal(xi, before));
}

// A transposed x has other strides than the contiguous result: the copy path writes it.
TEST_P(InplaceDirect, NonContiguousXGoesThroughACopy) {
  at::NoGradGuard no_grad;
  const auto base = at::randn({16, 6}, p().options());
  const auto w = at::randn({16}, p().options());
  const auto want =
      customop::ops::rms_norm_op()(customop::ops::RmsNormArgs{base.t().contiguous(), w, 1e-6});
  auto xi = base.clone().t();
  const auto seen =
      ops_dispatched_by([&] { call_inplace("customop::rms_norm_", xi, w, c10::IValue(1e-6)); });
  EXPECT_TRUE(has(seen, "customop::rms_norm")) << "wrote x directly";
  EXPECT_TRUE(tensors_close(xi, want, tolerance_for(p().dtype)));
}

INSTANTIATE_TEST_SUITE_P(Cpu, InplaceDirect, ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, InplaceDirect, ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

}  // namespace
