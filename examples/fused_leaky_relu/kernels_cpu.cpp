#include "kernels.h"

namespace flrelu {

template <class T>
void forward_cpu(const ForwardParams<T>& p) {
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t c = 0; c < p.channels; ++c) {
      const int64_t base = (o * p.channels + c) * p.inner;
      for (int64_t i = 0; i < p.inner; ++i) {
        const T s = p.x[base + i] + p.bias[c];
        p.out[base + i] = (s > T(0) ? s : s * p.negative_slope) * p.scale;
      }
    }
  }
}

template <class T>
void backward_cpu(const BackwardParams<T>& p) {
  for (int64_t c = 0; c < p.channels; ++c) p.grad_bias[c] = T(0);
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t c = 0; c < p.channels; ++c) {
      const int64_t base = (o * p.channels + c) * p.inner;
      T sum = T(0);
      for (int64_t i = 0; i < p.inner; ++i) {
        const T slope = p.out[base + i] > T(0) ? T(1) : p.negative_slope;
        const T g = p.grad[base + i] * p.scale * slope;
        p.grad_x[base + i] = g;
        sum += g;
      }
      p.grad_bias[c] += sum;
    }
  }
}

template void forward_cpu<float>(const ForwardParams<float>&);
template void forward_cpu<double>(const ForwardParams<double>&);
template void backward_cpu<float>(const BackwardParams<float>&);
template void backward_cpu<double>(const BackwardParams<double>&);

}  // namespace flrelu
