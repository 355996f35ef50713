#pragma once
// Column sums over the rows of a [rows, cols] pass, for the backward kernels whose weight or
// bias grad sums a per-element product over every row (bias_gelu_backward, rms_norm_backward):
// blocked float sums, and a parallel loop over chunks of whole rows that adds them in a fixed
// order. Included by the kernel files of every build (cpu/cpu_dispatch.h): no static data here.

#include "cpu/cpu_dispatch.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace customop::ops::cpu {
namespace CUSTOMOP_CPU_CAPABILITY {

/// Column sums over many rows, blocked: rows add into `block` kBlockRows at a time and each
/// block's sum is added to `total` (zeroed first), so a float32 sum of n rows errs by about
/// kBlockRows + n / kBlockRows roundings rather than n. The destructor adds the last block.
template <class A>
class BlockedSum {
 public:
  static constexpr int64_t kBlockRows = 64;
  BlockedSum(A* total, A* block, int64_t cols) : total_(total), block_(block), cols_(cols) {
    std::fill(total_, total_ + cols_, A(0));
    std::fill(block_, block_ + cols_, A(0));
  }
  BlockedSum(const BlockedSum&) = delete;
  BlockedSum& operator=(const BlockedSum&) = delete;
  ~BlockedSum() { flush(); }
  /// The buffer the next row adds into.
  A* next() {
    if (rows_++ == kBlockRows) {
      flush();
      rows_ = 1;
    }
    return block_;
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
  int64_t cols_;
  int64_t rows_ = 0;
};

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
  std::vector<A> partial(static_cast<size_t>(chunks * cols));
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<A> block(static_cast<size_t>(cols));
    for (int64_t c = c0; c < c1; ++c) {
      BlockedSum<A> sum(partial.data() + c * cols, block.data(), cols);
      for (int64_t r = c * per; r < std::min(rows, (c + 1) * per); ++r) row(r, sum.next());
    }
  });
  for (int64_t j = 0; j < cols; ++j) {
    A s = partial[static_cast<size_t>(j)];
    for (int64_t c = 1; c < chunks; ++c) s += partial[static_cast<size_t>(c * cols + j)];
    sums[j] = s;
  }
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu
