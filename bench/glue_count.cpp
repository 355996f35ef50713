// Glue overhead, instruction counts: runs each variant of glue_variants.h for N iterations
// and brackets exactly those iterations with callgrind client requests, so
//   valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no glue_count 200
// writes one dump per variant x size ("<variant>/<n>") holding only the loop's instructions
// (the warm-up, torch's start-up and the tensor set-up are not collected). Outside valgrind
// the requests are no-ops and it just runs. bench/run divides the dumps' totals by N.
// Usage: glue_count [ITERATIONS=200]

#include "glue_variants.h"

#include <valgrind/callgrind.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  namespace cb = customop::bench;
  const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 200;
  if (iterations <= 0) {
    std::cerr << "glue_count: ITERATIONS must be a positive integer, got '" << argv[1] << "'\n";
    return 2;
  }
  at::set_num_threads(1);
  CALLGRIND_START_INSTRUMENTATION;
  for (const int64_t n : {int64_t{1}, int64_t{4096}}) {
    for (const auto& v : cb::variants()) {
      auto x = torch::randn({n}).requires_grad_();
      auto g = torch::ones({n});
      // Warm-up: first-call costs (op definition, dispatcher caches, allocator) stay out.
      for (int i = 0; i < 20; ++i) cb::step(v.forward, x, g);
      CALLGRIND_TOGGLE_COLLECT;
      for (long i = 0; i < iterations; ++i) cb::step(v.forward, x, g);
      CALLGRIND_TOGGLE_COLLECT;
      const std::string name = std::string(v.name) + "/" + std::to_string(n);
      CALLGRIND_DUMP_STATS_AT(name.c_str());
      std::cout << name << " " << iterations << "\n";
    }
  }
  return 0;
}
