#pragma once
// Column sums over the rows of a [rows, cols] pass, for the backward kernels whose weight or
// bias grad sums a per-element product over every row (bias_gelu_backward, rms_norm_backward):
// blocked float sums, and a parallel loop over chunks of whole rows that adds them in a fixed
// order. Included by the kernel files of every build (cpu/cpu_dispatch.h): no static data here.

#include "cpu/cpu_dispatch.h"
#include "cpu/vec_io.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace customop::ops::cpu {
namespace CUSTOMOP_CPU_CAPABILITY {

/// Column sums over many rows, blocked: rows add into a block kBlockRows at a time and each
/// block's sum is added to `total` (zeroed first), so a float32 sum of n rows errs by about
/// kBlockRows + n / kBlockRows roundings rather than n. The first block adds straight into
/// `total` (0 + its sum is its sum, bit for bit) and `block` is zeroed only when a second block
/// starts, so a sum of at most kBlockRows rows zeroes one buffer. The destructor adds the last
/// block. `total` and `block` may hold anything on entry.
template <class A>
class BlockedSum {
 public:
  static constexpr int64_t kBlockRows = 64;
  BlockedSum(A* total, A* block, int64_t cols)
      : total_(total), block_(block), current_(total), cols_(cols) {
    std::fill(total_, total_ + cols_, A(0));
  }
  BlockedSum(const BlockedSum&) = delete;
  BlockedSum& operator=(const BlockedSum&) = delete;
  ~BlockedSum() {
    if (current_ == block_) flush();
  }
  /// The buffer the next row adds into.
  A* next() {
    if (rows_++ == kBlockRows) {
      if (current_ == total_) {
        std::fill(block_, block_ + cols_, A(0));
        current_ = block_;
      } else {
        flush();
      }
      rows_ = 1;
    }
    return current_;
  }

 private:
  void flush() {
    for (int64_t j = 0; j < cols_; ++j) {
      total_[j] += block_[j];
      block_[j] = A(0);
    }
  }
  A* total_;
  A* block_;
  A* current_;
  int64_t cols_;
  int64_t rows_ = 0;
};

/// `n` elements of A, not initialised (the callers write before they read).
template <class A>
std::unique_ptr<A[]> uninitialized(int64_t n) {
  return std::unique_ptr<A[]>(new A[static_cast<size_t>(n)]);
}

/// src[0, n) in A: src itself when T is A, else a widened copy held in `storage`.
template <class T, class A>
const A* widened(const T* src, int64_t n, std::unique_ptr<A[]>& storage) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else {
    storage = uninitialized<A>(n);
    std::copy(src, src + n, storage.get());
    return storage.get();
  }
}

/// Calls row(r, acc) for every r in [0, rows), where row adds its contribution to the column
/// sums into acc[0, cols), and writes the sums to sums[0, cols). Threads (at::parallel_for)
/// take chunks of whole rows, at most one per thread and none under kGrainSize elements; each
/// chunk sums into a row of its own (BlockedSum), and the chunks' rows are added in chunk
/// order, so the result depends on the thread count only.
template <class A, class RowFn>
void for_rows_summing_columns(int64_t rows, int64_t cols, A* sums, const RowFn& row) {
  const int64_t threads = at::get_num_threads();
  const int64_t chunks = std::max<int64_t>(
      1, std::min({threads, rows, rows * cols / std::max<int64_t>(kGrainSize, cols)}));
  const int64_t per = (rows + chunks - 1) / chunks;
  const std::unique_ptr<A[]> partial = uninitialized<A>(chunks * cols);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    const std::unique_ptr<A[]> block = uninitialized<A>(cols);
    for (int64_t c = c0; c < c1; ++c) {
      BlockedSum<A> sum(partial.get() + c * cols, block.get(), cols);
      for (int64_t r = c * per; r < std::min(rows, (c + 1) * per); ++r) row(r, sum.next());
    }
    stream_fence();  // rows that streamed their outputs (VecIO::store_stream)
  });
  for (int64_t j = 0; j < cols; ++j) {
    A s = partial[static_cast<size_t>(j)];
    for (int64_t c = 1; c < chunks; ++c) s += partial[static_cast<size_t>(c * cols + j)];
    sums[j] = s;
  }
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu
