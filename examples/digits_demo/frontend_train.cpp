// Trains the digits model as a C++ torch::nn::Module whose forward calls the customop ops
// through their args structs (customop::ops::*_op()), with torch::optim::Adam on the split
// train.py exported. Same architecture and recipe as train.py's DigitsNet.

#include "demo_common.h"

#include <customop/ops/bias_gelu.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unordered_set>

namespace {

namespace ops = customop::ops;

constexpr const char* kUsage =
    "usage: digits_frontend_train --data PATH [--out DIR] [--epochs N] [--min-accuracy A]\n"
    "                             [--autocast none|bfloat16]\n"
    "  --data          the split train.py exported (digits_data.pt)\n"
    "  --out           where losses_frontend.csv and frontend_train.json go (default: .)\n"
    "  --epochs        training epochs (default 40, as train.py)\n"
    "  --min-accuracy  fail (exit 1) below this held-out accuracy (default 0.95)\n"
    "  --autocast      bfloat16: forward and loss under at::autocast (CPU, bfloat16), backward\n"
    "                  and the optimizer step outside; files get the suffix _autocast\n";

// The recipe of train.py; change both together.
constexpr int64_t kSeed = 0;
constexpr int64_t kBatch = 64;
constexpr double kLr = 3e-3;

/// 8x8 digit [N, 64] -> class probabilities [N, 10]: Linear -> bias_gelu(tanh) -> rms_norm ->
/// Linear -> maxout over pairs (max_along) -> Linear -> masked_softmax.
struct DigitsNetImpl : torch::nn::Module {
  static constexpr int64_t kHidden = 128, kFeatures = 64, kPieces = 2, kClasses = 10;

  DigitsNetImpl()
      : fc1(register_module("fc1",
                            torch::nn::Linear(torch::nn::LinearOptions(64, kHidden).bias(false)))),
        bias1(register_parameter("bias1", torch::zeros({kHidden}))),
        norm1(register_parameter("norm1", torch::ones({kHidden}))),
        fc2(register_module("fc2", torch::nn::Linear(kHidden, kFeatures * kPieces))),
        fc3(register_module("fc3", torch::nn::Linear(kFeatures, kClasses))) {}

  /// `class_mask` [N, 10] bool (optional): classes to keep in the softmax.
  at::Tensor forward(const at::Tensor& x, std::optional<at::Tensor> class_mask = std::nullopt) {
    at::Tensor h = ops::bias_gelu_op()({.input = fc1(x), .bias = bias1, .approximate = "tanh"});
    h = ops::rms_norm_op()({.input = h, .weight = norm1, .eps = 1e-6});
    h = fc2(h).view({x.size(0), kFeatures, kPieces});
    auto [values, indices] = ops::max_along_op()({.input = h, .dim = 2, .keepdim = false});
    return ops::masked_softmax_op()(
        {.input = fc3(values), .mask = std::move(class_mask), .dim = 1});
  }

  /// Mean negative log-likelihood of labels `y` [N] int64 (train.py's DigitsNet.loss).
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) {
    return torch::nll_loss(torch::log(forward(x).clamp_min(1e-12)), y);
  }

  torch::nn::Linear fc1;
  at::Tensor bias1, norm1;
  torch::nn::Linear fc2, fc3;
};
TORCH_MODULE(DigitsNet);

/// at::autocast on the CPU in `dtype` while alive (enabled = false: a no-op), as
/// torch.autocast("cpu", dtype) in Python: linear layers run in the low dtype, each customop op
/// by its declared policy (customop/autocast.h).
class CpuAutocast {
 public:
  CpuAutocast(bool enabled, c10::ScalarType dtype)
      : enabled_(enabled),
        was_(at::autocast::is_autocast_enabled(at::kCPU)),
        dtype_(at::autocast::get_autocast_dtype(at::kCPU)) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, was_);
    at::autocast::set_autocast_dtype(at::kCPU, dtype_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool enabled_, was_;
  c10::ScalarType dtype_;
};

/// Names of the autograd nodes reachable from `root` that come from customop formulas.
std::unordered_set<std::string> customop_nodes(const at::Tensor& root) {
  std::unordered_set<std::string> names;
  for (const auto& name : customop::examples::autograd_node_names(root)) {
    if (name.find("customop") != std::string::npos) names.insert(name);
  }
  return names;
}

int run(const std::map<std::string, std::string>& flags) {
  at::set_num_threads(1);
  const customop::examples::DemoData data(flags.at("data"));
  const at::Tensor x_tr = data.get("x_train"), y_tr = data.get("y_train");
  const at::Tensor x_te = data.get("x_test"), y_te = data.get("y_test");
  const int64_t epochs = std::stoll(flags.at("epochs"));
  const std::filesystem::path out = flags.at("out");
  std::filesystem::create_directories(out);
  const std::string autocast = flags.at("autocast");
  if (autocast != "none" && autocast != "bfloat16") {
    throw std::invalid_argument("--autocast must be none or bfloat16, got '" + autocast + "'");
  }
  const bool mixed = autocast == "bfloat16";
  const std::string suffix = mixed ? "_autocast" : "";

  torch::manual_seed(kSeed);
  DigitsNet model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(kLr));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(kSeed);
  std::ofstream csv(out / ("losses_frontend" + suffix + ".csv"));
  csv << "epoch,train_loss,test_accuracy\n";

  std::unordered_set<std::string> backward_nodes;
  double test_acc = 0.0, train_loss = 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    const at::Tensor perm = torch::randperm(x_tr.size(0), gen);
    double total = 0.0;
    for (int64_t i = 0; i < x_tr.size(0); i += kBatch) {
      const at::Tensor idx = perm.slice(0, i, std::min(i + kBatch, x_tr.size(0)));
      at::Tensor loss;
      {
        CpuAutocast ac(mixed, at::kBFloat16);
        loss = model->loss(x_tr.index_select(0, idx), y_tr.index_select(0, idx));
      }
      if (backward_nodes.empty()) backward_nodes = customop_nodes(loss);
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.item<double>() * static_cast<double>(idx.size(0));
    }
    train_loss = total / static_cast<double>(x_tr.size(0));
    model->eval();
    {
      torch::NoGradGuard no_grad;
      CpuAutocast ac(mixed, at::kBFloat16);
      test_acc = customop::examples::accuracy(model->forward(x_te), y_te);
    }
    csv << epoch << "," << train_loss << "," << test_acc << "\n";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::cout << "C++ frontend model" << (mixed ? " (at::autocast cpu bfloat16)" : "")
            << ": held-out accuracy " << test_acc << " (" << x_te.size(0) << " images), " << epochs
            << " epochs in " << seconds << " s, final train loss " << train_loss << "\n"
            << "autograd nodes from customop's registered backward formulas:";
  for (const auto& name : backward_nodes) std::cout << "\n  " << name;
  std::cout << "\n";
  const bool ok = test_acc >= std::stod(flags.at("min-accuracy")) && !backward_nodes.empty();
  customop::examples::write_summary(
      (out / ("frontend_train" + suffix + ".json")).string(),
      {{"test_accuracy", test_acc},
       {"train_seconds", seconds},
       {"epochs", static_cast<double>(epochs)},
       {"final_train_loss", train_loss},
       {"customop_backward_node_kinds", static_cast<double>(backward_nodes.size())},
       {"ok", ok ? "yes" : "no"}});
  if (!ok)
    std::cout << "FAIL: accuracy below " << flags.at("min-accuracy")
              << " or no customop backward\n";
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = customop::examples::parse_flags(argc, argv, kUsage,
                                                     {{"data", ""},
                                                      {"out", "."},
                                                      {"epochs", "40"},
                                                      {"min-accuracy", "0.95"},
                                                      {"autocast", "none"}});
  if (flags.at("data").empty()) {
    std::cerr << "digits_frontend_train: --data is required\n" << kUsage;
    return 2;
  }
  try {
    return run(flags);
  } catch (const c10::Error& e) {
    std::cerr << "digits_frontend_train: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "digits_frontend_train: " << e.what() << "\n";
    return 1;
  }
}
