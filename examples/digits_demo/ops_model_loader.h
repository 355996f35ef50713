#pragma once
/// \file
/// Loading TorchScript models that call customop ops, with an error that says what to do
/// when the op library is not loaded (torch's own says only "Unknown builtin op").

#include <torch/script.h>

#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

namespace customop::examples {

/// Thrown by load_scripted_model() when the model calls an op that no loaded library
/// registered, typically because libcustomop_ops.so was neither linked nor dlopen'ed.
class MissingOpError : public std::runtime_error {
 public:
  MissingOpError(std::string op, const std::string& message)
      : std::runtime_error(message), op_(std::move(op)) {}
  /// The qualified name of the first missing op, e.g. "customop::rms_norm".
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

/// Loads the shared library at `path` (dlopen, RTLD_NOW | RTLD_GLOBAL) so the ops it defines
/// register with the dispatcher; the C++ twin of Python's torch.ops.load_library(path).
/// Throws std::runtime_error naming `path` and dlerror()'s reason when it cannot be loaded.
/// Example:
///   customop::examples::load_ops_library("build/release/plugin/ops/libcustomop_ops.so");
///   auto model = customop::examples::load_scripted_model("digits_model.pt");
void load_ops_library(const std::string& path);

/// torch::jit::load(`path`) on the CPU. When the model calls an op nobody registered, throws
/// MissingOpError whose message names the op and says how to load libcustomop_ops.so
/// (--ops-library PATH, linking customop::ops, or torch.ops.load_library in Python); every
/// other load error propagates unchanged (c10::Error, torch::jit::ErrorReport).
/// Example:
///   try { auto m = customop::examples::load_scripted_model(path); }
///   catch (const customop::examples::MissingOpError& e) { std::cerr << e.what(); }
torch::jit::Module load_scripted_model(const std::string& path);

}  // namespace customop::examples

namespace torch::inductor {
class AOTIModelPackageLoader;
}  // namespace torch::inductor

namespace customop::examples {

/// Runs a demo program's body and turns what it throws into one line on stderr, prefixed with
/// `program`, and the exit status: MissingOpError 3, any other exception 1 (c10::Error without
/// its backtrace); otherwise the body's own status.
int run_reporting_errors(const char* program, const std::function<int()>& body);

/// Loads an AOTInductor package (`.pt2` from torch._inductor.aoti_compile_and_package) for
/// the CPU, the successor of torch::jit::load. When the package calls an op nobody
/// registered, throws MissingOpError naming the op and how to load libcustomop_ops.so (as
/// load_scripted_model does); other load errors propagate unchanged.
/// Example:
///   customop::examples::load_ops_library("build/release/plugin/ops/libcustomop_ops.so");
///   auto package = customop::examples::load_aoti_package("digits_model.pt2");
///   at::Tensor probs = package->run({x}).at(0);
std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load_aoti_package(const std::string& path);

}  // namespace customop::examples
