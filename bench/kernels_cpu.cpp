// CPU kernels vs their ATen composites, forward only, float32 (and bfloat16, float16: "<op>@bf16",
// "<op>@fp16", the same element counts), 4 KiB .. 256 MiB of float32 input,
// and a plain tensor copy_ of the same size as this machine's memory-bandwidth yardstick.
// Every benchmark reports bytes_per_second (SetBytesProcessed) over the bytes the op must
// move at least (inputs read once + outputs written once), so customop, the composite and
// copy_ are compared on the same traffic; bench/run turns them into ratios.
// The in-place ops (rms_norm_, bias_gelu_, fused_add_rms_norm_) allocate nothing, so they are
// the kernels measured against copy_ alone; the functional ops allocate their outputs, as
// clone does (at 256 MiB, each call's fresh pages cost more than the copy itself).
// Names: "<op>/<variant>/<bytes of input>", variant customop | composite; the yardsticks
// "copy/<copy_ | memcpy | clone>/<bytes>" (see run_copy).
// Both variants run under c10::InferenceMode: the autograd layer is skipped alike, the glue
// is measured by glue_bench. Before timing, the customop output is checked against the
// composite (allclose); a mismatch fails the benchmark (SkipWithError).

#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/fused_add_rms_norm.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include "bench_main.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>
#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace ops = customop::ops;

constexpr int64_t kD = 1024;  // row length of the row-wise ops (4 KiB of float32)
constexpr int64_t kSizes[] = {int64_t{4} << 10, int64_t{1} << 20, int64_t{16} << 20,
                              int64_t{256} << 20};  // bytes of the input tensor

/// The sizes to register: kSizes, or CUSTOMOP_BENCH_SIZES="4096,65536,..." (bytes, multiples
/// of 4 KiB: whole rows of kD float32; bench/scaling.py sweeps 4 KiB .. 256 MiB with it).
std::vector<int64_t> sizes() {
  const char* env = std::getenv("CUSTOMOP_BENCH_SIZES");
  if (env == nullptr || *env == '\0') return {std::begin(kSizes), std::end(kSizes)};
  std::vector<int64_t> out;
  std::string item;
  for (const char* c = env;; ++c) {
    if (*c == ',' || *c == '\0') {
      const int64_t v = std::strtoll(item.c_str(), nullptr, 10);
      if (v <= 0 || v % (kD * 4) != 0) {
        std::fprintf(
            stderr,
            "kernels_cpu: CUSTOMOP_BENCH_SIZES: '%s' is not a positive multiple of %lld bytes\n",
            item.c_str(), static_cast<long long>(kD * 4));
        std::exit(2);
      }
      out.push_back(v);
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  return out;
}
constexpr double kEps = 1e-6;
constexpr double kMin = -0.5, kMax = 0.5;      // clamp_count bounds: ~60% of U(-2, 2) clamped
const std::vector<double> kWeights{0.5, 2.0};  // weighted_sum: K = 2 inputs

/// The dtype of the case being built (float32, bfloat16, float16): set by run_case.
thread_local at::ScalarType g_dtype = at::kFloat;

at::Tensor uniform(std::vector<int64_t> shape) {
  return at::empty(shape, at::kFloat).uniform_(-2.0, 2.0).to(g_dtype);
}

/// Bytes of one element of the case's dtype.
int64_t elem() { return static_cast<int64_t>(c10::elementSize(g_dtype)); }

/// One op's inputs at one size, its two implementations and the bytes each call must move.
struct Case {
  using Outputs = std::vector<at::Tensor>;
  std::function<Outputs()> customop;   // outputs to compare
  std::function<Outputs()> composite;  // the same math in ATen ops
  int64_t bytes = 0;
  /// Maps outputs to what must agree; unset: the outputs themselves. NB: max_along compares
  /// the values at the returned indices, since a tie may pick another (equally valid) index.
  std::function<Outputs(const Outputs&)> comparable;
};

using MakeCase = std::function<Case(int64_t bytes)>;

// NB: `bytes` names the size as float32 bytes of input: every dtype gets the same element
// count (bytes / 4), and moves elem() bytes per element.
Case rms_norm_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD}), w = uniform({kD});
  return {[=] {
            return std::vector{ops::rms_norm_op()(ops::RmsNormArgs{x, w, kEps})};
          },
          [=] { return std::vector{x * at::rsqrt(x.pow(2).mean(-1, true) + kEps) * w}; },
          2 * bytes + static_cast<int64_t>(w.nbytes())};
}

Case bias_gelu_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD}), b = uniform({kD});
  return {[=] {
            return std::vector{ops::bias_gelu_op()(ops::BiasGeluArgs{x, b, "none"})};
          },
          [=] { return std::vector{at::gelu(x + b)}; },
          2 * bytes + static_cast<int64_t>(b.nbytes())};
}

Case clamp_count_case(int64_t bytes) {
  auto x = uniform({bytes / 4});
  bytes = bytes / 4 * elem();
  return {[=] {
            auto [y, n] = ops::clamp_count_op()(ops::ClampCountArgs{x, kMin, kMax});
            return std::vector{y, n};
          },
          [=] {
            auto y = at::clamp(x, kMin, kMax);
            const int64_t n = ((x < kMin) | (x > kMax)).sum().item<int64_t>();
            return std::vector{y, at::scalar_tensor(n, at::kLong)};
          },
          2 * bytes};
}

Case masked_softmax_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD});
  auto mask = at::rand({rows, kD}) > 0.3;  // keep 70%; no row is fully masked at D = 1024
  return {[=] {
            return std::vector{ops::masked_softmax_op()(ops::MaskedSoftmaxArgs{x, mask, -1})};
          },
          [=] {
            const double inf = std::numeric_limits<double>::infinity();
            return std::vector{at::softmax(x.masked_fill(~mask, -inf), -1).nan_to_num(0.0)};
          },
          2 * bytes + static_cast<int64_t>(mask.nbytes())};
}

Case max_along_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD});
  return {[=] {
            auto [v, i] = ops::max_along_op()(ops::MaxAlongArgs{x, -1, false});
            return std::vector{v, i};
          },
          [=] {
            auto [v, i] = at::max(x, -1);
            return std::vector{v, i};
          },
          bytes + rows * (elem() + 8),
          [=](const Case::Outputs& o) {
            return Case::Outputs{o[0], x.gather(-1, o[1].unsqueeze(-1)).squeeze(-1)};
          }};
}

Case weighted_sum_case(int64_t bytes) {
  std::vector<at::Tensor> xs;
  for (size_t k = 0; k < kWeights.size(); ++k) xs.push_back(uniform({bytes / 4}));
  bytes = bytes / 4 * elem();
  const auto w = at::tensor(kWeights, at::kFloat).to(g_dtype).view({-1, 1});
  return {[=] {
            return std::vector{ops::weighted_sum_op()(ops::WeightedSumArgs{xs, kWeights})};
          },
          [=] { return std::vector{at::stack(xs).mul(w).sum(0)}; },
          static_cast<int64_t>(xs.size() + 1) * bytes};
}

/// customop::<name>(Tensor(a!) input, Tensor other, <scalar>) -> Tensor(a!), through the
/// dispatcher (the in-place variants have no C++ wrapper of their own).
template <class Scalar>
at::Tensor call_inplace(const char* name, const at::Tensor& x, const at::Tensor& other,
                        Scalar scalar) {
  static thread_local std::unordered_map<std::string, c10::OperatorHandle> ops;
  auto it = ops.find(name);
  if (it == ops.end()) {
    it = ops.emplace(name, c10::Dispatcher::singleton().findSchemaOrThrow(name, "")).first;
  }
  return it->second.typed<at::Tensor&(at::Tensor&, const at::Tensor&, Scalar)>().call(
      const_cast<at::Tensor&>(x), other, scalar);
}

// In-place variants: each side writes its own copy of x (the check compares one call of
// each); bytes = x read and written once (+ the weight / bias / residual), as copy_ moves.
// NB: the timed loop applies the op to its own result again and again, so the arguments keep
// that map away from subnormals (whose arithmetic is many times slower): rms_norm_'s weight is
// +-1 (x keeps its RMS of 1), bias_gelu_'s bias is 1 (x grows by about 1 per call, and stops
// in 16-bit once x + 1 rounds to x); U(-2, 2) weights shrank elements by |w| per call.
Case rms_norm_inplace_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD}), w = uniform({kD}).sign();
  auto xa = x.clone(), xb = x.clone();
  return {[=] { return std::vector{call_inplace<double>("customop::rms_norm_", xa, w, kEps)}; },
          [=] { return std::vector{xb.mul_(at::rsqrt(xb.pow(2).mean(-1, true) + kEps)).mul_(w)}; },
          2 * bytes + static_cast<int64_t>(w.nbytes())};
}

Case bias_gelu_inplace_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto x = uniform({rows, kD}), b = at::ones({kD}, x.options());
  auto xa = x.clone(), xb = x.clone();
  return {
      [=] {
        return std::vector{call_inplace<c10::string_view>("customop::bias_gelu_", xa, b, "none")};
      },
      [=] {
        auto t = xb.add_(b);
        return std::vector{at::gelu_(t)};
      },
      2 * bytes + static_cast<int64_t>(b.nbytes())};
}

// fused_add_rms_norm_: residual += input, input = rms_norm(residual) * weight, both written.
Case fused_add_rms_norm_case(int64_t bytes) {
  const int64_t rows = bytes / 4 / kD;
  bytes = bytes / 4 * elem();
  auto h = uniform({rows, kD}), res = uniform({rows, kD}), w = uniform({kD});
  auto ha = h.clone(), ra = res.clone(), hb = h.clone(), rb = res.clone();
  return {[=] {
            ops::fused_add_rms_norm_op()(ops::FusedAddRmsNormArgs{ha, ra, w, kEps});
            return std::vector{ha, ra};
          },
          [=] {
            rb.add_(hb);
            hb.copy_(rb * at::rsqrt(rb.pow(2).mean(-1, true) + kEps) * w);
            return std::vector{hb, rb};
          },
          4 * bytes + static_cast<int64_t>(w.nbytes())};
}

void run_case(benchmark::State& state, const MakeCase& make, bool customop, at::ScalarType dtype) {
  c10::InferenceMode guard;
  g_dtype = dtype;
  const Case c = make(state.range(0));
  const auto mine = c.comparable ? c.comparable(c.customop()) : c.customop();
  const auto ref = c.comparable ? c.comparable(c.composite()) : c.composite();
  // The composite rounds after each of its ops in a 16-bit dtype; the kernels once.
  const double tol = dtype == at::kBFloat16 ? 5e-2 : dtype == at::kHalf ? 1e-2 : 1e-4;
  for (size_t i = 0; i < mine.size(); ++i) {
    const bool ok = mine[i].is_floating_point()
                        ? at::allclose(mine[i].to(at::kFloat), ref[i].to(at::kFloat), tol,
                                       dtype == at::kFloat ? 1e-5 : tol)
                        : at::equal(mine[i], ref[i]);
    if (!ok) {
      state.SkipWithError(
          ("customop output " + std::to_string(i) + " differs from the composite").c_str());
      return;
    }
  }
  const auto& fn = customop ? c.customop : c.composite;
  for (auto _ : state) {
    auto out = fn();
    benchmark::DoNotOptimize(out.front().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * c.bytes);
  state.counters["bytes_moved"] = static_cast<double>(c.bytes);
}

/// The yardsticks, 2 x size bytes each: copy_ into a tensor allocated (and touched) once
/// (ATen's threads), std::memcpy likewise (one thread), and clone(), which allocates its
/// output every call as the ops and composites do (so it pays the same page faults).
enum class Copy { kCopy, kMemcpy, kClone };

void run_copy(benchmark::State& state, Copy kind) {
  c10::InferenceMode guard;
  // NB: the yardsticks copy float32. g_dtype is whatever the benchmark before this one set:
  // with random interleaving that was a 16-bit case in some orders, and src came out half the
  // size, so memcpy read past its end (SIGSEGV when the next page was unmapped; a bench/run
  // died of it) and copy_ timed a bf16 -> float32 conversion.
  g_dtype = at::kFloat;
  const int64_t n = state.range(0) / 4;
  auto src = uniform({n});
  if (src.nbytes() != static_cast<size_t>(state.range(0))) {
    state.SkipWithError("copy source has the wrong size");
    return;
  }
  auto dst = at::zeros({n}, at::kFloat);
  for (auto _ : state) {
    switch (kind) {
      case Copy::kCopy:
        dst.copy_(src);
        benchmark::DoNotOptimize(dst.data_ptr());
        break;
      case Copy::kMemcpy:
        std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(state.range(0)));
        benchmark::DoNotOptimize(dst.data_ptr());
        break;
      case Copy::kClone: {
        auto out = src.clone();
        benchmark::DoNotOptimize(out.data_ptr());
        break;
      }
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * state.range(0));
  state.counters["bytes_moved"] = static_cast<double>(2 * state.range(0));
}

/// The compute yardstick for the roofline: a float32 [n, n] x [n, n] matmul (ATen's BLAS, ATen's
/// threads), 2 n^3 flops per call ("flops" counter; bench/run divides by the time).
void run_sgemm(benchmark::State& state) {
  c10::InferenceMode guard;
  const int64_t n = state.range(0);
  auto a = at::randn({n, n}), b = at::randn({n, n});
  auto c = at::empty({n, n});
  for (auto _ : state) {
    at::mm_out(c, a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["flops"] =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["bytes_moved"] = 0;
}

/// NB: CUSTOMOP_BENCH_ITERATIONS=N fixes the iterations (for callgrind: instructions per call
/// are then total / (N + 2), the 2 being the correctness check's calls).
void apply_sizes(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
  if (const char* n = std::getenv("CUSTOMOP_BENCH_ITERATIONS")) {
    b->Iterations(std::max(1L, std::strtol(n, nullptr, 10)));
  } else {
    b->MinTime(0.1);
  }
}

[[maybe_unused]] const bool registered = [] {
  const std::pair<const char*, MakeCase> cases[] = {
      {"rms_norm", rms_norm_case},
      {"bias_gelu", bias_gelu_case},
      {"clamp_count", clamp_count_case},
      {"masked_softmax", masked_softmax_case},
      {"max_along", max_along_case},
      {"weighted_sum", weighted_sum_case},
      {"rms_norm_", rms_norm_inplace_case},
      {"bias_gelu_", bias_gelu_inplace_case},
      {"fused_add_rms_norm_", fused_add_rms_norm_case}};
  benchmark::RegisterBenchmark("peak/sgemm", run_sgemm)
      ->Arg(1024)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.1);
  // Size-major order: copy_ and every op at one size run back to back, so the yardstick and
  // the ops see the same machine load.
  for (const int64_t size : sizes()) {
    for (const auto& [name, kind] :
         {std::pair{"copy/copy_", Copy::kCopy}, std::pair{"copy/memcpy", Copy::kMemcpy},
          std::pair{"copy/clone", Copy::kClone}}) {
      apply_sizes(benchmark::RegisterBenchmark(name, [kind = kind](benchmark::State& s) {
                    run_copy(s, kind);
                  })->Arg(size));
    }
    // float32 as "<op>/...", the 16-bit dtypes as "<op>@bf16/..." and "<op>@fp16/...".
    for (const auto& [suffix, dtype] :
         {std::pair{"", at::kFloat}, std::pair{"@bf16", at::kBFloat16},
          std::pair{"@fp16", at::kHalf}}) {
      for (const auto& [name, make] : cases) {
        for (const bool customop : {true, false}) {
          const std::string bm =
              std::string(name) + suffix + (customop ? "/customop" : "/composite");
          apply_sizes(
              benchmark::RegisterBenchmark(bm.c_str(), [make = make, customop,
                                                        dtype = dtype](benchmark::State& s) {
                run_case(s, make, customop, dtype);
              })->Arg(size));
        }
      }
    }
  }
  return true;
}();

}  // namespace

int main(int argc, char** argv) { return customop::bench::run_kernel_benchmarks(argc, argv); }
