#pragma once
// The CPU kernels' templates (torch-free), instantiated in kernels_cpu.cpp (float, double) and
// kernels_cpu_16bit.cpp (c10::Half, c10::BFloat16).

#include "kernels.h"

#include <vector>

namespace flrelu {

template <class T>
void forward_cpu(const ForwardParams<T>& p) {
  using A = acc_t<T>;
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t c = 0; c < p.channels; ++c) {
      const int64_t base = (o * p.channels + c) * p.inner;
      const A b = static_cast<A>(p.bias[c]);
      for (int64_t i = 0; i < p.inner; ++i) {
        const A s = static_cast<A>(p.x[base + i]) + b;
        p.out[base + i] = static_cast<T>((s > A(0) ? s : s * p.negative_slope) * p.scale);
      }
    }
  }
}

template <class T>
void backward_cpu(const BackwardParams<T>& p) {
  using A = acc_t<T>;
  // One accumulator per channel over all of outer and inner, rounded to T once at the end.
  std::vector<A> sums(static_cast<std::size_t>(p.channels), A(0));
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t c = 0; c < p.channels; ++c) {
      const int64_t base = (o * p.channels + c) * p.inner;
      A sum = A(0);
      for (int64_t i = 0; i < p.inner; ++i) {
        const A slope = static_cast<A>(p.out[base + i]) > A(0) ? A(1) : p.negative_slope;
        const A g = static_cast<A>(p.grad[base + i]) * p.scale * slope;
        p.grad_x[base + i] = static_cast<T>(g);
        sum += g;
      }
      sums[static_cast<std::size_t>(c)] += sum;
    }
  }
  for (int64_t c = 0; c < p.channels; ++c) {
    p.grad_bias[c] = static_cast<T>(sums[static_cast<std::size_t>(c)]);
  }
}

}  // namespace flrelu
