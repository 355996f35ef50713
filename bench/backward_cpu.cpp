// CPU backward of each built-in op vs the backward of its ATen composite: the time of one
// torch::autograd::grad over a forward graph built once (retain_graph), float32 (and bfloat16,
// float16: "<op>@bf16", "<op>@fp16"), 1, 16 and 256 MiB of float32 input. What a training step
// pays for the op's backward: each op's is its fused backward op (customop::<op>_backward, one
// pass; weighted_sum's writes its K grads while reading the grad once), the composite's is
// ATen's kernels, one pass each.
// Names and counters as bench/kernels_cpu ("<op>/<customop|composite>/<bytes>", bytes_moved =
// the least the backward must move: the incoming grad and the saved inputs read once, the input
// grads written once), so bench/run reads both programs alike and sets them against
// kernels_cpu's copy_ of the same run. Before timing, the customop grads are checked against the
// composite's (allclose); a mismatch fails the benchmark (SkipWithError).

#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include "bench_main.h"

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace ops = customop::ops;
using Tensors = std::vector<at::Tensor>;

constexpr int64_t kD = 1024;  // row length of the row-wise ops (4 KiB of float32)
constexpr int64_t kSizes[] = {int64_t{1} << 20, int64_t{16} << 20, int64_t{256} << 20};
constexpr double kEps = 1e-6;

/// One op at one size: the differentiable inputs (leaves), the forward of each variant over
/// them (the differentiable outputs), and the bytes the backward must move.
struct Case {
  Tensors inputs;
  std::function<Tensors(const Tensors&)> customop;
  std::function<Tensors(const Tensors&)> composite;
  int64_t bytes = 0;
};

/// Bytes of one element of dtype.
int64_t elem(at::ScalarType dt) { return static_cast<int64_t>(at::elementSize(dt)); }

/// U(-2, 2) of `dtype`, requiring grad.
at::Tensor leaf(std::vector<int64_t> shape, at::ScalarType dtype) {
  return at::empty(shape, at::kFloat).uniform_(-2.0, 2.0).to(dtype).requires_grad_();
}

// NB: `bytes` names the size as float32 bytes of input; every dtype gets the same element
// count (bytes / 4). `b` below is then the bytes of one such tensor in the case's dtype.
Case rms_norm_case(int64_t bytes, at::ScalarType dt) {
  const int64_t rows = bytes / 4 / kD, b = bytes / 4 * elem(dt);
  return {{leaf({rows, kD}, dt), leaf({kD}, dt)},
          [](const Tensors& in) {
            return Tensors{ops::rms_norm_op()(ops::RmsNormArgs{in[0], in[1], kEps})};
          },
          [](const Tensors& in) {
            return Tensors{in[0] * at::rsqrt(in[0].pow(2).mean(-1, true) + kEps) * in[1]};
          },
          3 * b};  // grad, x read; grad_x written (grad_weight: one row)
}

Case bias_gelu_case(int64_t bytes, at::ScalarType dt) {
  const int64_t rows = bytes / 4 / kD, b = bytes / 4 * elem(dt);
  return {{leaf({rows, kD}, dt), leaf({kD}, dt)},
          [](const Tensors& in) {
            return Tensors{ops::bias_gelu_op()(ops::BiasGeluArgs{in[0], in[1], "none"})};
          },
          [](const Tensors& in) { return Tensors{at::gelu(in[0] + in[1])}; },
          3 * b};  // grad, x read; grad_x written (grad_bias: one row)
}

Case clamp_count_case(int64_t bytes, at::ScalarType dt) {
  const int64_t b = bytes / 4 * elem(dt);
  // NB: no element at a bound, where the grads differ by design (customop passes the grad at
  // min and max, torch.clamp's no longer does); 16-bit rounding puts many there.
  auto x = leaf({bytes / 4}, dt).detach();
  x = at::where(x.abs() == 0.5, at::full_like(x, 0.75), x).requires_grad_();
  return {
      {x},
      [](const Tensors& in) {
        return Tensors{std::get<0>(ops::clamp_count_op()(ops::ClampCountArgs{in[0], -0.5, 0.5}))};
      },
      [](const Tensors& in) { return Tensors{at::clamp(in[0], -0.5, 0.5)}; },
      3 * b};  // grad, x read; grad_x written
}

Case masked_softmax_case(int64_t bytes, at::ScalarType dt) {
  const int64_t rows = bytes / 4 / kD, b = bytes / 4 * elem(dt);
  const auto mask = at::rand({rows, kD}) > 0.3;  // keep 70%; no row is fully masked
  return {{leaf({rows, kD}, dt)},
          [mask](const Tensors& in) {
            return Tensors{ops::masked_softmax_op()(ops::MaskedSoftmaxArgs{in[0], mask, -1})};
          },
          [mask](const Tensors& in) {
            const double inf = std::numeric_limits<double>::infinity();
            return Tensors{at::softmax(in[0].masked_fill(~mask, -inf), -1)};
          },
          3 * b};  // grad, the saved output read; grad_x written (y = 0 where masked: no mask)
}

Case max_along_case(int64_t bytes, at::ScalarType dt) {
  const int64_t rows = bytes / 4 / kD, b = bytes / 4 * elem(dt);
  return {{leaf({rows, kD}, dt)},
          [](const Tensors& in) {
            return Tensors{std::get<0>(ops::max_along_op()(ops::MaxAlongArgs{in[0], -1, false}))};
          },
          [](const Tensors& in) { return Tensors{std::get<0>(at::max(in[0], -1))}; },
          b + rows * (elem(dt) + 8)};  // grad_x written; grad, indices read
}

Case weighted_sum_case(int64_t bytes, at::ScalarType dt) {
  const int64_t b = bytes / 4 * elem(dt);
  const std::vector<double> weights{0.5, 2.0};
  return {{leaf({bytes / 4}, dt), leaf({bytes / 4}, dt)},
          [weights](const Tensors& in) {
            return Tensors{ops::weighted_sum_op()(ops::WeightedSumArgs{in, weights})};
          },
          [weights](const Tensors& in) {
            const auto w = at::tensor(weights, at::kFloat).to(in[0].scalar_type()).view({-1, 1});
            return Tensors{at::stack(in).mul(w).sum(0)};
          },
          3 * b};  // grad read; two grads written
}

using MakeCase = Case (*)(int64_t, at::ScalarType);

void run_case(benchmark::State& state, MakeCase make, bool customop, at::ScalarType dtype) {
  const Case c = make(state.range(0), dtype);
  const Tensors mine = c.customop(c.inputs);
  const Tensors ref = c.composite(c.inputs);
  Tensors grads;
  for (const auto& o : mine) grads.push_back(at::randn(o.sizes(), at::kFloat).to(dtype));
  {  // NB: the check's grads are freed before the loop, which then starts where it runs on
     // (with the CPU output cache, in the blocks they leave), not with memory it never reuses.
    const auto gm = torch::autograd::grad(mine, c.inputs, grads, /*retain_graph=*/true);
    const auto gr = torch::autograd::grad(ref, c.inputs, grads, /*retain_graph=*/true);
    // The composite rounds after each of its ops in a 16-bit dtype, the kernels once; a grad
    // summed over rows (bias, weight) carries the rows' roundings: hence the wider tolerances,
    // absolute ones relative to the grad's largest element.
    const double tol = dtype == at::kBFloat16 ? 5e-2 : dtype == at::kHalf ? 1e-2 : 1e-3;
    for (size_t i = 0; i < gm.size(); ++i) {
      const auto ref_i = gr[i].to(at::kFloat);
      const double scale = std::max(1.0, ref_i.abs().max().item<double>());
      if (!at::allclose(gm[i].to(at::kFloat), ref_i, tol, tol * scale)) {
        state.SkipWithError(
            ("customop grad of input " + std::to_string(i) + " differs from the composite's")
                .c_str());
        return;
      }
    }
  }
  const Tensors& outputs = customop ? mine : ref;
  for (auto _ : state) {
    auto g = torch::autograd::grad(outputs, c.inputs, grads, /*retain_graph=*/true);
    benchmark::DoNotOptimize(g.front().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * c.bytes);
  state.counters["bytes_moved"] = static_cast<double>(c.bytes);
}

// The yardstick of the backward kernels' traffic: ATen's add(a, b, out=c), float32, a, b and c
// of `size` bytes each (allocated and touched once): two streams read, one written, as most of
// the backward ops move (STREAM's "add"). Unlike kernels_cpu's copy_ of `size` bytes, its
// footprint is the backward's: at 16 MiB, 48 MiB against the 32 MiB last-level cache.
void run_add_out(benchmark::State& state) {
  const int64_t n = state.range(0) / static_cast<int64_t>(sizeof(float));
  const auto a = at::randn({n});
  const auto b = at::randn({n});
  auto c = at::empty({n});
  at::add_out(c, a, b);
  for (auto _ : state) {
    at::add_out(c, a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  const int64_t bytes = 3 * state.range(0);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bytes_moved"] = static_cast<double>(bytes);
}

[[maybe_unused]] const bool registered = [] {
  const std::pair<const char*, MakeCase> cases[] = {
      {"rms_norm", rms_norm_case},       {"bias_gelu", bias_gelu_case},
      {"clamp_count", clamp_count_case}, {"masked_softmax", masked_softmax_case},
      {"max_along", max_along_case},     {"weighted_sum", weighted_sum_case}};
  for (const int64_t size : kSizes) {
    benchmark::RegisterBenchmark("yardstick/add_out", run_add_out)
        ->Arg(size)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.1);
    for (const auto& [suffix, dtype] :
         {std::pair{"", at::kFloat}, std::pair{"@bf16", at::kBFloat16},
          std::pair{"@fp16", at::kHalf}}) {
      for (const auto& [name, make] : cases) {
        for (const bool customop : {true, false}) {
          const std::string bm =
              std::string(name) + suffix + (customop ? "/customop" : "/composite");
          benchmark::RegisterBenchmark(bm.c_str(),
                                       [make = make, customop, dtype = dtype](benchmark::State& s) {
                                         run_case(s, make, customop, dtype);
                                       })
              ->Arg(size)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.1);
        }
      }
    }
  }
  return true;
}();

}  // namespace

int main(int argc, char** argv) { return customop::bench::run_kernel_benchmarks(argc, argv); }
