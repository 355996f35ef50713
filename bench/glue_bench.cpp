// Glue overhead: forward + backward of y = x * alpha through
//   (a) a customop op (dispatcher + generated autograd Function + by-name grads),
//   (b) the same op with typed grads,
//   (c) a hand-written torch::autograd::Function doing the same math,
//   (d) the plain ATen composite (x * alpha, autograd's MulBackward).
// Run all in one process (bench/run_glue prints the ratios); never compare separate runs.

#include <customop/customop.h>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

namespace {

struct ScaleArgs {
  at::Tensor x;   // [n] float32
  double alpha;   // scale factor
};
struct ScaleSaved {
  double alpha;
};
struct ScaleGrads {
  at::Tensor x;
};

customop::Op<ScaleArgs>& by_name_op() {
  static auto& op = [] () -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("glue_bench::scale(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_save_for_backward([](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
    o.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
      return customop::Grads{{"x", g * s.alpha}};
    });
    return o;
  }();
  return op;
}

customop::Op<ScaleArgs>& typed_op() {
  static auto& op = [] () -> customop::Op<ScaleArgs>& {
    auto& o = customop::define<ScaleArgs>("glue_bench::scale_typed(Tensor x, float alpha) -> Tensor");
    o.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
    o.impl_autograd([](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; },
                    [](const ScaleSaved& s, const at::Tensor& g) { return ScaleGrads{g * s.alpha}; });
    return o;
  }();
  return op;
}

struct ScaleFunction : torch::autograd::Function<ScaleFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double alpha) {
    ctx->saved_data["alpha"] = alpha;
    return x * alpha;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {g[0] * ctx->saved_data["alpha"].toDouble(), at::Tensor()};
  }
};

template <class F>
void run(benchmark::State& state, F forward) {
  at::set_num_threads(1);
  const auto n = state.range(0);
  auto x = torch::randn({n}).requires_grad_();
  auto g = torch::ones({n});
  for (auto _ : state) {
    at::Tensor y = forward(x);
    torch::autograd::backward({y}, {g});
    benchmark::DoNotOptimize(x.grad().data_ptr());
    x.mutable_grad().reset();
  }
}

void BM_customop_by_name(benchmark::State& s) {
  auto& op = by_name_op();
  run(s, [&](const at::Tensor& x) { return op(ScaleArgs{x, 2.0}); });
}
void BM_customop_typed(benchmark::State& s) {
  auto& op = typed_op();
  run(s, [&](const at::Tensor& x) { return op(ScaleArgs{x, 2.0}); });
}
void BM_autograd_function(benchmark::State& s) {
  run(s, [](const at::Tensor& x) { return ScaleFunction::apply(x, 2.0); });
}
void BM_aten_composite(benchmark::State& s) {
  run(s, [](const at::Tensor& x) { return x * 2.0; });
}

BENCHMARK(BM_customop_by_name)->Arg(1)->Arg(4096);
BENCHMARK(BM_customop_typed)->Arg(1)->Arg(4096);
BENCHMARK(BM_autograd_function)->Arg(1)->Arg(4096);
BENCHMARK(BM_aten_composite)->Arg(1)->Arg(4096);

}  // namespace

BENCHMARK_MAIN();
