// Loads the AOTInductor package train.py exported (torch.export of the digits model with a
// dynamic batch dim, then aoti_compile_and_package), the successor of torch::jit::load, and
// evaluates it on the held-out split: accuracy, predictions and probabilities against
// Python's run of the same package, and a second batch size through the same package.
//
// The package calls the customop ops through the dispatcher, so the op library must be
// loaded first (--ops-library); without it, exit 3 names the op and says how to load it.

#include "demo_common.h"
#include "ops_model_loader.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

namespace {

using customop::examples::DemoData;

constexpr const char* kUsage =
    "usage: digits_aoti_eval --model PATH [--ops-library PATH] [--data PATH] [--summary PATH]\n"
    "                        [--min-accuracy A] [--max-diff D] [--reference NAME]\n"
    "  --model        AOTInductor package saved by train.py (digits_model.pt2)\n"
    "  --ops-library  libcustomop_ops.so, dlopen'ed before the package is loaded\n"
    "  --data         the split train.py exported (digits_data.pt); without it: load only\n"
    "  --summary      write the figures as JSON here\n"
    "  --min-accuracy fail (exit 1) below this held-out accuracy (default 0.95)\n"
    "  --max-diff     fail (exit 1) when C++ and Python probabilities differ by more (1e-5)\n"
    "  --reference    the Python probabilities in --data to compare with (default\n"
    "                 py_aoti_probs_test; py_aoti_autocast_probs_test for the autocast package)\n"
    "exit: 0 ok, 1 a check failed, 2 bad usage, 3 an op the package calls is not loaded\n";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const std::map<std::string, std::string>& flags) {
  if (!flags.at("ops-library").empty())
    customop::examples::load_ops_library(flags.at("ops-library"));
  const auto t_load = std::chrono::steady_clock::now();
  auto loader = customop::examples::load_aoti_package(flags.at("model"));
  std::cout << "loaded " << flags.at("model") << " in " << seconds_since(t_load) << " s\n";
  if (flags.at("data").empty()) return 0;

  at::set_num_threads(1);
  const DemoData data(flags.at("data"));
  const double min_accuracy = std::stod(flags.at("min-accuracy"));
  const double max_diff = std::stod(flags.at("max-diff"));
  bool ok = true;

  const at::Tensor x = data.get("x_test");
  const at::Tensor probs = loader->run({x}).at(0);
  const at::Tensor py_probs = data.get(flags.at("reference"));
  const double acc = customop::examples::accuracy(probs, data.get("y_test"));
  const double diff = (probs - py_probs).abs().max().item<double>();
  const int64_t same_predictions = (probs.argmax(1) == py_probs.argmax(1)).sum().item<int64_t>();
  std::cout << "AOTI held-out accuracy (" << probs.size(0) << " images): " << acc << "\n"
            << "predictions equal to Python's run of the package: " << same_predictions << " of "
            << probs.size(0) << "\n"
            << "max |C++ - Python| over the held-out class probabilities: " << diff << "\n";
  if (acc < min_accuracy) {
    std::cout << "FAIL: accuracy " << acc << " < " << min_accuracy << "\n";
    ok = false;
  }
  if (same_predictions != probs.size(0) || !(diff <= max_diff)) {
    std::cout << "FAIL: C++ and Python disagree (max diff " << diff << " > " << max_diff << ")\n";
    ok = false;
  }
  // The batch dim is dynamic: another batch size runs the same package.
  const at::Tensor part = loader->run({x.slice(0, 0, 7).contiguous()}).at(0);
  const double part_diff = (part - probs.slice(0, 0, 7)).abs().max().item<double>();
  std::cout << "batch of 7 through the same package: max |diff| vs the full batch " << part_diff
            << "\n";
  if (!(part_diff <= max_diff)) {
    std::cout << "FAIL: a batch of 7 differs by " << part_diff << "\n";
    ok = false;
  }

  if (!flags.at("summary").empty()) {
    customop::examples::write_summary(
        flags.at("summary"), {{"aoti_test_accuracy", acc},
                              {"n_test", static_cast<double>(probs.size(0))},
                              {"same_predictions_as_python", static_cast<double>(same_predictions)},
                              {"max_abs_diff_vs_python", diff},
                              {"max_abs_diff_batch_7", part_diff},
                              {"ok", ok ? "yes" : "no"}});
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = customop::examples::parse_flags(argc, argv, kUsage,
                                                     {{"model", ""},
                                                      {"ops-library", ""},
                                                      {"data", ""},
                                                      {"summary", ""},
                                                      {"min-accuracy", "0.95"},
                                                      {"max-diff", "1e-5"},
                                                      {"reference", "py_aoti_probs_test"}});
  if (flags.at("model").empty()) {
    std::cerr << "digits_aoti_eval: --model is required\n" << kUsage;
    return 2;
  }
  return customop::examples::run_reporting_errors("digits_aoti_eval", [&] { return run(flags); });
}
