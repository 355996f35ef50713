#pragma once
/// \file
/// `customop::define<Args, Ret>(schema)`: a dispatcher op from a schema and an args struct,
/// with per-device kernels and a backward formula in two parts (save_for_backward +
/// backward), re-creating PyTorch's legacy CustomOp API in C++.
///
/// Example:
///   struct ScaleArgs  { at::Tensor x; double alpha; };
///   struct ScaleSaved { double alpha; };
///   auto& op = customop::define<ScaleArgs>("myns::scale(Tensor x, float alpha) -> Tensor");
///   op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
///   op.impl_save_for_backward([](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
///   op.impl_backward([](const ScaleSaved& s, const at::Tensor& g) { return customop::Grads{{"x", g * s.alpha}}; });
///   at::Tensor y = op(ScaleArgs{.x = t, .alpha = 2.0});

#include <customop/arg_types.h>
#include <customop/detail/backward_op.h>
#include <customop/detail/formula.h>
#include <customop/detail/function_traits.h>
#include <customop/detail/op_checks.h>
#include <customop/detail/saved_state.h>
#include <customop/detail/stack.h>
#include <customop/grads.h>
#include <customop/op_core.h>
#include <customop/shape.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <boost/pfr.hpp>
#include <c10/util/TypeIndex.h>

#include <algorithm>
#include <array>
#include <exception>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string_view>
#include <typeindex>
#include <utility>

namespace customop {

/// Which returns of an op are differentiable (the reference's output_differentiability): one
/// bool per return. A false Tensor (or every Tensor of a false Tensor[]) return is marked
/// non-differentiable; a true non-tensor return is an error when the op runs forward.
/// Default (no flags): every Tensor return is differentiable.
/// \throws c10::ValueError at impl_backward / impl_autograd / define_backward when the number
///         of flags differs from the number of returns; c10::Error at each forward call through
///         the formula (both halves registered) for a true flag on an int/float/bool return.
///         Anything but a list of bools is a compile error.
/// Example:
///   op.impl_autograd(&save, &backward, {true, false});  // (Tensor output, Tensor count)
class OutputDifferentiability {
 public:
  OutputDifferentiability() = default;
  OutputDifferentiability(std::initializer_list<bool> flags) : flags_(std::vector<bool>(flags)) {}
  OutputDifferentiability(std::vector<bool> flags) : flags_(std::move(flags)) {}
  template <class T>
  OutputDifferentiability(const T&) {
    static_assert(detail::always_false<T>,
                  "[customop] output_differentiability must be a list of bools, one per return, "
                  "e.g. {true, false} or std::vector<bool>");
  }
  const std::optional<std::vector<bool>>& flags() const { return flags_; }

 private:
  std::optional<std::vector<bool>> flags_;
};

/// An op defined through customop; see define(). `Args` is the args struct (one field per
/// schema argument, in schema order); `Ret` the C++ return type (at::Tensor by default; a
/// std::tuple for several returns).
/// An Op lives for the whole process (define() returns a reference to it); register kernels
/// and the formula once, typically from a static initializer or a function-local static.
/// Example:
///   static auto& op = customop::define<ScaleArgs>("myns::scale(Tensor x, float alpha) -> Tensor");
///   op.impl(c10::DeviceType::CPU, &scale_cpu).impl_fake(&scale_fake);
template <class Args, class Ret = at::Tensor>
class Op final : public OpCore {
  static_assert(std::is_aggregate_v<Args>,
                "[customop] the args struct must be an aggregate (public fields, no "
                "constructors, no base classes) so Boost.PFR can read it field by field");
  using Returns = detail::ReturnTupleT<Ret>;
  static constexpr std::size_t kNumReturns = std::tuple_size_v<Returns>;
  static constexpr auto kReturnKinds = detail::ReturnKinds<Returns>::value;

 public:
  using ArgsType = Args;
  using ReturnType = Ret;
  /// True when every return is a single Tensor (at least one): such an op can have a shape
  /// function and out kernels.
  static constexpr bool kHasOutKernelForm = detail::kAllReturnsSingleTensors<Returns>;
  /// What an out kernel receives: const at::Tensor& (one return) or a tuple of them.
  using Outputs = std::conditional_t<kHasOutKernelForm, Ret, std::tuple<>>;
  /// What a shape function returns: one TensorSpec per Tensor return.
  using Specs = typename detail::SpecsOf<Returns>::type;
  using OutputsSnapshot = detail::OutputsSnapshot;
  /// What save_for_backward sees as the op's output: Ret, or an empty tuple for `void`.
  using Output = std::conditional_t<std::is_void_v<Ret>, std::tuple<>, Ret>;
  using OpCore::samples;  // samples(device, dtype), next to the registering samples(fn)

  /// Registers `kernel` for `device` (c10::DeviceType::CPU or CUDA). `kernel` is callable as
  /// `Ret(const Args&)`; a CPU kernel sees CPU tensors only, a CUDA kernel CUDA tensors and
  /// any CPU tensor the caller passed with them (ATen's rule for CPU scalars and index
  /// tensors: check a CPU argument's device before reading its data on the GPU).
  /// Throws c10::Error if `device` already has an impl (naming the first one's file:line).
  /// The kernel runs below autograd: its inputs do not require grad, and a Tensor argument is
  /// never undefined there (the glue refuses None for Tensor with c10::TypeError first).
  /// \param device  c10::DeviceType::CPU or c10::DeviceType::CUDA
  /// \param kernel  `Ret kernel(const Args&)`: returns new tensors (no views or aliases of the
  ///                inputs) on `device` (a CUDA kernel may also return CPU tensors), checked
  ///                after each call: an undefined output, one on another device or one that
  ///                shares memory with an argument is a c10::Error naming the op, the kernel,
  ///                the output and the argument. It writes only its customop::MutableTensor
  ///                fields (checked before it runs: not expanded, sharing memory with no other
  ///                argument) and the glue bumps their version counters after it returns.
  ///                An op with a shape function takes the form kernel(const Args&, outputs)
  ///                only: it fills the outputs the shape function states
  /// \param loc     where the registration is made; named in later errors
  /// \returns       *this, for chaining
  /// \throws c10::ValueError naming the op and `loc` when `device` is Meta (use impl_fake) or
  ///         neither CPU nor CUDA; c10::Error when `device` already has an impl, or (a wrapped
  ///         op) a kernel for it registered outside customop, or when an allocating kernel
  ///         (`Ret(const Args&)`, Ret not void) meets a shape function (naming both places). A
  ///         kernel not callable as `Ret(const Args&)` is a compile error.
  /// Example:
  ///   op.impl(c10::DeviceType::CPU, [](const ScaleArgs& a) { return a.x * a.alpha; });
  template <class F>
  Op& impl(c10::DeviceType device, F kernel,
           std::source_location loc = std::source_location::current()) {
    if constexpr (kHasOutKernelForm && std::is_invocable_v<F&, const Args&, const Outputs&>) {
      static_assert(std::is_void_v<std::invoke_result_t<F&, const Args&, const Outputs&>>,
                    "[customop] an out kernel kernel(const Args&, outputs) writes into the "
                    "preallocated outputs and returns void");
      note_out_kernel(device, loc);
      auto shared = std::make_shared<F>(std::move(kernel));
      set_kernel(
          device,
          [this, shared, device, loc](torch::jit::Stack* stack) {
            const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
            const Outputs outs = allocate_outputs(args, /*meta=*/false);
            const OutputsSnapshot before = snapshot(outs);
            check_output_devices(before, device, loc);
            (*shared)(args, outs);
            check_outputs_kept(before, snapshot(outs), device, loc);
            detail::push_returns(*stack, Ret(outs));
          },
          loc);
      // The same kernel serves the out= overload (an op that writes no argument has one).
      if (out_handle() != nullptr) {
        set_out_kernel(
            device,
            [this, shared, device, loc](torch::jit::Stack* stack) {
              run_out_variant(stack, device, shared.get(), loc);
            },
            loc);
      }
    } else {
      static_assert(std::is_invocable_v<F&, const Args&>,
                    "[customop] a kernel must be callable as kernel(const Args&), or (an op "
                    "with a shape function) as kernel(const Args&, outputs) with outputs a "
                    "const at::Tensor& (one Tensor return) or const std::tuple<at::Tensor, "
                    "...>& (several)");
      static_assert(std::is_convertible_v<std::invoke_result_t<F&, const Args&>, Ret>,
                    "[customop] the kernel's return type must convert to the op's Ret (the "
                    "second template argument of customop::define)");
      if constexpr (std::is_void_v<Ret>) {
        // An op that returns nothing runs its shape function (its checks) first, on every
        // device, as the fake kernel does (whichever of shape() and impl() comes first).
        set_kernel(
            device,
            [this, kernel = std::move(kernel)](torch::jit::Stack* stack) mutable {
              const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
              if (checks_) checks_(args);
              kernel(args);
            },
            loc);
      } else {
        // Outputs come from the shape function or from allocating kernels, not both.
        if constexpr (kHasOutKernelForm) note_allocating_kernel(device, loc);
        set_kernel(
            device,
            [kernel = std::move(kernel)](torch::jit::Stack* stack) mutable {
              const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
              detail::call_and_push<Ret>(*stack, kernel, args);
            },
            loc);
      }
    }
    return *this;
  }

  /// Declares the op's shape function: `fn(const Args&)` returns a customop::TensorSpec per
  /// Tensor return (one TensorSpec, or a std::tuple of them for several returns), over
  /// symbolic sizes (customop/shape.h). From it customop registers the fake (Meta) kernel, in
  /// C++, and allocates the outputs of out kernels (`impl(device, kernel(const Args&, outs))`)
  /// with exactly the sizes, strides and dtype it states. Put the op's argument checks in it:
  /// they then run on every device and under torch.compile. An op that returns nothing (`-> ()`,
  /// one that only writes its customop::MutableTensor fields) states no output: its shape
  /// function is `void fn(const Args&)`, its checks; the fake kernel is that function, and
  /// every device's kernel runs it first. Ops returning Tensor[], int, float or bool cannot
  /// have one (the number of outputs or their values depend on data): use impl_fake and
  /// kernels that allocate.
  /// \param fn   `TensorSpec fn(const Args&)` (or std::tuple<TensorSpec, ...>; `void` for an op
  ///             that returns nothing)
  /// \param loc  where it is declared; named in later errors
  /// \returns    *this, for chaining
  /// \throws c10::Error naming the op and both locations when a shape function or a fake
  ///         kernel is already registered, or a kernel that allocates its outputs
  ///         (kernel(const Args&)) is. A wrong signature, or an op with a non-Tensor return, is
  ///         a compile error.
  /// Example:
  ///   op.shape([](const ScaleArgs& a) { return customop::TensorSpec::like(a.x); })
  ///     .impl(c10::DeviceType::CPU, [](const ScaleArgs& a, const at::Tensor& out) {
  ///       at::mul_out(out, a.x, a.alpha);
  ///     });
  template <class F>
  Op& shape(F fn, std::source_location loc = std::source_location::current()) {
    static_assert(kHasOutKernelForm || std::is_void_v<Ret>,
                  "[customop] shape(): every return must be a Tensor, or the op returns "
                  "nothing (an op returning Tensor[], int, float or bool has no shape function: "
                  "use impl_fake and kernels that allocate)");
    if constexpr (std::is_void_v<Ret>) {
      static_assert(std::is_invocable_v<F&, const Args&> &&
                        std::is_void_v<std::invoke_result_t<F&, const Args&>>,
                    "[customop] the shape function of an op that returns nothing states no "
                    "output: it is callable as void fn(const Args&) and holds the op's checks");
      if (!has_fake_kernel()) checks_ = [fn = std::move(fn)](const Args& a) { fn(a); };
      set_fake_kernel(
          [this](torch::jit::Stack* stack) {
            const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
            checks_(args);
          },
          loc);
      note_shape(loc);
    } else {
      static_assert(std::is_invocable_v<F&, const Args&> &&
                        std::is_convertible_v<std::invoke_result_t<F&, const Args&>, Specs>,
                    "[customop] a shape function is callable as fn(const Args&) and returns a "
                    "customop::TensorSpec per Tensor return (std::tuple<TensorSpec, ...> for "
                    "several)");
      check_no_allocating_kernel(loc);
      // NB: the function is stored before the fake kernel that calls it is published; a second
      // declaration is refused (by set_fake_kernel) before anything is replaced.
      if (!has_fake_kernel()) {
        shape_ = [fn = std::move(fn)](const Args& a) -> Specs { return fn(a); };
        if constexpr (kNumReturns == 1) {
          set_result_spec([this](torch::jit::Stack& stack) {
            return spec_array(shape_(detail::args_from_stack<Args>(stack, /*consume=*/false)))[0];
          });
        }
      }
      set_fake_kernel(
          [this](torch::jit::Stack* stack) {
            const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
            detail::push_returns(*stack, Ret(allocate_outputs(args, /*meta=*/true)));
          },
          loc);
      note_shape(loc);
      if (out_handle() != nullptr) {
        set_out_kernel(
            c10::DeviceType::Meta,
            [this, loc](torch::jit::Stack* stack) {
              run_out_variant(stack, c10::DeviceType::Meta,
                              static_cast<void (*)(const Args&, const Outputs&)>(nullptr), loc);
            },
            loc);
      }
    }
    return *this;
  }

  /// Declares the op's in-place variant, `ns::name_(Tensor(a!) x, <the other arguments>) ->
  /// Tensor(a!)` (x: the op's first argument), tagged at::Tag::inplace so torch.compile and
  /// torch.export treat it as ATen's in-place ops. It runs the functional op (shape function
  /// and kernel, every device, Meta included) and copies the result into x, which must have
  /// the result's sizes and dtype (else c10::Error naming both, and x is left unchanged); x may
  /// share memory with another argument. An expanded x (stride 0) is refused. Autograd: by
  /// default (InplaceGrad::kRefuse) it is not differentiable, and under grad mode an argument
  /// that requires grad is refused, naming it; InplaceGrad::kThroughFunctional opts in to grads
  /// through the functional op's backward (see InplaceGrad). x's version is bumped. The harness
  /// checks it against the functional op, values and grads (check_inplace_variant).
  /// \param grad  kRefuse (default) or kThroughFunctional
  /// \param write kCopy (default) or kDirect: the out kernel writes x itself (see InplaceWrite)
  /// \param loc   where it is declared; named in errors
  /// \returns    *this, for chaining
  /// \throws c10::ValueError naming the op and `loc` when the op writes its arguments, was
  ///         wrapped, does not return exactly one Tensor, has no positional Tensor first argument,
  ///         or `ns::name_` is already registered; c10::Error when declared twice.
  /// Example:
  ///   op.inplace_variant();   // myns::row_scale_(Tensor(a!) x, Tensor scale) -> Tensor(a!)
  ///   // or, differentiable in training: op.inplace_variant(InplaceGrad::kThroughFunctional);
  ///   // an elementwise out kernel writes x directly (no result tensor, one pass):
  ///   op.inplace_variant(InplaceGrad::kRefuse, InplaceWrite::kDirect);
  Op& inplace_variant(InplaceGrad grad = InplaceGrad::kRefuse,
                      InplaceWrite write = InplaceWrite::kCopy,
                      std::source_location loc = std::source_location::current()) {
    define_inplace_variant(grad, write, loc);
    return *this;
  }

  /// The op's shape function applied to `args` (what the fake kernel and the out kernels'
  /// allocation use).
  /// \throws c10::Error naming the op when it declared none; whatever the function throws
  Specs output_specs(const Args& args) const {
    TORCH_CHECK(static_cast<bool>(shape_), name(), ": no shape function declared (op.shape)");
    return shape_(args);
  }

  /// Registers the fake kernel (the legacy CustomOp API's impl_abstract, torch.library's
  /// register_fake) at the Meta dispatch key: `kernel(const Args&) -> Ret` gets meta tensors
  /// (FakeTensors under torch.compile / torch.export / opcheck) and returns outputs with the
  /// shapes, dtypes and strides the real kernels return, without reading any data. Keep shapes
  /// symbolic (`sym_sizes()`, `sym_size(d)`, `at::empty_symint`, `at::empty_strided_symint`),
  /// or torch.compile(dynamic=True) specialises and recompiles per shape. (op.h brings no ATen
  /// functions: include <ATen/ops/empty.h> or <ATen/ATen.h> for them.)
  /// A return of int/float/bool is a data-dependent value no fake kernel can compute: such ops
  /// fail to compile here; return the value as a 0-dim Tensor instead.
  /// Throws c10::Error naming the op if a fake kernel is already registered (naming the first
  /// one's file:line) or the op already has a Meta kernel from outside customop.
  /// \param kernel  `Ret kernel(const Args&)` on meta tensors (the built-in ops run their
  ///                argument checks there too, so torch.compile reports bad inputs)
  /// \param loc     where the registration is made; named in later errors
  /// \returns       *this, for chaining
  /// \throws c10::Error as above. Without a fake kernel, a call on meta tensors throws
  ///         c10::Error naming the op and impl_fake.
  ///
  /// Example:
  ///   op.impl_fake([](const ScaleArgs& a) { return at::empty_symint(a.x.sym_sizes(), a.x.options()); });
  template <class F>
  Op& impl_fake(F kernel, std::source_location loc = std::source_location::current()) {
    static_assert(std::is_invocable_v<F&, const Args&>,
                  "[customop] a fake kernel must be callable as kernel(const Args&)");
    static_assert(std::is_convertible_v<std::invoke_result_t<F&, const Args&>, Ret>,
                  "[customop] the fake kernel's return type must convert to the op's Ret (the "
                  "second template argument of customop::define)");
    static_assert(detail::kAllReturnsTensors<Returns>,
                  "[customop] impl_fake: this op returns an int, float or bool, a data-dependent "
                  "value that a fake kernel cannot compute (it sees no data); return it as a "
                  "0-dim at::Tensor instead");
    set_fake_kernel(
        [kernel = std::move(kernel)](torch::jit::Stack* stack) mutable {
          const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
          detail::call_and_push<Ret>(*stack, kernel, args);
        },
        loc);
    return *this;
  }

  /// Declares a reference implementation: the same function written with ATen ops (so
  /// autograd differentiates it), `Ret fn(const Args&)`. The float16/bfloat16 gradcheck
  /// (customop-gradcheck --dtype bfloat16) takes its float64 run as the precise one and its
  /// error in the low dtype as the baseline a kernel is allowed (the low-precision rule,
  /// customop/gradcheck/options.h). It must take every dtype the op takes, float64 included.
  /// \param fn  `Ret fn(const Args&)`; not registered with the dispatcher
  /// \returns   *this, for chaining
  /// \throws nothing; a wrong signature is a compile error.
  /// Example:
  ///   op.reference([](const ScaleArgs& a) { return a.x * a.alpha; });
  template <class F>
  Op& reference(F fn) {
    static_assert(std::is_invocable_v<F&, const Args&>,
                  "[customop] reference must be callable as fn(const Args&) and return the op's "
                  "return type");
    set_reference([fn = std::move(fn)](torch::jit::Stack* stack) {
      const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
      detail::call_and_push<Ret>(*stack, fn, args);
    });
    return *this;
  }

  /// Declares how the op runs under autocast (torch.autocast in Python, at::autocast in C++;
  /// eager, torch.compile and torch.export all see it): a kernel at the AutocastCPU and
  /// AutocastCUDA dispatch keys casts the floating tensor arguments on the autocast device as
  /// `policy` says (customop/autocast.h: kFloat32, kLowerPrecision, kPromote, kRefuse; float64
  /// and other devices' tensors are never cast), then runs the op below autocast. Outputs keep
  /// the dtype the op computes them in. Without a declaration, the op sees whatever dtypes
  /// the ops before it produced.
  /// \param policy  what to cast, or kRefuse
  /// \param loc     where the declaration is made; named in later errors
  /// \returns       *this, for chaining
  /// \throws c10::Error naming the op and both locations when a policy is already declared, or
  ///         when the op has an autocast kernel registered outside customop.
  ///
  /// Example:
  ///   op.impl(c10::DeviceType::CPU, &rms_norm_cpu).autocast(customop::AutocastPolicy::kFloat32);
  Op& autocast(AutocastPolicy policy, std::source_location loc = std::source_location::current()) {
    set_autocast(policy, loc);
    return *this;
  }

  /// Declares how the op runs under torch.func.vmap (customop/batching.h): `rows` (the op
  /// treats leading dims as independent rows: one call serves the batch) or `loop` (one call
  /// per example, for any op). Registered at the FuncTorchBatched dispatch key, so vmap, and
  /// the transforms built on it (jacrev, jacfwd, hessian, per-sample grads), run without
  /// torch's per-example fallback, which cannot take a Tensor[] argument.
  /// \param rule  the rule; argument names as the schema spells them
  /// \param loc   where the declaration is made; named in later errors
  /// \returns     *this, for chaining
  /// \throws c10::ValueError naming the op and the argument when a row argument is unknown or
  ///         not a tensor, a dim argument unknown or not int, or `rows` is declared for an op
  ///         with a non-tensor return; c10::Error naming both locations when a rule is already
  ///         declared.
  /// Example:
  ///   op.vmap(customop::BatchRule::rows({"input"}));
  Op& vmap(BatchRule rule, std::source_location loc = std::source_location::current()) {
    set_batch_rule(std::move(rule), loc);
    return *this;
  }

  /// The general form of a batching rule: `Output fn(const Args& batched, const BatchInfo&
  /// info)` computes the whole batch itself (a reshape that folds the batch into a dim the
  /// kernel already loops over, a call per example, another op). In `batched`, every batched
  /// Tensor field (Tensor, Tensor?, Tensor[] element) has the batch at dim 0, size
  /// `info.size()`; an unbatched one is as the caller passed it (`info.batched(name)` says
  /// which); other fields are the call's values. fn returns the outputs with the batch at
  /// dim 0 of every Tensor (and Tensor[] element), each example's output at its index. Call
  /// this op (or any other) inside fn as usual: vmap's batching is off for this op while fn
  /// runs, autograd and the device kernels are not. Registered at FuncTorchBatched as
  /// vmap(BatchRule).
  /// \param fn   the rule, as above
  /// \param loc  where the declaration is made; named in later errors
  /// \returns    *this, for chaining
  /// \throws as vmap(BatchRule) at declaration. At call time: c10::Error naming the op, the
  ///         rule's location and the return when a returned tensor is 0-d or its dim 0 is not
  ///         the batch size; fn's own errors, unchanged.
  /// Example (an op whose kernel takes [N, C, *]: fold the batch into N):
  ///   op.vmap([](const Args& a, const customop::BatchInfo& b) {
  ///     if (!b.batched("x")) return op(a);  // only other args batched: see the example op
  ///     at::Tensor x = a.x.flatten(0, 1);   // [B, N, C, *] -> [B * N, C, *]
  ///     return op(Args{.x = x, .bias = a.bias}).unflatten(0, {b.size(), -1});
  ///   });
  template <class F>
  requires std::is_invocable_v<F&, const Args&, const BatchInfo&> Op& vmap(
      F fn, std::source_location loc = std::source_location::current()) {
    static_assert(
        std::is_convertible_v<std::invoke_result_t<F&, const Args&, const BatchInfo&>, Output>,
        "[customop] a batching rule returns the op's outputs in its return type, batch at dim 0");
    set_batch_rule(BatchRule::general([fn = std::move(fn)](torch::jit::Stack& stack,
                                                           const BatchInfo& info) mutable {
                     const Args a = detail::args_from_stack<Args>(stack, /*consume=*/true);
                     detail::push_returns(stack, Output(fn(a, info)));
                   }),
                   loc);
    return *this;
  }

  /// Declares how the op runs on DTensors (customop/sharding.h): pointwise, reduction (fixed
  /// dims or a dim argument), replicate, or the general form, with partial-sum outputs.
  /// `import customop` and `customop.load_library` register it with DTensor;
  /// `customop.gradcheck.check(..., sharding=True)` and `customop-gradcheck --sharding` check
  /// it against the op on whole tensors.
  /// \param rule  the rule; argument and return names as the schema spells them
  /// \param loc   where the declaration is made; named in later errors
  /// \returns     *this, for chaining
  /// \throws c10::ValueError naming the op and the argument or return when the rule names an
  ///         unknown one or one of the wrong type (a dim argument that is not int or int[], a
  ///         keepdim argument that is not bool, a strategy input that is not a tensor, a
  ///         strategy with the wrong number of outputs); c10::Error naming both locations when
  ///         a rule is already declared.
  /// Example:
  ///   op.sharding(customop::Sharding::reduction("dim", "keepdim"));
  Op& sharding(Sharding rule, std::source_location loc = std::source_location::current()) {
    set_sharding(std::move(rule), loc);
    return *this;
  }

  /// Registers the first half of the backward formula: `fn(const Args& inputs, const Ret&
  /// output) -> Saved`, run once per forward (never during backward). `Saved` is any
  /// aggregate: its at::Tensor / std::optional<at::Tensor> / std::vector<at::Tensor> fields
  /// are saved through the autograd context, the rest are kept as they are.
  /// Takes effect once backward is registered too; with only one half registered, a call
  /// through autograd throws c10::Error naming the half that is missing.
  /// \param fn   `Saved fn(const Args& inputs, const Ret& output)`; `output` is what the
  ///             kernel returned (Tensor returns as the caller gets them)
  /// \param loc  where the registration is made; named in later errors
  /// \returns    *this, for chaining
  /// \throws c10::Error naming the op and both locations when save_for_backward is already
  ///         registered, or the op has an Autograd, AutogradCPU, AutogradCUDA or
  ///         CompositeImplicitAutograd kernel from outside customop; c10::TypeError when
  ///         backward is registered with another saved-state type. A non-aggregate Saved is a
  ///         compile error.
  /// Example:
  ///   op.impl_save_for_backward(
  ///       [](const ScaleArgs& a, const at::Tensor&) { return ScaleSaved{a.alpha}; });
  template <class F>
  Op& impl_save_for_backward(F fn, std::source_location loc = std::source_location::current()) {
    static_assert(std::is_invocable_v<F&, const Args&, const Output&>,
                  "[customop] save_for_backward must be callable as fn(const Args& inputs, "
                  "const Ret& output)");
    using Saved = std::decay_t<std::invoke_result_t<F&, const Args&, const Output&>>;
    static_assert(std::is_aggregate_v<Saved>,
                  "[customop] save_for_backward must return an aggregate struct (the saved "
                  "state), e.g. struct Saved { at::Tensor x; double alpha; }");
    saved_type_.check(name(), typeid(Saved), c10::demangle_type<Saved>(), "save_for_backward", loc);
    note_save_for_backward(loc);
    saved_type_.record(typeid(Saved), c10::demangle_type<Saved>(), "save_for_backward");
    save_ = [fn = std::move(fn)](const Args& args,
                                 const Output& out) -> c10::intrusive_ptr<detail::SavedStateBase> {
      auto state = c10::make_intrusive<detail::SavedState<Saved>>();
      state->value = fn(args, out);
      return state;
    };
    take_tensors_ = [](detail::SavedStateBase& s) {
      return static_cast<detail::SavedState<Saved>&>(s).take_tensors();
    };
    publish_save_for_backward();
    return *this;
  }

  /// Registers the second half: `fn(const Saved&, grads...)` with one grad per return
  /// (`at::Tensor` for Tensor, `std::vector<at::Tensor>` for Tensor[], customop::NoGrad for
  /// int/float/bool; undefined grads arrive as zeros). It returns customop::Grads by argument
  /// name, a c10::IValue dict, or a typed aggregate with one field per Tensor-like argument.
  /// The result is validated when backward returns, exactly as the reference does.
  /// \param fn                        `G fn(const Saved&, grads...)`, parameter types spelled
  ///                                  out (no auto); G is Grads, c10::IValue or a typed
  ///                                  aggregate whose fields are named after the Tensor-like
  ///                                  arguments, in schema order
  /// \param output_differentiability  one bool per return (see OutputDifferentiability);
  ///                                  default: every Tensor return is differentiable
  /// \param loc                       where the registration is made; named in later errors
  /// \returns                         *this, for chaining
  /// \throws c10::Error naming the op when backward is already registered (both locations), or
  ///         the op has an Autograd, AutogradCPU, AutogradCUDA or CompositeImplicitAutograd
  ///         kernel from outside customop; c10::ValueError when output_differentiability does
  ///         not have one flag per return, or a typed grads struct's field names differ from
  ///         the Tensor-like arguments'; c10::TypeError when save_for_backward is registered
  ///         with another saved-state type. Bad parameter types are compile errors.
  /// \throws at backward time, c10::Error "In the backward function defined for <op> at
  ///         <file:line> using the CustomOp API, ..." when the grads fail a check of Grads.
  /// Example:
  ///   op.impl_backward([](const ScaleSaved& s, const at::Tensor& g) {
  ///     return customop::Grads{{"x", g * s.alpha}};
  ///   });
  template <class F>
  Op& impl_backward(F fn, const OutputDifferentiability& output_differentiability = {},
                    std::source_location loc = std::source_location::current()) {
    // NB: an if-constexpr chain, so that after the first failed check nothing else is
    // instantiated with the bad types (one error, not pages of them).
    using Traits = detail::FunctionTraits<std::decay_t<F>>;
    if constexpr (!Traits::known) {
      static_assert(detail::always_false<F>,
                    "[customop] backward must be a function or a lambda with explicit parameter "
                    "types (no auto): (const Saved&, grads...)");
    } else if constexpr (std::tuple_size_v<typename Traits::args> != 1 + kNumReturns) {
      static_assert(detail::always_false<F>,
                    "[customop] backward takes the saved state then exactly one grad per return "
                    "of the op");
    } else {
      using Saved = std::decay_t<std::tuple_element_t<0, typename Traits::args>>;
      using Inv = detail::BackwardInvocable<Returns, F, Saved>;
      if constexpr (!Inv::value) {
        static_assert(detail::always_false<F>,
                      "[customop] backward's grad parameters must be, per return: const "
                      "at::Tensor& (Tensor), const std::vector<at::Tensor>& (Tensor[]), "
                      "customop::NoGrad (int, float, bool)");
      } else {
        using R = typename Inv::result;
        if constexpr (detail::grads_type_ok<Args, R>()) {
          register_backward<Saved, R>(std::move(fn), output_differentiability, loc);
        }
      }
    }
    return *this;
  }

  /// Both halves at once; here a mismatch between the Saved type save_for_backward returns
  /// and the one backward takes is a compile error.
  /// \param save, backward, output_differentiability, loc  as for impl_save_for_backward and
  ///                                                      impl_backward
  /// \returns  *this, for chaining
  /// \throws as impl_save_for_backward, then impl_backward (save_for_backward is registered
  ///         first, so a refused backward leaves it registered).
  /// Example:
  ///   op.impl_autograd(&scale_save, &scale_backward);
  template <class S, class B>
  Op& impl_autograd(S save, B backward, OutputDifferentiability output_differentiability = {},
                    std::source_location loc = std::source_location::current()) {
    using Saved = std::decay_t<std::invoke_result_t<S&, const Args&, const Output&>>;
    using Traits = detail::FunctionTraits<std::decay_t<B>>;
    static_assert(Traits::known, "[customop] backward must have explicit parameter types");
    static_assert(
        std::is_same_v<Saved, std::decay_t<std::tuple_element_t<0, typename Traits::args>>>,
        "[customop] backward's first parameter must be the type save_for_backward returns");
    impl_save_for_backward(std::move(save), loc);
    return impl_backward(std::move(backward), output_differentiability, loc);
  }

  /// Registers the op's forward-mode AD formula, its JVP (Jacobian-vector product
  /// J(primals) . tangents), used by torch.autograd.forward_ad, torch.func.jvp, jacfwd and
  /// hessian (= jacfwd(jacrev)). It runs after the kernel, outside it, with autograd active, so
  /// its own ops are differentiated in turn (nested transforms, hessian).
  /// \param fn   `Output fn(const Args& primals, const Args& tangents, const Output& result)`:
  ///             `tangents` is an Args whose Tensor fields (Tensor, Tensor?, Tensor[] elements)
  ///             hold the inputs' tangents, each of its primal's shape, dtype and device, or an
  ///             undefined tensor where the input has none (a zero tangent; a Tensor? that was
  ///             None stays None); its other fields equal `primals`'. `result` is what the
  ///             kernel returned. fn returns the outputs' tangents in the op's return type: per
  ///             Tensor return a tensor of that output's shape (undefined: a zero tangent), per
  ///             Tensor[] return one per element; non-tensor returns are ignored. Written with
  ///             the dispatcher's ops (at::, other ops' calls), not by reading tensor values.
  /// \param loc  where the registration is made; named in later errors
  /// \returns    *this, for chaining
  /// \throws c10::Error naming the op and both locations when a JVP is already registered, or
  ///         the op writes an argument in place. At call time: c10::Error naming the op and the
  ///         return when a tangent's shape, dtype or device differs from its output's.
  /// Without a JVP, a call whose input carries a tangent raises c10::NotImplementedError
  /// naming the op, the argument and impl_jvp (never a silent zero tangent).
  /// Example (scale: out = x * alpha, so d out = dx * alpha):
  ///   op.impl_jvp([](const ScaleArgs& p, const ScaleArgs& t, const at::Tensor&) {
  ///     return t.x.defined() ? t.x * p.alpha : at::Tensor();
  ///   });
  template <class F>
  Op& impl_jvp(F fn, std::source_location loc = std::source_location::current()) {
    static_assert(std::is_invocable_v<F&, const Args&, const Args&, const Output&>,
                  "[customop] a JVP must be callable as fn(const Args& primals, const Args& "
                  "tangents, const Ret& result)");
    static_assert(
        std::is_convertible_v<std::invoke_result_t<F&, const Args&, const Args&, const Output&>,
                              Output>,
        "[customop] a JVP returns the outputs' tangents in the op's return type");
    note_jvp(loc);
    jvp_ = [fn = std::move(fn)](torch::jit::Stack& primals, torch::jit::Stack& tangents,
                                const torch::jit::Stack& outputs, torch::jit::Stack& result) {
      const Args p = detail::args_from_stack<Args>(primals, /*consume=*/false);
      const Args t = detail::args_from_stack<Args>(tangents, /*consume=*/false);
      torch::jit::Stack returns = outputs;
      const Output out = detail::pop_returns<Ret>(returns);
      detail::push_returns(result, Output(fn(p, t, out)));
    };
    publish_jvp();
    return *this;
  }

  /// The backward formula as a second op with hand-written kernels (the way fused CUDA ops
  /// ship a backward kernel): defines the backward op "<ns>::<name>_backward" with the args
  /// struct `BwdArgs`, its schema inferred from `BwdArgs` (define("ns::name")) and its returns
  /// one grad per Tensor-like argument of this op in schema order (at::Tensor for a Tensor or
  /// Tensor? argument, std::vector<at::Tensor> for a Tensor[]; a std::tuple when there are
  /// several), and registers this op's formula:
  ///   - save_for_backward is `save(const Args& inputs, const Ret& output) -> BwdArgs`, run
  ///     once per forward, leaving the leading grad fields empty (declare them with `{}`,
  ///     `at::Tensor grad{};`, so designated initializers may omit them under -Wextra);
  ///   - backward fills the leading fields of `BwdArgs` with the grads of this op's outputs
  ///     (one per Tensor or Tensor[] return, in order, of that type), calls the backward op
  ///     through the dispatcher and validates its returns as grads by argument name (an
  ///     undefined Tensor is None: no grad), with every check impl_backward makes.
  /// Register the backward op's kernels on the op this returns (`impl(device, kernel)`, and
  /// `impl_fake` for torch.compile/torch.export, which then trace the backward as one call).
  /// Double backward: the backward op is an op like any other. With a formula of its own
  /// (`impl_autograd`, which may call the backward op again) double backward runs through it;
  /// without one, a backward with create_graph=True whose inputs require grad raises "Autograd
  /// has not been implemented for operator <ns>::<name>_backward", never a wrong answer.
  /// Throws c10::Error naming the op if a formula half is already registered or the backward
  /// op is already defined (naming the first definition's file:line).
  /// \param save                      `BwdArgs save(const Args& inputs, const Ret& output)`
  /// \param output_differentiability  as for impl_backward
  /// \param loc                       where the registration is made; named in later errors
  /// \returns  the backward op, `Op<BwdArgs, R>` with R one grad per Tensor-like argument
  /// \throws as impl_save_for_backward and define() (for "<ns>::<name>_backward") and
  ///         impl_backward; misuse of BwdArgs or `save` is a compile error.
  ///
  /// Example (StyleGAN2's fused bias + leaky ReLU; examples/fused_leaky_relu):
  ///   struct BwdArgs { at::Tensor grad{}; at::Tensor out; double negative_slope; double scale; };
  ///   auto& bwd = op.define_backward<BwdArgs>([](const Args& a, const at::Tensor& out) {
  ///     return BwdArgs{.out = out, .negative_slope = a.negative_slope, .scale = a.scale};
  ///   });
  ///   bwd.impl(c10::DeviceType::CPU, [](const BwdArgs& b) { return backward_cpu(b); });  // -> (grad_x, grad_bias)
  template <class BwdArgs, class S>
  Op<BwdArgs, detail::BackwardOpRet<Args>>& define_backward(
      S save, const OutputDifferentiability& output_differentiability = {},
      std::source_location loc = std::source_location::current());

  /// Calls the op through the dispatcher (every dispatch key, autograd included).
  /// Throws whatever the kernel or the autograd glue throws.
  /// \param args  one field per schema argument; tensors on one device (CPU, CUDA or Meta),
  ///              dense (strided)
  /// \returns     the kernel's returns, as `Ret`
  /// \throws c10::TypeError when a Tensor argument (or an element of a Tensor[]) is undefined;
  ///         c10::NotImplementedError when the device has no impl, a tensor is not dense
  ///         (sparse, quantized, nested), an input requires grad under grad mode and no
  ///         formula is registered, or an input carries a forward-mode tangent and no JVP is
  ///         registered (impl_jvp); c10::Error when there is no tensor to run on
  ///         (every Tensor? None, every Tensor[] empty), on meta tensors without impl_fake,
  ///         when only one formula half is registered, or output_differentiability marks a
  ///         non-tensor return; and the kernel's own errors, unchanged.
  /// Example:
  ///   at::Tensor y = op(ScaleArgs{.x = at::randn({4}), .alpha = 2.0});
  Ret operator()(const Args& args) const {
    torch::jit::Stack stack;
    stack.reserve(std::max(detail::kNumFields<Args>, kNumReturns));
    detail::push_args(stack, args);
    handle().callBoxed(stack);
    return detail::pop_returns<Ret>(stack);
  }

  /// Registers sample inputs for the gradcheck harness: `fn(c10::Device, c10::ScalarType
  /// dtype)` returns `std::vector<std::pair<std::string, Args>>` (label, args). Cover
  /// non-contiguous, broadcast and edge sizes; avoid points where the op has a kink.
  /// A second call replaces the generator.
  /// \param fn  `std::vector<std::pair<std::string, Args>> fn(c10::Device, c10::ScalarType)`:
  ///            tensors on that device, floating ones of that dtype (kFloat or kDouble)
  /// \returns   *this, for chaining
  /// \throws nothing at registration; a wrong signature is a compile error
  /// Example:
  ///   op.samples([](c10::Device d, c10::ScalarType t) {
  ///     auto x = at::randn({4}, at::TensorOptions(d).dtype(t));
  ///     return std::vector<std::pair<std::string, ScaleArgs>>{{"[4]", {x, 2.0}}};
  ///   });
  template <class F>
  Op& samples(F fn) {
    using R = std::invoke_result_t<F&, c10::Device, c10::ScalarType>;
    static_assert(std::is_same_v<R, std::vector<std::pair<std::string, Args>>>,
                  "[customop] samples() takes fn(c10::Device, c10::ScalarType) returning "
                  "std::vector<std::pair<std::string, Args>>");
    set_sample_generator([fn = std::move(fn)](c10::Device d, c10::ScalarType t) mutable {
      std::vector<Sample> out;
      for (auto& [label, args] : fn(d, t)) out.push_back({label, to_stack(args)});
      return out;
    });
    return *this;
  }

  /// The args struct as the dispatcher's boxed arguments, in schema order.
  /// \param args  the args struct
  /// \returns     one IValue per field, in order (what c10::OperatorHandle::callBoxed takes)
  /// \throws nothing
  /// Example:
  ///   torch::jit::Stack s = Op<ScaleArgs>::to_stack(ScaleArgs{.x = x, .alpha = 2.0});
  static torch::jit::Stack to_stack(const Args& args) {
    torch::jit::Stack stack;
    detail::push_args(stack, args);
    return stack;
  }

 private:
  template <class A, class R>
  friend Op<A, R>& define(std::string_view, std::source_location);
  template <class A, class R>
  friend Op<A, R>& wrap(std::string_view, std::source_location);

  Op(std::string_view schema, std::source_location loc)
      : OpCore(schema, detail::field_infos<Args>(), kReturnKinds, loc) {
    check_struct_defaults(to_stack(Args{}));
  }
  Op(std::string_view name, std::source_location loc, bool wrap)
      : OpCore(name, detail::field_infos<Args>(), kReturnKinds, loc, wrap) {
    check_struct_defaults(to_stack(Args{}));
  }

  template <class Saved, class R, class F>
  void register_backward(F fn, const OutputDifferentiability& output_differentiability,
                         const std::source_location& loc) {
    constexpr bool returns_ok = []<std::size_t... I>(std::index_sequence<I...>) {
      return (detail::kReturnHasBackward<std::tuple_element_t<I, Returns>> && ...);
    }
    (std::make_index_sequence<kNumReturns>{});
    saved_type_.check(name(), typeid(Saved), c10::demangle_type<Saved>(), "backward", loc);
    if constexpr (!std::is_same_v<R, Grads> && !std::is_same_v<R, c10::IValue>) {
      check_grads_field_names(boost::pfr::names_as_array<R>(), c10::demangle_type<R>(), loc);
    }
    note_backward(loc, output_differentiability.flags(), returns_ok);
    saved_type_.record(typeid(Saved), c10::demangle_type<Saved>(), "backward");
    backward_ = [this, fn = std::move(fn)](
                    detail::SavedStateBase& base, const std::vector<at::Tensor>& saved_tensors,
                    std::vector<at::Tensor>& grad_outputs, std::vector<at::Tensor>& flat) mutable {
      const auto& state = static_cast<const detail::SavedState<Saved>&>(base);
      const Saved saved = state.restore(saved_tensors);
      auto grads = detail::take_grads<Returns>(grad_outputs, state);
      R result = std::apply([&](auto&... g) { return fn(saved, g...); }, grads);
      // One validation path for every kind of grads (the reference's checks and messages).
      if constexpr (std::is_same_v<R, Grads>) {
        grads_to_flat(result, state.info, flat);
      } else if constexpr (std::is_same_v<R, c10::IValue>) {
        ivalue_grads_to_flat(result, state.info, flat);
      } else {
        grads_to_flat(detail::typed_grads_to_named(result), state.info, flat);
      }
    };
    publish_backward();
  }

  c10::intrusive_ptr<detail::SavedStateBase> save_boxed(
      torch::jit::Stack& args, const torch::jit::Stack& outputs,
      std::vector<at::Tensor>& tensors_to_save) override {
    const Args a = detail::args_from_stack<Args>(args, /*consume=*/false);
    torch::jit::Stack returns = outputs;
    const Output result = [&] {
      if constexpr (std::is_void_v<Ret>) {
        return Output{};
      } else {
        return detail::pop_returns<Ret>(returns);
      }
    }();
    auto state = save_(a, result);
    tensors_to_save = take_tensors_(*state);
    return state;
  }

  void jvp_boxed(torch::jit::Stack& primals, torch::jit::Stack& tangents,
                 const torch::jit::Stack& outputs, torch::jit::Stack& result) override {
    jvp_(primals, tangents, outputs, result);
  }

  void backward_boxed(detail::SavedStateBase& state, const std::vector<at::Tensor>& saved_tensors,
                      std::vector<at::Tensor>& grad_outputs,
                      std::vector<at::Tensor>& flat) override {
    backward_(state, saved_tensors, grad_outputs, flat);
  }

  Outputs allocate_outputs(const Args& args, bool meta) const {
    if constexpr (kHasOutKernelForm) {
      const Specs specs = shape_(args);
      if constexpr (kNumReturns == 1) {
        return detail::allocate(specs, meta);
      } else {
        return std::apply(
            [&](const auto&... spec) { return Outputs{detail::allocate(spec, meta)...}; }, specs);
      }
    } else {
      return {};
    }
  }
  // Outputs <-> one tensor (TensorSpec) per return, in order.
  using OutArray = std::array<at::Tensor, kHasOutKernelForm ? kNumReturns : 0>;
  static OutArray to_array(const Outputs& outs) {
    if constexpr (!kHasOutKernelForm) {
      return {};
    } else if constexpr (kNumReturns == 1) {
      return {outs};
    } else {
      return std::apply([](const auto&... t) { return OutArray{t...}; }, outs);
    }
  }
  static Outputs from_array(const OutArray& a) {
    if constexpr (!kHasOutKernelForm) {
      return {};
    } else if constexpr (kNumReturns == 1) {
      return a[0];
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return Outputs{a[I]...}; }
      (std::make_index_sequence<kNumReturns>{});
    }
  }
  static std::array<TensorSpec, kHasOutKernelForm ? kNumReturns : 0> spec_array(const Specs& s) {
    if constexpr (!kHasOutKernelForm) {
      return {};
    } else if constexpr (kNumReturns == 1) {
      return {s};
    } else {
      return std::apply([](const auto&... x) { return std::array<TensorSpec, kNumReturns>{x...}; },
                        s);
    }
  }

  /// The out= overload's kernel (op_out_variant.cpp): the stack holds the functional arguments
  /// and one out tensor per return. The buffers are checked and resized as the shape function
  /// states; `kernel` (nullptr for the fake kernel) writes them directly when their strides are
  /// the stated ones, else fresh outputs that are then copied in. Leaves the out tensors.
  template <class K>
  void run_out_variant(torch::jit::Stack* stack, c10::DeviceType device, K* kernel,
                       const std::source_location& loc) const {
    if constexpr (kHasOutKernelForm) {
      OutArray outs;
      for (std::size_t k = kNumReturns; k-- > 0;) {
        outs[k] = stack->back().toTensor();
        stack->pop_back();
      }
      const Args args = detail::args_from_stack<Args>(*stack, /*consume=*/true);
      const auto specs = spec_array(shape_(args));
      bool direct = true;
      for (std::size_t k = 0; k < kNumReturns; ++k) {
        direct = prepare_out_buffer(k, outs[k], specs[k]) && direct;
      }
      if (kernel != nullptr) {
        const Outputs target = direct ? from_array(outs) : allocate_outputs(args, /*meta=*/false);
        const OutputsSnapshot before = snapshot(target);
        check_output_devices(before, device, loc);
        (*kernel)(args, target);
        check_outputs_kept(before, snapshot(target), device, loc);
        if (!direct) {
          const OutArray fresh = to_array(target);
          for (std::size_t k = 0; k < kNumReturns; ++k) outs[k].copy_(fresh[k]);
        }
      }
      detail::push_returns(*stack, Ret(from_array(outs)));
    }
  }

  static OutputsSnapshot snapshot(const Outputs& outs) {
    OutputsSnapshot shot;
    if constexpr (kHasOutKernelForm) {
      if constexpr (kNumReturns == 1) {
        shot.push_back(detail::OutputLayout::of(outs));
      } else {
        std::apply([&](const auto&... t) { (shot.push_back(detail::OutputLayout::of(t)), ...); },
                   outs);
      }
    }
    return shot;
  }

  std::function<Specs(const Args&)> shape_;
  // The shape function of an op that returns nothing: its checks, run before every kernel.
  std::function<void(const Args&)> checks_;
  std::function<c10::intrusive_ptr<detail::SavedStateBase>(const Args&, const Output&)> save_;
  std::function<std::vector<at::Tensor>(detail::SavedStateBase&)> take_tensors_;
  std::function<void(torch::jit::Stack&, torch::jit::Stack&, const torch::jit::Stack&,
                     torch::jit::Stack&)>
      jvp_;
  std::function<void(detail::SavedStateBase&, const std::vector<at::Tensor>&,
                     std::vector<at::Tensor>&, std::vector<at::Tensor>&)>
      backward_;
  detail::SavedTypeRecord saved_type_;
};

/// Defines the op `schema` ("ns::name(Tensor x, float alpha) -> Tensor") with the named
/// arguments of `Args` and the C++ return type `Ret`, and registers it with the dispatcher
/// (visible as torch.ops.ns.name). Rules of the reference: no alias returns, at least one
/// return, no overload name, no argument named self, no reserved namespace (aten, prim, prims,
/// at, torch, pytorch) and no '.' in the namespace. Beyond the reference, an op may write
/// Tensor arguments in place: `Tensor(a!)` in the schema, each in its own alias set, with a
/// customop::MutableTensor field (customop/arg_types.h); such an op may return nothing
/// (`-> ()`, Ret = void). A write the args struct does not declare is refused.
/// Unsupported field types and non-aggregate args structs are compile errors; field count,
/// types and names are checked against the schema here, and so are the struct's default
/// member initializers against the schema's defaults (see OpCore::check_struct_defaults).
///
/// With a bare name ("ns::name", no argument list) the schema is inferred from `Args` and
/// `Ret`, as torch.library.custom_op infers it from type hints: one argument per field, named
/// and typed after it (customop/arg_types.h), defaults from the default member initializers
/// (std::optional fields default to None), returns from `Ret`. For example
///   struct Args { at::Tensor x; double negative_slope = 0.2; std::optional<at::Tensor> bias; };
///   define<Args>("myns::leaky")  // myns::leaky(Tensor x, float negative_slope=0.2,
///                                //             Tensor? bias=None) -> Tensor
/// NB: an initializer of 0, 0.0, false, "" or {} cannot be told from none (the field is then
/// a required argument); write such a default in an explicit schema.
/// Throws c10::Error naming the op when the schema does not parse, breaks a rule, does not
/// match Args/Ret (naming field index, field, argument, expected and actual C++ type), or the
/// op is already defined (naming the first definition's file:line).
/// \param schema  "ns::name(<args>) -> <returns>", or a bare "ns::name" to infer it
/// \param loc     where the op is defined; named in later errors
/// \returns       the op, owned by the customop registry for the life of the process
/// \throws c10::ValueError when the schema does not parse or breaks a rule above, an argument
///         has a type customop does not support, a field is named differently from its
///         argument, a struct default disagrees with the schema's, or (bare name) the schema
///         cannot be inferred; c10::TypeError when field count or a field's C++ type does not
///         match the schema, or `Ret` does not match its returns; c10::Error when the op is
///         already defined (through customop or in the dispatcher).
/// Example:
///   auto& op = customop::define<ScaleArgs>("myns::scale(Tensor x, float alpha) -> Tensor");
template <class Args, class Ret = at::Tensor>
Op<Args, Ret>& define(std::string_view schema,
                      std::source_location loc = std::source_location::current()) {
  std::string inferred;
  if (schema.find('(') == std::string_view::npos) {
    inferred =
        detail::infer_schema(schema, detail::field_infos<Args>(), Op<Args, Ret>::to_stack(Args{}),
                             detail::ReturnKinds<detail::ReturnTupleT<Ret>>::value);
    schema = inferred;
  }
  auto op = std::unique_ptr<Op<Args, Ret>>(new Op<Args, Ret>(schema, loc));
  return static_cast<Op<Args, Ret>&>(register_op(std::move(op)));
}

template <class Args, class Ret>
template <class BwdArgs, class S>
Op<BwdArgs, detail::BackwardOpRet<Args>>& Op<Args, Ret>::define_backward(
    S save, const OutputDifferentiability& output_differentiability, std::source_location loc) {
  using BwdRet = detail::BackwardOpRet<Args>;
  using OutputGrads = typename detail::OutputGrads<Returns>::type;
  // NB: an if-constexpr chain: after the first failed check nothing else is instantiated with
  // the bad types (one error, not pages of them).
  if constexpr (std::tuple_size_v<typename detail::BackwardOpReturns<Args>::tuple> == 0) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: the op has no Tensor-like argument to "
                  "differentiate");
  } else if constexpr (std::tuple_size_v<OutputGrads> == 0) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: the op has no Tensor or Tensor[] return to "
                  "differentiate");
  } else if constexpr (!std::is_aggregate_v<BwdArgs>) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: the backward args struct must be an aggregate");
  } else if constexpr (!detail::leading_fields_take_grads<BwdArgs, OutputGrads>()) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: the backward args struct's first fields receive "
                  "the grads of the op's outputs, one per Tensor (at::Tensor) or Tensor[] "
                  "(std::vector<at::Tensor>) return, in order");
  } else if constexpr (!std::is_invocable_v<S&, const Args&, const Output&>) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: save must be callable as save(const Args& "
                  "inputs, const Ret& output)");
  } else if constexpr (!std::is_same_v<
                           std::decay_t<std::invoke_result_t<S&, const Args&, const Output&>>,
                           BwdArgs>) {
    static_assert(detail::always_false<S>,
                  "[customop] define_backward: save must return the backward args struct, its "
                  "grad fields left empty");
  } else {
    impl_save_for_backward(std::move(save), loc);
    auto& bwd = define<BwdArgs, BwdRet>(name() + "_backward", loc);
    mark_grads_op(bwd);
    register_backward<BwdArgs, Grads>(
        [this, &bwd](const BwdArgs& saved, auto&... output_grads) {
          BwdArgs call = saved;
          detail::fill_grad_fields(call, std::tuple_cat(detail::grad_as_tuple(output_grads)...));
          std::vector<c10::IValue> values = detail::backward_op_grads(bwd(call));
          Grads grads;
          std::size_t k = 0;
          for (const auto& a : args()) {
            if (is_tensor_like(a.kind)) grads.set(a.name, std::move(values[k++]));
          }
          return grads;
        },
        output_differentiability, loc);
    return bwd;
  }
  std::terminate();  // unreachable: a failed check above does not compile
}

/// Adopts an op already defined with plain TORCH_LIBRARY, so customop can add kernels and a
/// backward formula. Registering a formula is refused if the op already has an Autograd,
/// AutogradCPU, AutogradCUDA or CompositeImplicitAutograd kernel (the message names the key).
/// Fields are checked against the existing schema as for define().
/// \param qualified_name  "ns::name" of an op in the dispatcher (its library loaded), no
///                        overload name
/// \param loc             where it is wrapped; named in later errors
/// \returns               the op, owned by the customop registry for the life of the process
/// \throws c10::ValueError when no such op exists; the field and return checks of define();
///         c10::Error when it was already defined or wrapped through customop. The formula
///         refusal above is a c10::Error from impl_save_for_backward / impl_backward.
/// Example:
///   auto& op = customop::wrap<ScaleArgs>("myns::scale");
///   op.impl_autograd(&scale_save, &scale_backward);
template <class Args, class Ret = at::Tensor>
Op<Args, Ret>& wrap(std::string_view qualified_name,
                    std::source_location loc = std::source_location::current()) {
  auto op = std::unique_ptr<Op<Args, Ret>>(new Op<Args, Ret>(qualified_name, loc, true));
  return static_cast<Op<Args, Ret>&>(register_op(std::move(op)));
}

}  // namespace customop
