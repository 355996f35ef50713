// Glue overhead, wall time: forward + backward of y = x * alpha on [1] and [4096] float32
// through the six variants of glue_variants.h. Run all in one process (bench/run prints the
// ratios); never compare separate runs. glue_count.cpp counts instructions of the same loops.

#include "glue_variants.h"

#include <benchmark/benchmark.h>

namespace {

namespace cb = customop::bench;

void run(benchmark::State& state, const cb::Forward& forward) {
  at::set_num_threads(1);
  const auto n = state.range(0);
  auto x = torch::randn({n}).requires_grad_();
  auto g = torch::ones({n});
  for (auto _ : state) {
    at::Tensor y = forward(x);
    torch::autograd::backward({y}, {g});
    benchmark::DoNotOptimize(x.grad().data_ptr());
    x.mutable_grad().reset();
  }
}

[[maybe_unused]] const bool registered = [] {
  for (const auto& v : cb::variants()) {
    benchmark::RegisterBenchmark(("BM_" + std::string(v.name)).c_str(),
                                 [f = v.forward](benchmark::State& s) { run(s, f); })
        ->Arg(1)
        ->Arg(4096);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
