// A saved TorchScript model that calls customop ops, loaded from C++ with and without the op
// library. The model is saved by a child process (this binary with --make-model PATH), so the
// test process itself loads the op library only where a test asks for it.

#include "ops_model_loader.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace {

using customop::examples::load_ops_library;
using customop::examples::load_scripted_model;
using customop::examples::MissingOpError;

constexpr const char* kOpsLib = CUSTOMOP_OPS_LIB_PATH;

/// C++'s default resolver knows `torch` only as aten; this one adds the `customop` namespace
/// (saved models spell the calls ops.customop.<op>, as Python's torch.ops.customop.<op>).
struct CustomopResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(
      const std::string& name, torch::jit::GraphFunction& fn,
      const torch::jit::SourceRange& loc) override {
    if (name == "customop") return std::make_shared<torch::jit::BuiltinModule>("customop");
    return torch::jit::nativeResolver()->resolveValue(name, fn, loc);
  }
  c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange& loc) override {
    return torch::jit::nativeResolver()->resolveType(name, loc);
  }
};

/// forward(x [N, 5] float64) = rms_norm(bias_gelu(x, bias), weight), bias and weight [5].
int make_model(const std::string& path) {
  load_ops_library(kOpsLib);
  torch::manual_seed(7);
  torch::jit::Module m("TinyModel");
  m.register_parameter("bias", torch::randn({5}, torch::kDouble).requires_grad_(), false);
  m.register_parameter("weight", (torch::rand({5}, torch::kDouble) + 0.5).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, x):
    h = customop.bias_gelu(x, self.bias, "none")
    return customop.rms_norm(h, self.weight, 1e-6)
)JIT",
           std::make_shared<CustomopResolver>());
  m.save(path);
  return 0;
}

bool op_registered(const char* name) {
  return c10::Dispatcher::singleton().findOp({name, ""}).has_value();
}

class ModelLoad : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("customop_model_load_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    model_ = (dir_ / "tiny_model.pt").string();
    const std::string cmd = "'" + std::filesystem::read_symlink("/proc/self/exe").string() +
                            "' --make-model '" + model_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "saving the model failed: " << cmd;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string model_;
};

TEST_F(ModelLoad, WithoutOpLibraryNamesTheOpAndHowToLoadIt) {
  if (op_registered("customop::bias_gelu")) {
    GTEST_SKIP() << "the op library is already loaded in this process (run this test alone)";
  }
  try {
    load_scripted_model(model_);
    FAIL() << "loading " << model_ << " without the op library succeeded";
  } catch (const MissingOpError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.op(), "customop::bias_gelu");
    EXPECT_NE(what.find("it calls the op customop::bias_gelu,"), std::string::npos) << what;
    EXPECT_NE(what.find(model_), std::string::npos) << what;
    EXPECT_NE(what.find("libcustomop_ops.so"), std::string::npos) << what;
    EXPECT_NE(what.find("--ops-library"), std::string::npos) << what;
    EXPECT_NE(what.find("torch.ops.load_library"), std::string::npos) << what;
  }
}

TEST_F(ModelLoad, WithOpLibraryForwardAndBackwardUseTheRegisteredFormulas) {
  load_ops_library(kOpsLib);
  torch::jit::Module model = load_scripted_model(model_);
  const at::Tensor bias = model.attr("bias").toTensor();
  const at::Tensor weight = model.attr("weight").toTensor();
  ASSERT_TRUE(bias.requires_grad() && weight.requires_grad());

  torch::manual_seed(0);
  const at::Tensor x = torch::randn({6, 5}, torch::kDouble).requires_grad_();
  const at::Tensor cotangent = torch::randn({6, 5}, torch::kDouble);
  for (int call = 0; call < 3; ++call) {  // profiling run, then the optimised graph
    for (auto t : {x, bias, weight}) t.mutable_grad() = at::Tensor();
    const at::Tensor y = model.forward({x}).toTensor();
    const std::string node = y.grad_fn() ? y.grad_fn()->name() : "none";
    EXPECT_NE(node.find("customop"), std::string::npos) << "call " << call << ": grad_fn " << node;
    (y * cotangent).sum().backward();

    // Reference: the same formulas in ATen, differentiated by autograd.
    const auto xr = x.detach().requires_grad_();
    const auto br = bias.detach().requires_grad_();
    const auto wr = weight.detach().requires_grad_();
    const auto h = torch::gelu(xr + br);
    const auto yr = h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * wr;
    (yr * cotangent).sum().backward();
    EXPECT_TRUE(torch::allclose(y, yr, 1e-10, 1e-12)) << "call " << call;
    EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 1e-10, 1e-12)) << "call " << call;
    EXPECT_TRUE(torch::allclose(bias.grad(), br.grad(), 1e-10, 1e-12)) << "call " << call;
    EXPECT_TRUE(torch::allclose(weight.grad(), wr.grad(), 1e-10, 1e-12)) << "call " << call;
  }
}

TEST(ModelLoadErrors, BadLibraryPathNamesThePathAndTheReason) {
  try {
    load_ops_library("/nonexistent/libcustomop_ops.so");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot load the op library '/nonexistent/libcustomop_ops.so'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("No such file"), std::string::npos) << what;
  }
}

TEST(ModelLoadErrors, OtherLoadErrorsPropagateUnchanged) {
  EXPECT_THROW(
      {
        try {
          load_scripted_model("/nonexistent/model.pt");
        } catch (const MissingOpError&) {
          ADD_FAILURE() << "a missing file reported as a missing op";
          throw;
        }
      },
      c10::Error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--make-model") return make_model(argv[2]);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
