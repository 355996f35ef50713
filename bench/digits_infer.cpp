// Inference latency of the digits model from C++: the TorchScript model (torch::jit::load)
// vs the torch.export + AOTInductor package (AOTIModelPackageLoader), same weights, same
// inputs, one ATen thread, randomly interleaved rounds in one process. Prints one JSON object.
//
//   digits_infer --torchscript digits_model.pt --aoti digits_model.pt2
//                --ops-library libcustomop_ops.so [--rounds 15] [--calls 200]
// Per batch size (1 and 64): per round, `calls` forward calls of each model back to back
// (order shuffled per round); the figure is the median over rounds of the mean microseconds
// per call. Outputs of the two models are compared once per batch size (max |diff|).

#include "demo_common.h"
#include "ops_model_loader.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = customop::examples::parse_flags(
      argc, argv,
      "usage: digits_infer --torchscript PATH --aoti PATH --ops-library PATH [--rounds N] "
      "[--calls N]\n",
      {{"torchscript", ""}, {"aoti", ""}, {"ops-library", ""}, {"rounds", "15"}, {"calls", "200"}});
  try {
    customop::examples::load_ops_library(flags.at("ops-library"));
    at::set_num_threads(1);
    torch::jit::Module scripted = customop::examples::load_scripted_model(flags.at("torchscript"));
    scripted.eval();
    auto aoti = customop::examples::load_aoti_package(flags.at("aoti"));
    const int rounds = std::stoi(flags.at("rounds"));
    const int calls = std::stoi(flags.at("calls"));
    std::mt19937 rng(0);
    std::cout << "{";
    bool first = true;
    for (int64_t batch : {1, 64}) {
      const at::Tensor x = at::rand({batch, 64});
      c10::InferenceMode guard;
      const at::Tensor a = scripted.forward({x}).toTensor();
      const at::Tensor b = aoti->run({x}).at(0);
      const double diff = (a - b).abs().max().item<double>();
      std::vector<double> ts_us, aoti_us;
      for (int r = 0; r < rounds; ++r) {
        std::vector<int> order{0, 1};
        std::shuffle(order.begin(), order.end(), rng);
        for (int which : order) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int c = 0; c < calls; ++c) {
            if (which == 0) {
              scripted.forward({x});
            } else {
              aoti->run({x});
            }
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() /
              calls;
          (which == 0 ? ts_us : aoti_us).push_back(us);
        }
      }
      std::cout << (first ? "" : ", ") << "\"batch_" << batch
                << "\": {\"torchscript_us\": " << median(ts_us)
                << ", \"aoti_us\": " << median(aoti_us) << ", \"max_abs_diff\": " << diff << "}";
      first = false;
    }
    std::cout << "}\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "digits_infer: " << e.what() << "\n";
    return 1;
  }
}
