// CPU kernel of customop::rms_norm_backward. Per row of x (D elements, in cache for both
// passes): pass 1 sums x^2 and g w x, giving r = rsqrt(mean(x^2) + eps) and
// c = r^3 mean(g w x); pass 2 writes grad_input = r g w - c x and adds g x r to grad_weight's
// column sums (cpu/row_sums.h: chunks of whole rows over the threads, deterministic for a given
// thread count). One read of g and x and one write of grad_input from memory, where the ATen
// formula made eleven passes. grad_input goes out by non-temporal stores as cpu/stream_choice.h
// decides from the call's footprint. Vectorized
// (at::vec::Vectorized); built once per instruction set (cpu/cpu_dispatch.h); the default build
// holds the entry.

#include "cpu/cpu_dispatch.h"
#include "cpu/row_sums.h"
#include "cpu/vec_io.h"

#include <ATen/cpu/vec/vec.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace customop::ops::cpu {

/// One kernel call: contiguous grad, input and grad_input [rows, cols], weight and
/// grad_weight [cols], all of `dtype`.
struct RmsNormBackwardCpuParams {
  const void* grad;       // [rows, cols]
  const void* input;      // [rows, cols]
  const void* weight;     // [cols]
  void* grad_input;       // [rows, cols]
  void* grad_weight;      // [cols]
  int64_t rows;           // N, every leading dim folded in
  int64_t cols;           // D
  double eps;             // added to mean(x^2)
  c10::ScalarType dtype;  // kDouble, kFloat, kHalf, kBFloat16 (computes in acc_t)
  bool stream = false;    // grad_input by non-temporal stores (cpu/stream_choice.h)
};

CUSTOMOP_CPU_DECLARE(void rms_norm_backward_kernel(const RmsNormBackwardCpuParams& p))

namespace CUSTOMOP_CPU_CAPABILITY {
namespace {

/// The lanes of v added up.
template <class A>
A lane_sum(const at::vec::Vectorized<A>& v) {
  alignas(64) A lanes[at::vec::Vectorized<A>::size()];
  v.store(lanes);
  A s = 0;
  for (int64_t l = 0; l < at::vec::Vectorized<A>::size(); ++l) s += lanes[l];
  return s;
}

/// One row: g, x, gi [d]; w [d] widened to acc_t once per call; acc += g x r. kStream: gi by
/// VecIO::store_stream. Pass 2, which reads the row from L1, prefetches the next row's g and x
/// (g_next, x_next; null for none).
template <class T, bool kStream>
void row(const T* g, const T* x, const acc_t<T>* w, T* gi, acc_t<T>* acc, int64_t d, acc_t<T> eps,
         const T* g_next, const T* x_next) {
  using IO = VecIO<T>;
  using A = acc_t<T>;
  using Vec = typename IO::Vec;
  constexpr int64_t kV = IO::kLanes;
  Vec ss0(A(0)), ss1(A(0)), dot0(A(0)), dot1(A(0));
  int64_t j = 0;
  for (; j + 2 * kV <= d; j += 2 * kV) {
    const Vec x0 = IO::load(x + j), x1 = IO::load(x + j + kV);
    const Vec gw0 = IO::load(g + j) * Vec::loadu(w + j);
    const Vec gw1 = IO::load(g + j + kV) * Vec::loadu(w + j + kV);
    ss0 = at::vec::fmadd(x0, x0, ss0);
    ss1 = at::vec::fmadd(x1, x1, ss1);
    dot0 = at::vec::fmadd(gw0, x0, dot0);
    dot1 = at::vec::fmadd(gw1, x1, dot1);
  }
  for (; j < d; j += kV) {  // zero-filled partial loads: the tail adds nothing
    const int64_t n = std::min(kV, d - j);
    const Vec xv = IO::load(x + j, n);
    ss0 = at::vec::fmadd(xv, xv, ss0);
    dot0 = at::vec::fmadd(IO::load(g + j, n) * Vec::loadu(w + j, static_cast<int>(n)), xv, dot0);
  }
  const A mean_sq = lane_sum(ss0 + ss1) / static_cast<A>(d);
  const A r = A(1) / std::sqrt(mean_sq + eps);
  const A c = r * r * r * lane_sum(dot0 + dot1) / static_cast<A>(d);
  const Vec rv(r), cv(c);
  for (j = 0; j < d; j += kV) {
    const int64_t n = std::min(kV, d - j);
    const Vec gv = IO::load(g + j, n), xv = IO::load(x + j, n);
    const Vec wv = Vec::loadu(w + j, static_cast<int>(n));
    if (g_next != nullptr) {
      prefetch_line(g_next + j);
      prefetch_line(x_next + j);
    }
    const Vec out = at::vec::fmsub(rv * gv, wv, cv * xv);  // r g w - c x
    if (kStream && n == kV) {
      IO::store_stream(out, gi + j);
    } else {
      IO::store(out, gi + j, n);
    }
    const Vec add = gv * xv * rv;
    if (n == kV) {
      (Vec::loadu(acc + j) + add).store(acc + j);
    } else {
      (Vec::loadu(acc + j, static_cast<int>(n)) + add).store(acc + j, static_cast<int>(n));
    }
  }
}

template <class T>
void run(const RmsNormBackwardCpuParams& p) {
  using A = acc_t<T>;
  const T* g = static_cast<const T*>(p.grad);
  const T* x = static_cast<const T*>(p.input);
  T* gi = static_cast<T*>(p.grad_input);
  const int64_t rows = p.rows, cols = p.cols;
  std::unique_ptr<A[]> w_storage;
  const A* w = widened(static_cast<const T*>(p.weight), cols, w_storage);
  // The column sums go straight to grad_weight when it holds A; through a buffer otherwise.
  T* gw = static_cast<T*>(p.grad_weight);
  std::unique_ptr<A[]> sums_storage;
  A* sums = nullptr;
  if constexpr (std::is_same_v<T, A>) {
    sums = gw;
  } else {
    sums_storage = uninitialized<A>(cols);
    sums = sums_storage.get();
  }
  const auto rows_with = [&]<bool kStream>() {
    for_rows_summing_columns(rows, cols, sums, [&](int64_t r, A* acc) {
      const bool more = r + 1 < rows;
      row<T, kStream>(g + r * cols, x + r * cols, w, gi + r * cols, acc, cols,
                      static_cast<A>(p.eps), more ? g + (r + 1) * cols : nullptr,
                      more ? x + (r + 1) * cols : nullptr);
    });
  };
  if (p.stream) {
    rows_with.template operator()<true>();
  } else {
    rows_with.template operator()<false>();
  }
  if constexpr (!std::is_same_v<T, A>) {
    for (int64_t j = 0; j < cols; ++j) gw[j] = static_cast<T>(sums[j]);
  }
}

}  // namespace

void rms_norm_backward_kernel(const RmsNormBackwardCpuParams& p) {
  dispatch_floating(p.dtype, [&]<class T>(std::type_identity<T>) { run<T>(p); });
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu

#if defined(CUSTOMOP_CPU_ENTRY)

#include "cpu/stream_choice.h"
#include "detail/rms_norm.h"

namespace customop::ops::detail {

void rms_norm_backward_cpu(const RmsNormBackwardArgs& a, const RmsNormBackwardResult& out) {
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const at::Tensor& grad_input = std::get<0>(out);
  const at::Tensor& grad_weight = std::get<1>(out);
  const int64_t d = x.size(-1);
  if (d == 0) return;
  if (x.numel() == 0) {
    grad_weight.zero_();  // no rows: the sum over them is 0
    return;
  }
  cpu::RmsNormBackwardCpuParams p{g.const_data_ptr(),
                                  x.const_data_ptr(),
                                  w.const_data_ptr(),
                                  grad_input.mutable_data_ptr(),
                                  grad_weight.mutable_data_ptr(),
                                  x.numel() / d,
                                  d,
                                  a.eps,
                                  x.scalar_type()};
  // g and x read, grad_input written
  static cpu::StreamChoice choice(cpu::stream_rule());
  cpu::timed_stream_call(choice, cpu::stream_footprint(3, x.numel(), x.scalar_type()),
                         [&](bool stream) {
                           p.stream = stream;
                           CUSTOMOP_CPU_DISPATCH(rms_norm_backward_kernel, p)
                         });
}

}  // namespace customop::ops::detail

#endif  // defined(CUSTOMOP_CPU_ENTRY)
