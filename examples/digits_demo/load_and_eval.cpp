// Loads the TorchScript digits model saved by train.py, evaluates it on the held-out split,
// checks that its outputs agree with Python's, and runs one backward pass to show the
// gradients flow through the custom ops' registered backward formulas.
//
// Without --data it only loads the model: the quickest way to check that a saved model and
// an op library go together (exit 3 names the missing op and says how to load it).

#include "demo_common.h"
#include "ops_model_loader.h"

#include <torch/torch.h>

#include <chrono>
#include <iostream>

namespace {

using customop::examples::DemoData;

constexpr const char* kUsage =
    "usage: digits_load_and_eval --model PATH [--ops-library PATH] [--data PATH]\n"
    "                            [--summary PATH] [--min-accuracy A] [--max-diff D]\n"
    "  --model        TorchScript model saved by train.py (digits_model.pt)\n"
    "  --ops-library  libcustomop_ops.so, dlopen'ed before the model is loaded\n"
    "  --data         the split train.py exported (digits_data.pt); without it: load only\n"
    "  --summary      write the figures as JSON here\n"
    "  --min-accuracy fail (exit 1) below this held-out accuracy (default 0.95)\n"
    "  --max-diff     fail (exit 1) when C++ and Python outputs or grads differ by more (1e-5)\n"
    "exit: 0 ok, 1 a check failed, 2 bad usage, 3 an op the model calls is not loaded\n";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const std::map<std::string, std::string>& flags) {
  if (!flags.at("ops-library").empty())
    customop::examples::load_ops_library(flags.at("ops-library"));
  const auto t_load = std::chrono::steady_clock::now();
  torch::jit::Module model = customop::examples::load_scripted_model(flags.at("model"));
  std::cout << "loaded " << flags.at("model") << " in " << seconds_since(t_load) << " s\n";
  if (flags.at("data").empty()) return 0;

  at::set_num_threads(1);
  const DemoData data(flags.at("data"));
  const double min_accuracy = std::stod(flags.at("min-accuracy"));
  const double max_diff = std::stod(flags.at("max-diff"));
  bool ok = true;

  // Held-out accuracy, and agreement with the probabilities Python computed.
  model.eval();
  at::Tensor probs;
  {
    torch::NoGradGuard no_grad;
    probs = model.forward({data.get("x_test")}).toTensor();
  }
  const double acc = customop::examples::accuracy(probs, data.get("y_test"));
  const double out_diff = (probs - data.get("py_probs_test")).abs().max().item<double>();
  std::cout << "held-out accuracy (" << probs.size(0) << " images): " << acc << "\n"
            << "max |C++ - Python| over the held-out class probabilities: " << out_diff << "\n";
  if (acc < min_accuracy) {
    std::cout << "FAIL: accuracy " << acc << " < " << min_accuracy << "\n";
    ok = false;
  }
  if (!(out_diff <= max_diff)) {
    std::cout << "FAIL: outputs differ by " << out_diff << " > " << max_diff << "\n";
    ok = false;
  }

  // One backward pass through the scripted loss; compare every parameter's gradient.
  model.train();
  for (const auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  const at::Tensor loss =
      model.run_method("loss", data.get("x_grad"), data.get("y_grad")).toTensor();
  loss.backward();
  double grad_diff = 0.0;
  int64_t n_params = 0;
  for (const auto& p : model.named_parameters()) {
    TORCH_CHECK(p.value.grad().defined(), "no gradient reached parameter ", p.name);
    grad_diff = std::max(grad_diff,
                         (p.value.grad() - data.get("grad." + p.name)).abs().max().item<double>());
    ++n_params;
  }
  std::map<std::string, int> custom_nodes;
  for (const auto& name : customop::examples::autograd_node_names(loss)) {
    if (name.find("customop") != std::string::npos) ++custom_nodes[name];
  }
  std::cout << "backward: " << n_params << " parameter gradients, max |C++ - Python| " << grad_diff
            << "\n"
            << "autograd nodes from customop's registered backward formulas: "
            << custom_nodes.size() << " kinds\n";
  for (const auto& [name, count] : custom_nodes)
    std::cout << "  " << count << " x " << name << "\n";
  if (!(grad_diff <= max_diff)) {
    std::cout << "FAIL: gradients differ by " << grad_diff << " > " << max_diff << "\n";
    ok = false;
  }
  if (custom_nodes.empty()) {
    std::cout << "FAIL: no gradient went through a customop backward formula\n";
    ok = false;
  }

  if (!flags.at("summary").empty()) {
    customop::examples::write_summary(
        flags.at("summary"),
        {{"test_accuracy", acc},
         {"n_test", static_cast<double>(probs.size(0))},
         {"max_abs_diff_outputs", out_diff},
         {"max_abs_diff_grads", grad_diff},
         {"customop_backward_node_kinds", static_cast<double>(custom_nodes.size())},
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
                                                      {"max-diff", "1e-5"}});
  if (flags.at("model").empty()) {
    std::cerr << "digits_load_and_eval: --model is required\n" << kUsage;
    return 2;
  }
  return customop::examples::run_reporting_errors("digits_load_and_eval",
                                                  [&] { return run(flags); });
}
