// customop::max_along_backward: its kernels against ATen's zeros + scatter (last, middle and
// first dims), strides, thread splits, errors (an index out of range included); and
// max_along's backward running through it. Its own backward and JVP by finite differences on
// its samples: registered_ops_gradcheck_test.cpp.

#include <customop/ops/max_along.h>
#include <customop/ops/max_along_backward.h>

#include "support/device_params.h"
#include "support/error_message.h"
#include "support/op_calls.h"
#include "support/tensor_assertions.h"

#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

using customop::ops::MaxAlongBackwardArgs;
using customop::testing::DeviceTest;
using customop::testing::error_message;
using customop::testing::OpCalls;
using customop::testing::tensors_equal;
using ::testing::HasSubstr;

at::Tensor max_backward(const at::Tensor& g, const at::Tensor& idx, int64_t dim, int64_t size) {
  return customop::ops::max_along_backward_op()(
      MaxAlongBackwardArgs{.grad = g, .indices = idx, .dim = dim, .size = size});
}

/// grad and indices of `shape` with size 1 at dim (indices in [0, size)) and ATen's answer.
struct ScatterCase {
  at::Tensor grad, indices, want;
};
ScatterCase scatter_case(std::vector<int64_t> shape, int64_t dim, const at::TensorOptions& o) {
  const int64_t d = dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim;
  const int64_t size = shape[static_cast<size_t>(d)];
  shape[static_cast<size_t>(d)] = 1;
  const auto g = at::randn(shape, o);
  const auto idx = at::randint(size, shape, o.dtype(at::kLong));
  std::vector<int64_t> full = shape;
  full[static_cast<size_t>(d)] = size;
  return {g, idx, at::zeros(full, o).scatter_(d, idx, g)};
}

class MaxAlongBackwardDevice : public DeviceTest {};

// Exact: each element is g or 0. Rows (inner == 1) short and long; dims with inner > 1 below
// and above a block.
TEST_P(MaxAlongBackwardDevice, MatchesZerosAndScatter) {
  torch::manual_seed(101);
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{4099, 37}, -1}, {{3, 100003}, 1}, {{2, 5, 64}, 1},    {{64, 33}, 0},
      {{17}, 0},        {{1}, 0},         {{2, 700, 333}, 1}, {{3, 9, 40000}, 1}};
  for (const auto& [shape, dim] : cases) {
    SCOPED_TRACE("shape " + c10::str(at::IntArrayRef(shape)) + " dim " + std::to_string(dim));
    const auto c = scatter_case(shape, dim, p().options());
    const auto got = max_backward(c.grad, c.indices, dim, c.want.size(dim));
    EXPECT_EQ(got.scalar_type(), p().dtype);
    EXPECT_TRUE(tensors_equal(got, c.want));
  }
}

TEST_P(MaxAlongBackwardDevice, StridesAndThreadsDoNotMatter) {
  torch::manual_seed(102);
  const auto g = at::randn({1, 130}, p().options()).slice(1, 0, 130, 2);
  const auto idx = at::randint(40, {65, 1}, p().options().dtype(at::kLong)).t();
  const auto got = max_backward(g, idx, 0, 40);
  EXPECT_TRUE(tensors_equal(got, max_backward(g.contiguous(), idx.contiguous(), 0, 40)));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = max_backward(g, idx, 0, 40);
  at::set_num_threads(threads);
  EXPECT_TRUE(tensors_equal(got, one));
}

TEST_P(MaxAlongBackwardDevice, BadArgumentsAreRefusedByName) {
  const auto g = at::randn({2, 1}, p().options());
  const auto idx = at::zeros({2, 1}, p().options().dtype(at::kLong));
  EXPECT_THAT(error_message([&] {
                max_backward(at::randn({2, 2}, p().options()), idx, 1, 4);
              }),
              HasSubstr("max_along_backward: indices must have grad's shape [2, 2], but got "
                        "[2, 1]"));
  EXPECT_THAT(error_message([&] { max_backward(g, idx, 0, 4); }),
              HasSubstr("max_along_backward: grad must have size 1 at dim 0 (keepdim form), but "
                        "got shape [2, 1]"));
  EXPECT_THAT(error_message([&] { max_backward(g, idx.to(at::kInt), 1, 4); }),
              HasSubstr("max_along_backward: indices must be int64, but got int32"));
  EXPECT_THAT(error_message([&] { max_backward(g, idx, 1, 0); }),
              HasSubstr("max_along_backward: size must be >= 1, but got 0"));
  EXPECT_THAT(error_message([&] { max_backward(g, idx, 2, 4); }),
              HasSubstr("max_along_backward: dim must be in [-2, 1]"));
  EXPECT_THAT(error_message([&] { max_backward(g, idx, 1, int64_t{1} << 62); }),
              HasSubstr("max_along_backward: size 4611686018427387904 times grad's 2 elements is "
                        "too large an output"));
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaxAlongBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cpu_params()),
                         customop::testing::param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, MaxAlongBackwardDevice,
                         ::testing::ValuesIn(customop::testing::cuda_params()),
                         customop::testing::param_name);

// An index outside [0, size) is an IndexError naming the value and its position, on both paths
// (rows and blocks), never a write out of bounds.
TEST(MaxAlongBackward, AnIndexOutOfRangeIsRefused) {
  const auto g = at::randn({3, 1});
  auto idx = at::zeros({3, 1}, at::kLong);
  idx[2][0] = 5;
  EXPECT_THAT(error_message([&] { max_backward(g, idx, 1, 5); }),
              HasSubstr("max_along_backward: indices must be in [0, size) = [0, 5), but got 5 "
                        "at flat position 2"));
  auto idx_t = at::zeros({1, 3}, at::kLong);
  idx_t[0][1] = -1;
  EXPECT_THAT(error_message([&] { max_backward(g.t(), idx_t, 0, 4); }),
              HasSubstr("but got -1 at flat position 1"));
  try {
    max_backward(g, idx, 1, 5);
    ADD_FAILURE() << "no error";
  } catch (const c10::IndexError&) {
  }
  // Many bad indices over two threads' chunks: the lowest position is named, every time.
  const auto many = at::full({200000, 1}, 7, at::kLong);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (int run = 0; run < 5; ++run) {
    EXPECT_THAT(error_message([&] {
                  max_backward(at::randn({200000, 1}), many, 1, 5);
                }),
                HasSubstr("but got 7 at flat position 0"));
  }
  at::set_num_threads(threads);
}

// A refused call writes nothing: the .out overload's buffer keeps its contents when an index
// is out of range, on both paths (rows, inner == 1, and blocks), whichever chunk holds it.
TEST(MaxAlongBackward, AnIndexOutOfRangeLeavesTheOutBufferUnchanged) {
  const auto out_op =
      c10::Dispatcher::singleton().findSchemaOrThrow("customop::max_along_backward", "out");
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  struct Case {
    std::vector<int64_t> grad_shape;
    int64_t dim, size, bad_at;
  };
  // bad_at: a flat position of the indices; the last one lies in the second thread's chunk.
  for (const Case& c : {Case{{3, 1}, 1, 5, 2}, Case{{1, 6}, 0, 4, 0},
                        Case{{200000, 1}, 1, 3, 199999}, Case{{2, 1, 70000}, 1, 3, 139999}}) {
    SCOPED_TRACE(c.bad_at);
    const auto g = at::randn(c.grad_shape);
    auto idx = at::randint(c.size, c.grad_shape, at::kLong);
    idx.view({-1})[c.bad_at] = c.size;
    std::vector<int64_t> full = c.grad_shape;
    full[static_cast<size_t>(c.dim)] = c.size;
    const auto out = at::full(full, 3.0);
    torch::jit::Stack stack{g, idx, c.dim, c.size, out};
    EXPECT_THAT(error_message([&] { out_op.callBoxed(stack); }),
                HasSubstr("but got " + std::to_string(c.size) + " at flat position " +
                          std::to_string(c.bad_at)));
    EXPECT_TRUE(at::equal(out, at::full(full, 3.0)));
  }
  at::set_num_threads(threads);
}

// max_along's backward is this op, once per backward, for keepdim and not.
TEST(MaxAlongBackward, MaxAlongBackwardRunsThroughTheOp) {
  const OpCalls calls("customop::max_along_backward");
  for (const bool keepdim : {false, true}) {
    const auto x = at::randn({6, 9}).requires_grad_();
    const auto values = std::get<0>(customop::ops::max_along_op()(
        customop::ops::MaxAlongArgs{.input = x, .dim = 0, .keepdim = keepdim}));
    const auto g = at::randn(values.sizes());
    const auto grad = torch::autograd::grad({values}, {x}, {g})[0];
    const auto [v, i] = at::max(x.detach(), 0, keepdim);
    EXPECT_TRUE(tensors_equal(grad, at::zeros({6, 9}).scatter_(0, keepdim ? i : i.unsqueeze(0),
                                                               keepdim ? g : g.unsqueeze(0))));
  }
  EXPECT_EQ(calls.count(), 2);
}

}  // namespace
