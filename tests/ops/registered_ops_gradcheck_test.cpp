// Every op registered through customop in this binary (the built-in ops of libcustomop_ops.so)
// x {float64, float32}: its registered samples are well-formed, and the gradcheck library
// (customop/gradcheck/runner.h, what the customop-gradcheck CLI runs) passes on each of them.
// The ops come from the registry, so a new built-in op is covered without editing this file.
// Op-specific properties of the samples (no ties, a fully masked row, ...) stay in the
// per-op suites.

#include <customop/gradcheck/runner.h>
#include <customop/op_core.h>
#include <customop/ops/bias_gelu.h>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace gc = customop::gradcheck;

/// One registered op on one device, in one floating dtype.
struct OpCase {
  std::string op;  ///< qualified name, "customop::rms_norm"
  c10::DeviceType device;
  c10::ScalarType dtype;
};

/// gtest prints a parameter with this (instead of its bytes).
void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.op << " " << c10::DeviceTypeName(c.device, /*lower_case=*/true) << " "
      << c10::getDtypeNames(c.dtype).first;
}

/// Every registered differentiable op x {float64, float32} on `device`. The ops that write
/// their arguments (fused_add_rms_norm_, paged_kv_write) have no backward and no samples:
/// mutating_ops_test.cpp and the mutation audit's tests check them.
std::vector<OpCase> registered_op_cases(c10::DeviceType device) {
  std::vector<OpCase> cases;
  for (const customop::OpCore* op : customop::registered_ops()) {
    if (op->mutates()) continue;
    for (auto dtype : {at::kDouble, at::kFloat}) cases.push_back({op->name(), device, dtype});
  }
  return cases;
}

/// "rms_norm_float64": the op's name without the built-ins' namespace (other namespaces are
/// kept, as "ns_name"), then the dtype; the device is in the instantiation's prefix.
std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string name = info.param.op;
  const std::string builtin = "customop::";
  if (name.rfind(builtin, 0) == 0) name = name.substr(builtin.size());
  std::replace_if(
      name.begin(), name.end(), [](unsigned char ch) { return std::isalnum(ch) == 0; }, '_');
  return name + "_" + std::string(c10::getDtypeNames(info.param.dtype).first);
}

class EveryRegisteredOp : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override {
    if (GetParam().device == c10::DeviceType::CUDA) {
      if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
      if (!op().has_kernel(c10::DeviceType::CUDA)) {
        GTEST_SKIP() << op().name() << " has no CUDA kernel in this build";
      }
    }
  }
  const customop::OpCore& op() const {
    const customop::OpCore* found = customop::find_op(GetParam().op);
    // NB: the parameters were read from the registry, and nothing unregisters an op.
    TORCH_CHECK(found != nullptr, GetParam().op, " is no longer registered");
    return *found;
  }
};

/// Every floating tensor of a sample (also inside Tensor? and Tensor[] arguments) has the
/// requested dtype and device; no tensor requires grad (the runner marks the differentiable
/// inputs itself) or has a stride-0 dimension (gradcheck refuses to perturb those).
::testing::AssertionResult sample_tensors_are_well_formed(const customop::Sample& s,
                                                          c10::Device device,
                                                          c10::ScalarType dtype) {
  std::vector<at::Tensor> tensors;
  for (const auto& v : s.args) {
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) tensors.push_back(t);
    }
  }
  if (tensors.empty()) return ::testing::AssertionFailure() << "the sample holds no tensor";
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const at::Tensor& t = tensors[k];
    std::ostringstream where;
    where << "tensor " << k << " (sizes " << t.sizes() << ", strides " << t.strides() << ")";
    if (!t.defined()) return ::testing::AssertionFailure() << where.str() << " is undefined";
    if (t.requires_grad()) {
      return ::testing::AssertionFailure() << where.str() << " requires grad";
    }
    if (t.device().type() != device.type()) {
      return ::testing::AssertionFailure() << where.str() << " is on " << t.device();
    }
    if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype) {
      return ::testing::AssertionFailure() << where.str() << " is " << t.scalar_type();
    }
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.stride(d) == 0) {
        return ::testing::AssertionFailure() << where.str() << " has stride 0 in dim " << d;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(EveryRegisteredOp, HasThreeToFiveWellFormedSamples) {
  const OpCase& p = GetParam();
  ASSERT_TRUE(op().has_samples()) << p.op << " registers no samples (op.samples(fn))";
  at::manual_seed(0);
  const auto samples = op().samples(c10::Device(p.device), p.dtype);
  EXPECT_GE(samples.size(), 3u);
  EXPECT_LE(samples.size(), 5u);
  for (const auto& s : samples) {
    SCOPED_TRACE(s.label);
    EXPECT_EQ(s.args.size(), op().schema().arguments().size());
    EXPECT_TRUE(sample_tensors_are_well_formed(s, c10::Device(p.device), p.dtype));
  }
}

TEST_P(EveryRegisteredOp, PassesGradcheckOnItsSamples) {
  const OpCase& p = GetParam();
  ASSERT_TRUE(op().has_autograd()) << p.op << " has no backward formula";
  ASSERT_TRUE(op().has_samples()) << p.op << " registers no samples (op.samples(fn))";
  gc::RunOptions run;
  run.op_glob = p.op;  // NB: qualified op names hold no glob characters
  run.devices = {p.device};
  run.dtypes = {p.dtype};
  run.modes = {gc::Mode::kSlow};  // full Jacobians: every entry of every sample
  const gc::RunSummary summary = gc::run_registered_ops(run);
  ASSERT_FALSE(summary.cases.empty());
  for (const gc::CaseResult& c : summary.cases) {
    EXPECT_EQ(c.op, p.op);
    // NB: compared by name, so a failure prints "failed" (or "skipped", "error").
    EXPECT_EQ(gc::status_name(c.status), gc::status_name(gc::CaseStatus::kPassed))
        << c.op << " " << c.device << " " << c.dtype << " " << gc::mode_name(c.mode) << " sample \""
        << c.label << "\"" << (c.reason.empty() ? "" : ": " + c.reason) << "\n"
        << (c.status == gc::CaseStatus::kFailed ? c.result.message() : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, EveryRegisteredOp,
                         ::testing::ValuesIn(registered_op_cases(c10::DeviceType::CPU)), case_name);
INSTANTIATE_TEST_SUITE_P(Cuda, EveryRegisteredOp,
                         ::testing::ValuesIn(registered_op_cases(c10::DeviceType::CUDA)),
                         case_name);

// The registry the suite above enumerates holds the built-in ops: an empty or partial
// registry (say, libcustomop_ops.so not loaded) must not pass as "nothing to check".
TEST(RegisteredOps, IncludeEveryBuiltInOp) {
  // NB: calling one op's accessor keeps libcustomop_ops.so linked (--as-needed).
  EXPECT_EQ(customop::ops::bias_gelu_op().name(), "customop::bias_gelu");
  std::vector<std::string> names;
  for (const customop::OpCore* op : customop::registered_ops()) names.push_back(op->name());
  EXPECT_THAT(names, ::testing::IsSupersetOf(
                         {"customop::bias_gelu", "customop::bias_gelu_backward",
                          "customop::clamp_count", "customop::clamp_count_backward",
                          "customop::masked_softmax", "customop::masked_softmax_backward",
                          "customop::max_along", "customop::max_along_backward",
                          "customop::rms_norm", "customop::rms_norm_backward",
                          "customop::weighted_sum", "customop::weighted_sum_backward",
                          "customop::fused_add_rms_norm_", "customop::paged_kv_write"}));
}

}  // namespace
