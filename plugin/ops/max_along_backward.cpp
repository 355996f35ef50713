// customop::max_along_backward: schema, checks, the ATen formula (its reference), its own
// backward and JVP, samples, registration.

#include "detail/checks.h"
#include "detail/max_along.h"
#include "detail/samples.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <c10/util/safe_numerics.h>

#include <vector>

namespace customop::ops {

namespace detail {

int64_t check_max_along_backward(const MaxAlongBackwardArgs& a, c10::DeviceType device) {
  check_floating("max_along_backward", "grad", a.grad, device);
  TORCH_CHECK_TYPE(a.indices.scalar_type() == at::kLong,
                   "max_along_backward: indices must be int64, but got ",
                   dtype_name(a.indices.scalar_type()));
  check_same_device("max_along_backward", "indices", a.indices, "grad", a.grad);
  TORCH_CHECK(a.grad.dim() >= 1,
              "max_along_backward: grad must be at least 1-d (keepdim form), but got a 0-d "
              "tensor");
  TORCH_CHECK(a.indices.sym_sizes() == a.grad.sym_sizes(),
              "max_along_backward: indices must have grad's shape ", a.grad.sym_sizes(),
              ", but got ", a.indices.sym_sizes());
  const int64_t dim = wrap_dim("max_along_backward", a.dim, a.grad.dim());
  TORCH_CHECK(a.grad.sym_size(dim) == 1, "max_along_backward: grad must have size 1 at dim ", a.dim,
              " (keepdim form), but got shape ", a.grad.sym_sizes());
  // NB: a symbolic size (fake tensors) is checked by a runtime assertion, not a guard on its value.
  TORCH_SYM_CHECK(a.size.sym_ge(1), "max_along_backward: size must be >= 1, but got ", a.size);
  const auto n = a.grad.sym_numel().maybe_as_int();
  const auto size = a.size.maybe_as_int();
  if (n && size) {
    int64_t elements = 0, bytes = 0;
    TORCH_CHECK(
        !c10::mul_overflows(*n, *size, &elements) &&
            !c10::mul_overflows(elements, static_cast<int64_t>(a.grad.element_size()), &bytes),
        "max_along_backward: size ", *size, " times grad's ", *n,
        " elements is too large an output (its byte count overflows int64)");
  }
  return dim;
}

at::Tensor max_along_backward_composite(const MaxAlongBackwardArgs& a) {
  std::vector<c10::SymInt> sizes = a.grad.sym_sizes().vec();
  const int64_t dim = wrap_dim("max_along_backward", a.dim, a.grad.dim());
  sizes[static_cast<size_t>(dim)] = a.size;
  return a.grad.new_zeros_symint(sizes).scatter_(dim, a.indices, a.grad);
}

}  // namespace detail

namespace {

struct MaxAlongBackwardGrads {
  at::Tensor grad;
  at::Tensor indices;  // integers: never a grad
};

struct MaxAlongBackwardSaved {
  at::Tensor indices;
  int64_t dim;
};

MaxAlongBackwardSaved max_along_backward_save(const MaxAlongBackwardArgs& a,
                                              const at::Tensor& /*out*/) {
  return {a.indices, a.dim};
}

// Linear in g: the VJP gathers the cotangent at the indices (the transpose of a scatter).
MaxAlongBackwardGrads max_along_backward_double_backward(const MaxAlongBackwardSaved& s,
                                                         const at::Tensor& c) {
  if (!c.defined()) return {};
  return {c.gather(s.dim, s.indices), {}};
}

// JVP: the op on g's tangent.
at::Tensor max_along_backward_jvp(const MaxAlongBackwardArgs& p, const MaxAlongBackwardArgs& t,
                                  const at::Tensor& /*out*/) {
  if (!t.grad.defined()) return {};
  return max_along_backward_op()(MaxAlongBackwardArgs{t.grad, p.indices, p.dim, p.size});
}

TensorSpec max_along_backward_shape(const MaxAlongBackwardArgs& a) {
  const int64_t dim = detail::check_max_along_backward(a, a.grad.device().type());
  std::vector<c10::SymInt> sizes = a.grad.sym_sizes().vec();
  sizes[static_cast<size_t>(dim)] = a.size;
  return TensorSpec::like(a.grad).sized(sizes);
}

std::vector<std::pair<std::string, MaxAlongBackwardArgs>> max_along_backward_samples(
    c10::Device dev, c10::ScalarType dt) {
  using detail::sample_randn;
  const auto indices = [&](at::IntArrayRef sizes, int64_t size, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randint(size, sizes, gen, at::TensorOptions().dtype(at::kLong)).to(dev);
  };
  return {
      {"last dim [4, 1] of 6", {sample_randn({4, 1}, 91, dev, dt), indices({4, 1}, 6, 95), -1, 6}},
      {"dim 0 [1, 5] of 3, transposed grad",
       {sample_randn({5, 1}, 92, dev, dt).t(), indices({1, 5}, 3, 96), 0, 3}},
      {"middle dim [2, 1, 3] of 5, sliced grad",
       {sample_randn({2, 1, 6}, 93, dev, dt).slice(2, 0, 6, 2), indices({2, 1, 3}, 5, 97), 1, 5}},
      {"1-d [1] of 4", {sample_randn({1}, 94, dev, dt), indices({1}, 4, 98), 0, 4}},
  };
}

}  // namespace

Op<MaxAlongBackwardArgs>& max_along_backward_op() {
  static Op<MaxAlongBackwardArgs>& op = []() -> Op<MaxAlongBackwardArgs>& {
    auto& o = define<MaxAlongBackwardArgs>(
        "customop::max_along_backward(Tensor grad, Tensor indices, int dim, SymInt size) -> "
        "Tensor");
    o.shape(&max_along_backward_shape);
    o.impl(c10::DeviceType::CPU, &detail::max_along_backward_cpu);
#ifdef CUSTOMOP_WITH_CUDA
    o.impl(c10::DeviceType::CUDA, &detail::max_along_backward_cuda);
#endif
    o.reference(&detail::max_along_backward_composite);
    // Sharding: independent along every dim but `dim` (grad and indices have size 1 there; the
    // output holds the whole dim).
    o.sharding(Sharding::reduction("dim"));
    // Autocast: float32, as max_along.
    o.autocast(AutocastPolicy::kFloat32);
    o.impl_autograd(&max_along_backward_save, &max_along_backward_double_backward);
    o.impl_jvp(&max_along_backward_jvp);
    // vmap: slices along `dim` are independent.
    o.vmap(customop::BatchRule::rows({"grad", "indices"}, {"dim"}));
    o.samples(&max_along_backward_samples);
    return o;
  }();
  return op;
}

namespace {
// Loading libcustomop_ops.so registers the op with the dispatcher.
[[maybe_unused]] const auto& max_along_backward_registered = max_along_backward_op();
}  // namespace

}  // namespace customop::ops
