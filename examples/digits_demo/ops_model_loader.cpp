#include "ops_model_loader.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <dlfcn.h>

#include <regex>

namespace customop::examples {

void load_ops_library(const std::string& path) {
  // NB: RTLD_GLOBAL so that a second library built on top of this one (and torch's own
  // lookups) resolve against the same symbols, as Python's ctypes.CDLL does for load_library.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("cannot load the op library '" + path +
                             "': " + (why != nullptr ? why : "unknown dlopen error"));
  }
}

namespace {
// "cannot load <what> '<path>': it calls the op <op>, which is not registered ..." and how to
// register it.
std::string missing_op_message(const std::string& what, const std::string& path,
                               const std::string& op) {
  const std::string ns = op.substr(0, op.find("::"));
  std::string message = "cannot load " + what + " '" + path + "': it calls the op " + op +
                        ", which is not registered in this process.\n";
  if (ns == "customop") {
    message +=
        "The customop ops live in libcustomop_ops.so (build/<preset>/plugin/ops/); load it "
        "before the model: pass --ops-library /path/to/libcustomop_ops.so to this program, "
        "link the program against customop::ops, or call "
        "torch.ops.load_library(\"/path/to/libcustomop_ops.so\") in Python.";
  } else {
    message += "Load the library that defines the '" + ns +
               "' namespace before the model (dlopen it, link it, or "
               "torch.ops.load_library in Python).";
  }
  return message;
}
}  // namespace

torch::jit::Module load_scripted_model(const std::string& path) {
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    // NB: the compiler's errors are torch::jit::ErrorReport, not c10::Error:
    // "Unknown builtin op: customop::rms_norm.\nCould not find any similar ops ..."
    static const std::regex kUnknownOp(
        R"(Unknown builtin op: ([A-Za-z_]\w*::[A-Za-z_][\w.]*?)\.?\s)");
    const std::string what = e.what();
    std::smatch m;
    if (!std::regex_search(what, m, kUnknownOp)) throw;
    const std::string op = m[1].str();
    throw MissingOpError(op, missing_op_message("the TorchScript model", path, op));
  }
}

int run_reporting_errors(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const MissingOpError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 3;
  } catch (const c10::Error& e) {
    std::cerr << program << ": " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load_aoti_package(
    const std::string& path) {
  try {
    return std::make_unique<torch::inductor::AOTIModelPackageLoader>(path);
  } catch (const std::exception& e) {
    // NB: the package's proxy executor looks each extern op up by name when it loads:
    // "Could not find schema for customop::rms_norm.default" (or ":default").
    static const std::regex kMissing(R"(Could not find schema for ([A-Za-z_]\w*::[A-Za-z_]\w*))");
    const std::string what = e.what();
    std::smatch m;
    if (!std::regex_search(what, m, kMissing)) throw;
    const std::string op = m[1].str();
    throw MissingOpError(op, missing_op_message("the AOTInductor package", path, op));
  }
}

}  // namespace customop::examples
