#pragma once
// The main() of the kernel benchmark programs (kernels_cpu, backward_cpu): ATen's threads set to
// every core this machine has (ATen's default may differ under a cgroup quota;
// CUSTOMOP_BENCH_THREADS=N overrides, 1 for callgrind: one call stack holds all the work),
// Google Benchmark's own flags, and the thread count in the JSON context ("aten_threads").

#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace customop::bench {

inline int run_kernel_benchmarks(int argc, char** argv) {
  const char* threads = std::getenv("CUSTOMOP_BENCH_THREADS");
  at::set_num_threads(threads
                          ? std::max(1, std::atoi(threads))
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("aten_threads", std::to_string(at::get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace customop::bench
