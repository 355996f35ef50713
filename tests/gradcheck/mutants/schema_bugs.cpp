// The schema corpus: ops whose backward is right but whose contract with the dispatcher is
// not (what they write, their version counters, their fake kernels), each with a correct twin.
// The bugs are the ones custom-op authors report most; see schema_corpus() in corpus.h.

#include "mutants/register.h"

#include <customop/customop.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

namespace customop_mutants::detail {

namespace {

using customop::Grads;

struct XArgs {
  at::Tensor x;
};
struct NoSaved {};

std::vector<std::pair<std::string, XArgs>> matrix_samples(c10::Device d, c10::ScalarType t) {
  return {{"matrix [3, 4]", {sample({3, 4}, d, t)}}};
}

// ---- scale_writes_input: 2 x, computed in the input's memory (undeclared) -------------------
void define_double(const char* schema, bool writes_input) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [writes_input](const XArgs& a) {
    if (!writes_input) return a.x * 2;
    a.x.mul_(2);  // planted: "saves memory" by working in its input, then returns a copy
    return a.x.clone();
  };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_fake([](const XArgs& a) { return at::empty_like(a.x); });
  op.impl_save_for_backward([](const XArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& g) { return Grads{{"x", g * 2}}; });
  op.samples(&matrix_samples);
}

// ---- add_one_: x += 1 in place ---------------------------------------------------------------
struct MutXArgs {
  customop::MutableTensor x;
};

std::vector<std::pair<std::string, MutXArgs>> mut_samples(c10::Device d, c10::ScalarType t) {
  return {{"matrix [3, 4]", {customop::MutableTensor(sample({3, 4}, d, t))}}};
}

void define_add_one() {
  auto& op = customop::define<MutXArgs, void>("customop_mutants::add_one_(Tensor(a!) x) -> ()");
  auto kernel = [](const MutXArgs& a) { a.x.add_(1); };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.samples(&mut_samples);
}

// The planted twin, registered by hand as TORCH_LIBRARY users do: the schema declares the
// write, the CPU kernel writes through data_ptr, and no ADInplaceOrView kernel bumps x's
// version (the dispatcher's fallback for that key falls through).
void add_one_no_bump_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kDouble,
              "customop_mutants::add_one_no_bump_: takes a contiguous float64 tensor");
  double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] += 1;
}
void add_one_no_bump_meta(const at::Tensor&) {}

// ---- pad_row: x [n, m] with a row of zeros appended: [n + 1, m] ------------------------------
at::Tensor pad_row_kernel(const XArgs& a) {
  return at::cat({a.x, at::zeros({1, a.x.size(1)}, a.x.options())});
}

void define_pad_row(const char* schema, bool locks) {
  auto& op = customop::define<XArgs>(schema);
  if (locks) {
    op.impl(c10::DeviceType::CPU, &pad_row_kernel);
    op.impl(c10::DeviceType::CUDA, &pad_row_kernel);
    // Planted: the row count is read as a plain integer (guard_int), which fixes it to the
    // traced value: a compiled graph then holds for one n only.
    op.impl_fake([](const XArgs& a) {
      const int64_t n = a.x.sym_size(0).guard_int(__FILE__, __LINE__);
      return at::empty_symint({c10::SymInt(n + 1), a.x.sym_size(1)}, a.x.options());
    });
  } else {
    op.shape([](const XArgs& a) {
      auto spec = customop::TensorSpec::like(a.x);
      spec.sizes[0] = a.x.sym_size(0) + 1;
      return spec;
    });
    auto out_kernel = [](const XArgs& a, const at::Tensor& out) {
      out.narrow(0, 0, a.x.size(0)).copy_(a.x);
      out.narrow(0, a.x.size(0), 1).zero_();
    };
    op.impl(c10::DeviceType::CPU, out_kernel);
    op.impl(c10::DeviceType::CUDA, out_kernel);
  }
  op.impl_save_for_backward([](const XArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& g) {
    return Grads{{"x", g.narrow(0, 0, g.size(0) - 1)}};
  });
  op.samples(&matrix_samples);
}

// ---- tall_copy: a copy of x, column-major when x has more rows than columns ----------------
at::Tensor tall_copy_kernel(const XArgs& a) {
  const bool tall = a.x.size(0) > a.x.size(1);
  at::Tensor out = tall ? at::empty({a.x.size(1), a.x.size(0)}, a.x.options()).t()
                        : at::empty({a.x.size(0), a.x.size(1)}, a.x.options());
  return out.copy_(a.x);
}

void define_tall_copy(const char* schema, bool fake_knows_layout) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, &tall_copy_kernel);
  op.impl(c10::DeviceType::CUDA, &tall_copy_kernel);
  op.impl_fake([fake_knows_layout](const XArgs& a) {
    // A branch on symbolic sizes records a guard (n > m), which is allowed; it does not fix
    // either size.
    const bool tall = fake_knows_layout && a.x.sym_size(0) > a.x.sym_size(1);
    return tall ? at::empty_symint({a.x.sym_size(1), a.x.sym_size(0)}, a.x.options()).t()
                : at::empty_symint({a.x.sym_size(0), a.x.sym_size(1)}, a.x.options());
  });
  op.impl_save_for_backward([](const XArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& g) { return Grads{{"x", g}}; });
  op.samples(&matrix_samples);  // [3, 4]: not tall, so the planted fake agrees on the sample
}

// ---- halve: x / 2, in x's dtype -------------------------------------------------------------
void define_halve(const char* schema, bool upcasts) {
  auto& op = customop::define<XArgs>(schema);
  auto kernel = [upcasts](const XArgs& a) {
    const bool low = a.x.scalar_type() == at::kBFloat16 || a.x.scalar_type() == at::kHalf;
    // Planted: computed in float32 for the low dtypes and returned so (the cast back is
    // forgotten); float64 and float32 samples never see it.
    if (upcasts && low) return a.x.to(at::kFloat) * 0.5;
    return a.x * 0.5;
  };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.impl_fake([](const XArgs& a) { return at::empty_like(a.x); });
  op.impl_save_for_backward([](const XArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& g) { return Grads{{"x", g * 0.5}}; });
  op.samples(&matrix_samples);
  // halve_(Tensor(a!) x) -> Tensor(a!), differentiable through halve's backward: the correct
  // twin of halve_loses_grad.
  if (!upcasts) op.inplace_variant(customop::InplaceGrad::kThroughFunctional);
}

at::Tensor halve_functional(const at::Tensor& x) { return x * 0.5; }

// Planted, registered by hand at the Autograd key: the right values and a version bump, but
// written below ADInplaceOrView with no backward recorded, so x keeps its previous history and
// its grads pass through as if the op were the identity (opcheck's autograd registration test
// sees an Autograd kernel and is content).
at::Tensor& halve_loses_grad_(at::Tensor& x) {
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    x.mul_(0.5);
  }
  if (!x.is_inference()) torch::autograd::impl::bump_version(x);
  return x;
}

// ---- scale3: 3 x, and an out= overload registered by hand ---------------------------------
// The functional op is CompositeImplicitAutograd (differentiable through ATen); the out=
// overload has its own CPU kernel, as hand-written libraries have: 0 correct, 1 off by 0.1 %,
// 2 accumulating into its buffer instead of overwriting it.
template <int kFault>
at::Tensor& scale3_out(const at::Tensor& x, at::Tensor& out) {
  out.resize_(x.sizes());
  if (kFault == 0) at::mul_out(out, x, 3);
  if (kFault == 1) at::mul_out(out, x, 3.003);
  if (kFault == 2) out.add_(x * 3);
  return out;
}
at::Tensor scale3(const at::Tensor& x) { return x * 3; }

// ---- add_iota: x + [0, 1, 2, ...] in x's logical order, with an in-place variant add_iota_ ----
// Position-dependent, so an in-place kernel that walks memory instead of logical order is
// wrong on a transposed argument (an elementwise scale would not show it).
at::Tensor iota_like(const at::Tensor& x) {
  // Symbolic sizes throughout (torch.compile and opcheck trace the functional op dynamically).
  return at::ones_like(x, at::MemoryFormat::Contiguous)
      .reshape({-1})
      .cumsum(0)
      .sub(1)
      .view_symint(x.sym_sizes());
}

void define_add_iota() {
  auto& op = customop::define<XArgs>("customop_mutants::add_iota(Tensor x) -> Tensor");
  op.shape([](const XArgs& a) { return customop::TensorSpec::like(a.x); });
  auto kernel = [](const XArgs& a, const at::Tensor& out) {
    at::add_out(const_cast<at::Tensor&>(out), a.x, iota_like(a.x));
  };
  op.impl(c10::DeviceType::CPU, kernel);
  op.impl(c10::DeviceType::CUDA, kernel);
  op.inplace_variant();  // customop_mutants::add_iota_(Tensor(a!) x) -> Tensor(a!)
  op.impl_save_for_backward([](const XArgs&, const at::Tensor&) { return NoSaved{}; });
  op.impl_backward([](const NoSaved&, const at::Tensor& g) { return Grads{{"x", g}}; });
  op.samples(&matrix_samples);
}

at::Tensor add_iota_functional(const at::Tensor& x) { return x + iota_like(x); }

// Planted, registered by hand: adds i to the i-th element of x's memory, and bumps the version.
at::Tensor& add_iota_walks_memory_(at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kDouble && x.is_non_overlapping_and_dense(),
              "customop_mutants::add_iota_walks_memory_: takes a dense float64 tensor");
  double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] += static_cast<double>(i);
  torch::autograd::impl::bump_version(x);
  return x;
}

// Planted, registered by hand: the right values, written below ADInplaceOrView (as a kernel
// that calls ATen's in-place ops with the dispatch guard set does), so no version bump.
at::Tensor& add_iota_no_bump_(at::Tensor& x) {
  const at::AutoDispatchBelowADInplaceOrView below;
  return x.add_(iota_like(x));
}

}  // namespace

void register_schema_bugs() {
  static const bool done = [] {
    define_double("customop_mutants::double_it(Tensor x) -> Tensor", false);
    define_double("customop_mutants::double_it_writes_input(Tensor x) -> Tensor", true);
    define_add_one();
    define_pad_row("customop_mutants::pad_row(Tensor x) -> Tensor", false);
    define_pad_row("customop_mutants::pad_row_locks_size(Tensor x) -> Tensor", true);
    define_tall_copy("customop_mutants::tall_copy(Tensor x) -> Tensor", true);
    define_tall_copy("customop_mutants::tall_copy_fake_contiguous(Tensor x) -> Tensor", false);
    define_halve("customop_mutants::halve(Tensor x) -> Tensor", false);
    define_halve("customop_mutants::halve_upcasts(Tensor x) -> Tensor", true);
    define_add_iota();
    return true;
  }();
  (void)done;
}

}  // namespace customop_mutants::detail

TORCH_LIBRARY_FRAGMENT(customop_mutants, m) {
  m.def("add_one_no_bump_(Tensor(a!) x) -> ()");
  for (const char* name : {"scale3", "scale3_out_off", "scale3_out_reads"}) {
    m.def((std::string(name) + "(Tensor x) -> Tensor").c_str());
    m.def((std::string(name) + ".out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)").c_str(),
          {at::Tag::out});
  }
}
TORCH_LIBRARY_FRAGMENT(customop_mutants, m) {
  for (const char* name : {"add_iota_walks_memory", "add_iota_no_bump", "halve_loses_grad"}) {
    m.def((std::string(name) + "(Tensor x) -> Tensor").c_str());
    m.def((std::string(name) + "_(Tensor(a!) x) -> Tensor(a!)").c_str(), {at::Tag::inplace});
  }
}
TORCH_LIBRARY_IMPL(customop_mutants, CompositeImplicitAutograd, m) {
  m.impl("add_iota_walks_memory", &customop_mutants::detail::add_iota_functional);
  m.impl("add_iota_no_bump", &customop_mutants::detail::add_iota_functional);
  m.impl("halve_loses_grad", &customop_mutants::detail::halve_functional);
  m.impl("scale3", &customop_mutants::detail::scale3);
  m.impl("scale3_out_off", &customop_mutants::detail::scale3);
  m.impl("scale3_out_reads", &customop_mutants::detail::scale3);
}
TORCH_LIBRARY_IMPL(customop_mutants, CPU, m) {
  m.impl("add_one_no_bump_", &customop_mutants::detail::add_one_no_bump_cpu);
  m.impl("scale3.out", &customop_mutants::detail::scale3_out<0>);
  m.impl("scale3_out_off.out", &customop_mutants::detail::scale3_out<1>);
  m.impl("scale3_out_reads.out", &customop_mutants::detail::scale3_out<2>);
  m.impl("add_iota_walks_memory_", &customop_mutants::detail::add_iota_walks_memory_);
  m.impl("add_iota_no_bump_", &customop_mutants::detail::add_iota_no_bump_);
  m.impl("halve_loses_grad_", &customop_mutants::detail::halve_loses_grad_);
}
TORCH_LIBRARY_IMPL(customop_mutants, Meta, m) {
  m.impl("add_one_no_bump_", &customop_mutants::detail::add_one_no_bump_meta);
}
TORCH_LIBRARY_IMPL(customop_mutants, Autograd, m) {
  m.impl("halve_loses_grad_", &customop_mutants::detail::halve_loses_grad_);
}
