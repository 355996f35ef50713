// CPU kernel of customop::bias_gelu_backward: grad_input = g * gelu'(x + b) and grad_bias =
// grad_input summed over the rows, in one pass over g and x, vectorized (at::vec::Vectorized;
// float gelu' inline, cpu/vec_math.h). Built once per instruction set (cpu/cpu_dispatch.h);
// the default build holds the entry.
//
// Threads (at::parallel_for), deterministic for a given thread count: with at least 4 rows
// per thread, chunks of whole rows (cpu/row_sums.h); with fewer (a few long rows), chunks of
// columns across every row, each column summed by one thread in row order.

#include "cpu/cpu_dispatch.h"
#include "cpu/row_sums.h"
#include "cpu/vec_io.h"
#include "cpu/vec_math.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace customop::ops::cpu {

/// One kernel call: contiguous grad, input and grad_input [rows, cols], bias and grad_bias
/// [cols], all of `dtype`.
struct BiasGeluBackwardCpuParams {
  const void* grad;       // [rows, cols]
  const void* input;      // [rows, cols]
  const void* bias;       // [cols]
  void* grad_input;       // [rows, cols]
  void* grad_bias;        // [cols]
  int64_t rows;           // N, every leading dim folded in
  int64_t cols;           // D
  bool tanh;              // false: exact erf form; true: tanh approximation
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (computes in acc_t)
};

CUSTOMOP_CPU_DECLARE(void bias_gelu_backward_kernel(const BiasGeluBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

/// gelu'(s) per lane (formulas: bias_gelu_backward.cpp).
template <class A, bool kTanh>
inline at::vec::Vectorized<A> gelu_derivative(at::vec::Vectorized<A> s) {
  using Vec = at::vec::Vectorized<A>;
  const Vec half(A(0.5)), one(A(1));
  if constexpr (kTanh) {
    const Vec beta(static_cast<A>(M_SQRT2 * M_2_SQRTPI * 0.5));  // sqrt(2 / pi)
    const Vec kappa(A(0.044715));
    const Vec s_sq = s * s;
    const Vec t = (beta * (s + kappa * s_sq * s)).tanh();
    const Vec du = beta * (one + Vec(A(3)) * kappa * s_sq);
    return half * (one + t) + half * s * (one - t * t) * du;
  } else if constexpr (std::is_same_v<A, float>) {
    return gelu_erf_derivative_f32(s);  // inline: cpu/vec_math.h
  } else {
    const Vec capped = at::vec::clamp(s, Vec(A(-40)), Vec(A(40)));  // e is 0 beyond
    return half * (one + (s * Vec(A(M_SQRT1_2))).erf()) +
           capped * (s * s * Vec(A(-0.5))).exp() * Vec(A(0.5 * M_2_SQRTPI * M_SQRT1_2));
  }
}

/// acc[0, kLanes) += v.
template <class A>
inline void accumulate(A* acc, const at::vec::Vectorized<A>& v) {
  (at::vec::Vectorized<A>::loadu(acc) + v).store(acc);
}

/// One piece of one row, n elements: gi = g * gelu'(round(x + b)), acc += gi (acc_t, before
/// gi's rounding to T); b widened to acc_t once per call. Two vectors per step (one 16-bit
/// conversion serves both); the rest one vector at a time, a tail with partial loads and stores.
/// Every element takes the same arithmetic wherever it falls.
template <class T, bool kTanh>
void segment(const T* g, const T* x, const acc_t<T>* b, T* gi, acc_t<T>* acc, int64_t n) {
  using IO = VecIO<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  int64_t j = 0;
  for (; j + 2 * kV <= n; j += 2 * kV) {
    const auto [x0, x1] = IO::load2(x + j);
    const Vec b0 = Vec::loadu(b + j), b1 = Vec::loadu(b + j + kV);
    const auto [g0, g1] = IO::load2(g + j);
    const auto [s0, s1] = IO::round2(x0 + b0, x1 + b1);
    const Vec v0 = g0 * gelu_derivative<acc_t<T>, kTanh>(s0);
    const Vec v1 = g1 * gelu_derivative<acc_t<T>, kTanh>(s1);
    IO::store2(v0, v1, gi + j);
    accumulate(acc + j, v0);
    accumulate(acc + j + kV, v1);
  }
  for (; j < n; j += kV) {
    const int64_t r = std::min(kV, n - j);
    const Vec s = IO::round(IO::load(x + j, r) + Vec::loadu(b + j, static_cast<int>(r)));
    const Vec v = IO::load(g + j, r) * gelu_derivative<acc_t<T>, kTanh>(s);
    IO::store(v, gi + j, r);
    if (r == kV) {
      accumulate(acc + j, v);
    } else {
      (Vec::loadu(acc + j, static_cast<int>(r)) + v).store(acc + j, static_cast<int>(r));
    }
  }
}

template <class T, bool kTanh>
void run(const BiasGeluBackwardCpuParams& p) {
  using A = acc_t<T>;
  const T* g = static_cast<const T*>(p.grad);
  const T* x = static_cast<const T*>(p.input);
  T* gi = static_cast<T*>(p.grad_input);
  T* gb = static_cast<T*>(p.grad_bias);
  const int64_t rows = p.rows, cols = p.cols;
  std::unique_ptr<A[]> bias_storage;
  const A* b = widened(static_cast<const T*>(p.bias), cols, bias_storage);
  const int64_t threads = at::get_num_threads();
  if (rows >= 4 * threads) {
    const std::unique_ptr<A[]> sums = uninitialized<A>(cols);
    for_rows_summing_columns(rows, cols, sums.get(), [&](int64_t r, A* acc) {
      segment<T, kTanh>(g + r * cols, x + r * cols, b, gi + r * cols, acc, cols);
    });
    for (int64_t j = 0; j < cols; ++j) gb[j] = static_cast<T>(sums[static_cast<size_t>(j)]);
  } else {
    // Columns per chunk, every row: each column's sum stays with one thread.
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(rows, 1));
    at::parallel_for(0, cols, grain, [&](int64_t j0, int64_t j1) {
      const std::unique_ptr<A[]> acc = uninitialized<A>(j1 - j0), block = uninitialized<A>(j1 - j0);
      {
        BlockedSum<A> sum(acc.get(), block.get(), j1 - j0);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t o = r * cols + j0;
          segment<T, kTanh>(g + o, x + o, b + j0, gi + o, sum.next(), j1 - j0);
        }
      }
      for (int64_t j = j0; j < j1; ++j) gb[j] = static_cast<T>(acc[static_cast<size_t>(j - j0)]);
    });
  }
}

template <class T>
void run(const BiasGeluBackwardCpuParams& p) {
  if (p.tanh) {
    run<T, true>(p);
  } else {
    run<T, false>(p);
  }
}

}  // namespace

void bias_gelu_backward_kernel(const BiasGeluBackwardCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "detail/bias_gelu.h"

namespace customop::ops::detail {

void bias_gelu_backward_cpu(const BiasGeluBackwardArgs& a, const BiasGeluBackwardResult& out) {
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  const at::Tensor b = a.bias.contiguous();
  const at::Tensor& grad_input = std::get<0>(out);
  const at::Tensor& grad_bias = std::get<1>(out);
  const int64_t d = x.size(-1);
  const cpu::BiasGeluBackwardCpuParams p{g.const_data_ptr(),
                                         x.const_data_ptr(),
                                         b.const_data_ptr(),
                                         grad_input.mutable_data_ptr(),
                                         grad_bias.mutable_data_ptr(),
                                         d == 0 ? 0 : x.numel() / d,
                                         d,
                                         a.approximate == "tanh",
                                         x.scalar_type()};
  if (d == 0) return;
  if (x.numel() == 0) {
    grad_bias.zero_();  // no rows: the sum over them is 0
    return;
  }
  [&] { CUSTOMOP_CPU_DISPATCH(bias_gelu_backward_kernel, p) }();
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
