#pragma once
/// \file
/// `customop::OpCore`: the part of an op that does not depend on its args struct: the parsed
/// schema, the dispatcher registration, the kernel table per device, the autograd kernel
/// indirection, and the checks of the reference (PyTorch's legacy CustomOp API).

#include <customop/arg_types.h>
#include <customop/autocast.h>
#include <customop/batching.h>
#include <customop/grads.h>
#include <customop/shape.h>
#include <customop/sharding.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch {
class Library;
}  // namespace torch

namespace customop {

class OpCore;

/// One argument of an op's schema, in schema order (kw-only arguments included).
struct ArgSpec {
  std::string name;      ///< schema argument name == args-struct field name
  ArgKind kind;          ///< what it is
  std::string type;      ///< schema spelling, e.g. "Tensor?"
  bool written = false;  ///< the op writes it in place (`Tensor(a!)`, customop::MutableTensor)
};

/// One sample input of an op for the gradcheck harness: the boxed arguments in schema order.
/// Floating-point tensors (also inside Tensor? and Tensor[]) are the differentiable inputs.
struct Sample {
  std::string label;       ///< short description, e.g. "non-contiguous [4, 7]"
  torch::jit::Stack args;  ///< one IValue per schema argument
};

/// The rules of an out= overload (what at::Tag::out asks), checked in C++ (torch checks them in
/// Python only): `out` takes `functional`'s arguments (same names and types, in order) followed by
/// keyword-only Tensor arguments, each written (`Tensor(a!)`) in its own alias set, one per
/// return of `functional`; it returns nothing, or exactly those tensors, in order, each
/// annotated with its argument's alias set; no other argument is written.
/// \throws c10::ValueError naming `out` and the first rule it breaks.
void check_out_schema(const c10::FunctionSchema& functional, const c10::FunctionSchema& out);

/// Makes an op's samples for a device and a floating dtype (kFloat or kDouble).
using SampleGenerator = std::function<std::vector<Sample>(c10::Device, c10::ScalarType)>;

/// "file:line" of a source location.
/// \param loc  a location, usually std::source_location::current() at a registration
/// \returns    "<file>:<line>", as every registration error spells it
/// \throws nothing customop-specific
/// Example:
///   std::cerr << customop::format_location(op.location());  // "ops.cpp:42"
std::string format_location(const std::source_location& loc);

namespace detail {

/// The args-struct side of the schema check: kind and C++ spelling of field i.
struct FieldInfo {
  ArgKind kind;
  std::string_view cpp_name;
  std::string_view name;  ///< the field's name (Boost.PFR); must equal the schema argument's
  bool written = false;   ///< a customop::MutableTensor field: schema `Tensor(a!)`
};

/// What one call's tensor-like arguments looked like (the reference's `args_info`), kept for
/// validating the grads backward returns. One entry per schema argument.
struct ArgsInfo {
  static constexpr int32_t kNotTensorLike = -1;
  static constexpr int32_t kNone = -2;  // a Tensor? argument that was None
  // kNotTensorLike, kNone, or the number of tensors the argument contributed (1, or the
  // length of a Tensor[]).
  c10::SmallVector<int32_t, 8> counts;
  /// What each input of the autograd Node (every tensor of the args, in schema order)
  /// looked like, to check its grad against: shape (the grad's must equal it or sum to it),
  /// dtype (real vs complex) and device.
  struct InputMeta {
    c10::SymDimVector sizes;
    c10::ScalarType dtype;
    c10::Device device;
  };
  c10::SmallVector<InputMeta, 4> inputs;
};

using BoxedKernel = std::function<void(torch::jit::Stack*)>;

/// What the generated autograd Node keeps between forward and backward besides the
/// saved tensors (which it holds as SavedVariables); SavedState<Saved> adds the user's
/// saved state (customop/detail/saved_state.h).
struct SavedStateBase : torch::CustomClassHolder {
  OpCore* op = nullptr;                            // the op whose formula runs in backward
  ArgsInfo info;                                   // the reference's args_info
  c10::SmallVector<int32_t, 4> return_list_sizes;  // length of each Tensor[] return, in order
};

/// The schema define<Args>("ns::name") infers: `name(<type> <field>[=<default>], ...) ->
/// <returns>`, defaults from `value_initialized` (a value-initialized args struct's fields:
/// non-zero-like values, and None for optional fields), float defaults in their shortest
/// round-trip spelling (0.2). Throws c10::ValueError naming `name` for a default it cannot
/// spell (a non-finite float, a Tensor), and for a field without a default after one with a
/// default.
std::string infer_schema(std::string_view name, std::span<const FieldInfo> fields,
                         const torch::jit::Stack& value_initialized,
                         std::span<const ArgKind> return_kinds);

struct KernelEntry {
  BoxedKernel fn;
  std::source_location loc;
};

/// The storage of one tensor argument of a kernel call (op_kernel_returns.cpp): which argument
/// (its index in the schema) and, for a Tensor[], which element (-1 otherwise).
struct ArgStorage {
  const c10::StorageImpl* storage;
  uint32_t arg;
  int32_t element;
};
using ArgStorages = c10::SmallVector<ArgStorage, 6>;

}  // namespace detail

/// How an op's in-place variant (Op::inplace_variant) meets autograd, when called under grad
/// mode with an argument that requires grad.
enum class InplaceGrad : std::uint8_t {
  /// Refused: c10::Error naming the variant and the argument; every argument is left unchanged.
  kRefuse,
  /// Differentiable through the functional op's backward, with the semantics of
  /// autograd.Function's mark_dirty: x's old value is cloned (an autograd-recorded copy, so grads
  /// reach x's history), the functional op runs on the clone with its own autograd, and the
  /// result is copied into x (Tensor.copy_), whose history then ends in the functional op's
  /// backward; a tensor saved earlier from x and needed later raises ("modified by an inplace
  /// operation"). Costs one more copy of x than the no-grad path. Refused, naming the argument:
  /// x a leaf that requires grad, or a view of one (torch refuses in-place writes to them too),
  /// and an op without a backward (impl_autograd).
  kThroughFunctional,
};

/// How an op's in-place variant (Op::inplace_variant) puts its result into x, its first argument.
enum class InplaceWrite : std::uint8_t {
  /// Runs the functional op, then copies its result into x: right for any kernel; allocates a
  /// result and moves the data twice.
  kCopy,
  /// Calls the op's CPU out kernel (Op::impl with kernel(const Args&, out)) with x itself as
  /// the output, when x is on the CPU with the result's sizes, dtype and the strides the shape
  /// function states, and no other argument has elements in x's memory span; otherwise (and
  /// for an op without a CPU out kernel) as kCopy. (CUDA: as kCopy for now; the built-in CUDA
  /// kernels take __restrict__ input and output pointers.) Declare it only for a kernel that
  /// reads every input element it needs before it writes an output element depending on it:
  /// elementwise kernels, and row kernels that finish reading a row before writing it. The
  /// training path (InplaceGrad::kThroughFunctional, under grad) still goes through the
  /// functional op.
  kDirect,
};

/// The schema-level state of a customop op; `Op<Args, Ret>` adds the typed parts.
/// Thread-safety: calls may run on any number of threads, also while another thread registers
/// a kernel or a formula half (each is published atomically; a call sees it or not). Two
/// threads registering on the same op at once are not supported.
/// Example:
///   const customop::OpCore* core = customop::find_op("customop::rms_norm");
///   if (core && core->has_autograd()) std::cout << core->schema_text();
class OpCore {
 public:
  virtual ~OpCore();
  OpCore(const OpCore&) = delete;
  OpCore& operator=(const OpCore&) = delete;

  /// Qualified name, "ns::name".
  const std::string& name() const { return name_; }
  /// The parsed schema (torch's c10::FunctionSchema).
  const c10::FunctionSchema& schema() const { return schema_; }
  /// The schema as written to define() (or as inferred there): defaults as written, where
  /// schema() prints them as torch does (0.2 as 0.20000000000000001).
  const std::string& schema_text() const { return schema_text_; }
  /// Dispatcher handle; valid once the op is registered.
  const c10::OperatorHandle& handle() const { return *handle_; }
  /// One ArgSpec per schema argument, in schema order.
  const std::vector<ArgSpec>& args() const { return args_; }
  /// The kind of each return, in order (kTensor, kTensorList, kInt, kFloat or kBool).
  const std::vector<ArgKind>& returns() const { return returns_; }
  /// True when the op writes at least one argument in place (`Tensor(a!)`, a
  /// customop::MutableTensor field); ArgSpec::written says which.
  bool mutates() const { return mutates_; }
  /// True for an op that customop::wrap() took from the dispatcher (defined elsewhere).
  bool wrapped() const { return wrapped_; }
  /// Where `define` (or `wrap`) was called.
  const std::source_location& location() const { return loc_; }

  /// True when `device` (CPU, CUDA, or Meta: the fake kernel) has a kernel registered.
  /// \param device  any device type; false for one other than CPU, CUDA and Meta
  /// \returns       whether impl (or impl_fake, for Meta) registered one
  /// \throws nothing
  /// Example:
  ///   if (!core.has_kernel(c10::DeviceType::CUDA)) GTEST_SKIP() << "no CUDA kernel";
  bool has_kernel(c10::DeviceType device) const;
  /// True when a fake (Meta) kernel is registered (impl_fake): the op runs on meta tensors and
  /// under FakeTensor (torch.compile, torch.export, torch.library.opcheck).
  bool has_fake_kernel() const { return has_kernel(c10::DeviceType::Meta); }
  /// True when the op declared a shape function (Op::shape): its fake kernel and the outputs
  /// of its out kernels come from it.
  bool has_shape() const { return shape_loc_.has_value(); }
  /// The op's out= overload (`ns::name.out(..., *, Tensor(a!) out) -> ()`; not tagged
  /// at::Tag::out, which breaks AOTInductor packages on torch 2.15), or nullptr: customop
  /// defines it for every op with a shape function that writes no argument, when the shape
  /// function is declared (op_out_variant.cpp).
  const c10::OperatorHandle* out_handle() const { return out_handle_ ? &*out_handle_ : nullptr; }
  /// The op's in-place variant (`ns::name_(Tensor(a!) x, ...) -> Tensor(a!)`, tagged
  /// at::Tag::inplace), or nullptr when the op declared none (Op::inplace_variant;
  /// op_inplace_variant.cpp).
  const c10::OperatorHandle* inplace_handle() const {
    return inplace_handle_ ? &*inplace_handle_ : nullptr;
  }
  /// How the in-place variant meets autograd (Op::inplace_variant's argument; kRefuse when the
  /// op declared none).
  InplaceGrad inplace_grad() const { return inplace_grad_; }
  /// True when both save_for_backward and backward are registered.
  bool has_autograd() const {
    return formula_parts_.load(std::memory_order_acquire) == (kSavePart | kBackwardPart);
  }
  /// True when a forward-mode AD formula is registered (Op::impl_jvp).
  bool has_jvp() const { return has_jvp_.load(std::memory_order_acquire); }
  /// The flags given to impl_backward (one per return), or std::nullopt when none were given.
  const std::optional<std::vector<bool>>& output_differentiability() const {
    return output_differentiability_;
  }

  /// Sample inputs registered for the gradcheck harness (empty when none were registered).
  /// \param device  where the samples' tensors are made
  /// \param dtype   the floating dtype of their floating tensors (kFloat or kDouble)
  /// \returns       (label, boxed args) pairs, one IValue per schema argument
  /// \throws whatever the registered generator throws
  /// Example:
  ///   for (const auto& s : core.samples(c10::kCPU, at::kDouble)) std::cout << s.label << '\n';
  std::vector<Sample> samples(c10::Device device, c10::ScalarType dtype) const {
    return sample_generator_ ? sample_generator_(device, dtype) : std::vector<Sample>{};
  }
  /// True when a sample generator is registered.
  bool has_samples() const { return static_cast<bool>(sample_generator_); }
  /// Sets (replaces) the sample generator; Op<Args, Ret>::samples(fn) is the typed way.
  void set_sample_generator(SampleGenerator g) { sample_generator_ = std::move(g); }
  /// The op's reference implementation (Op::reference): pops the op's arguments, pushes its
  /// returns. Empty when none is declared.
  const detail::BoxedKernel& reference() const { return reference_; }
  /// True when the op declared a reference (Op::reference).
  bool has_reference() const { return static_cast<bool>(reference_); }
  /// Sets (replaces) the reference; Op<Args, Ret>::reference(fn) is the typed way.
  void set_reference(detail::BoxedKernel fn) { reference_ = std::move(fn); }

  /// The op's autocast policy (Op::autocast), or std::nullopt when it declared none (then
  /// torch's autocast fallthrough applies).
  std::optional<AutocastPolicy> autocast_policy() const;
  /// The untyped half of Op::autocast: registers the autocast kernel at AutocastCPU and
  /// AutocastCUDA. Throws c10::Error naming the op and both locations when a policy is
  /// already declared, or when the op has an autocast kernel from outside customop.
  void set_autocast(AutocastPolicy policy, std::source_location loc);

  /// The op's batching rule (Op::vmap), or nullptr when it declared none (then torch's
  /// per-example fallback runs under vmap, with its performance warning naming the op).
  const BatchRule* batch_rule() const { return batch_rule_ ? &*batch_rule_ : nullptr; }
  /// The untyped half of Op::vmap: validates `rule` against the schema and registers the
  /// op's FuncTorchBatched kernel (op_batching.cpp). Throws c10::ValueError naming the op and
  /// the argument at fault, c10::Error naming both locations when a rule is already declared.
  void set_batch_rule(BatchRule rule, std::source_location loc);

  /// The op's DTensor sharding rule (Op::sharding), or nullptr when it declared none.
  const Sharding* sharding_rule() const { return sharding_ ? &*sharding_ : nullptr; }
  /// The untyped half of Op::sharding: validates `rule` against the schema and keeps it.
  /// Throws c10::ValueError naming the op and the argument or return at fault (unknown, or
  /// of the wrong type), c10::Error naming both locations when a rule is already declared.
  void set_sharding(Sharding rule, std::source_location loc);

 protected:
  /// Parses and validates `schema_text` (the reference's rules) and checks the args-struct
  /// fields and the C++ return kinds against it. Throws c10::Error naming the op.
  /// \throws c10::ValueError (a parse failure, a broken rule, an unsupported argument type, a
  ///         field named differently from its argument) or c10::TypeError (field count, a
  ///         field's C++ type, return count or a return's type), both c10::Error subclasses.
  OpCore(std::string_view schema_text, std::span<const detail::FieldInfo> fields,
         std::span<const ArgKind> return_kinds, std::source_location loc);
  /// Adopts an op defined elsewhere (plain TORCH_LIBRARY): `qualified_name` must exist.
  /// \throws c10::ValueError naming it when it does not; then the field checks above.
  OpCore(std::string_view qualified_name, std::span<const detail::FieldInfo> fields,
         std::span<const ArgKind> return_kinds, std::source_location loc, bool /*wrap*/);

  /// The args struct's default member initializers against the schema's defaults:
  /// `value_initialized` holds the fields of a value-initialized args struct (Args{}), in
  /// order. A field whose value is not zero-like (0, 0.0, false, "", empty list, None) has an
  /// initializer; it must equal the schema default of its argument, and the argument must
  /// have one. Throws c10::ValueError naming the op, the argument and both values.
  /// NB: an initializer equal to the zero-like value cannot be told from none (not checked).
  void check_struct_defaults(const torch::jit::Stack& value_initialized) const;
  /// A typed grads struct's field names must be the tensor-like arguments' names, in order.
  /// Throws c10::ValueError naming the op, the field, the argument and `loc`.
  void check_grads_field_names(std::span<const std::string_view> names, std::string_view type_name,
                               const std::source_location& loc) const;
  /// The untyped half of Op::impl; throws as Op::impl.
  void set_kernel(c10::DeviceType device, detail::BoxedKernel fn, std::source_location loc);
  /// The untyped half of Op::impl_fake; throws as Op::impl_fake.
  void set_fake_kernel(detail::BoxedKernel fn, std::source_location loc);
  /// Records where the shape function is declared (Op::shape, after its fake kernel is
  /// installed), and defines the out= overload (define_out_overload) for an op that writes no
  /// argument.
  void note_shape(std::source_location loc);
  /// Defines the in-place variant (Op::inplace_variant); throws as it documents.
  void define_inplace_variant(InplaceGrad grad, InplaceWrite write,
                              const std::source_location& loc);
  /// For InplaceWrite::kDirect: the spec (Op::shape) of the op's one return for the arguments
  /// at the top of a stack (left there). Set by Op::shape.
  void set_result_spec(std::function<TensorSpec(torch::jit::Stack&)> fn);
  /// The typed half of an out= overload's kernel for `device` (Meta: its fake kernel): `fn`
  /// gets the functional arguments followed by one out tensor per return, and leaves the out
  /// tensors on the stack. Throws c10::Error naming the op when `device` has one already.
  void set_out_kernel(c10::DeviceType device, detail::BoxedKernel fn, std::source_location loc);
  /// Makes `out` (out argument `i`) ready to receive output `i` as `spec` states (sizes, strides or
  /// contiguous when empty, dtype, device), as torch's out= convention says: dtype and device
  /// must match (c10::Error naming the op, the argument, expected and actual); a buffer of
  /// other sizes is resized (with a warning when it had elements). Returns true when `out`
  /// then has exactly the stated strides (the kernel can write it directly), false when the
  /// caller must compute into a fresh tensor and copy.
  bool prepare_out_buffer(std::size_t i, const at::Tensor& out, const TensorSpec& spec) const;
  /// Refuses an out kernel (kernel(const Args&, outputs)) for `device` before a shape
  /// function is declared. Throws c10::Error naming the op, `loc` and op.shape.
  void note_out_kernel(c10::DeviceType device, const std::source_location& loc) const;
  /// An allocating kernel (kernel(const Args&)) of an op that returns tensors: refused when
  /// the op has a shape function (its outputs would bypass it), else recorded so that a later
  /// shape function is refused (check_no_allocating_kernel, called by Op::shape before it
  /// installs anything). Throw c10::Error naming the op, both locations and the out-kernel
  /// form (op_kernel_returns.cpp).
  void note_allocating_kernel(c10::DeviceType device, const std::source_location& loc);
  void check_no_allocating_kernel(const std::source_location& loc) const;
  /// Marks the op as a backward op (Op::define_backward on the op it differentiates): its
  /// kernels return grads, where an undefined tensor is None (no grad) and the incoming grad
  /// itself may be returned, so check_kernel_returns checks only their devices.
  static void mark_grads_op(OpCore& op) { op.returns_grads_ = true; }
  /// After an out kernel ran: each output must still have the storage, sizes, strides and
  /// offset it was allocated with. Throws c10::Error naming the op, the output, the kernel's
  /// device and location, and both layouts.
  /// Before an out kernel runs: each allocated output must be on the kernel's device (a shape
  /// function states each output's device). Throws c10::Error naming the op, the output and
  /// both devices.
  void check_output_devices(const detail::OutputsSnapshot& outputs, c10::DeviceType device,
                            const std::source_location& loc) const;
  void check_outputs_kept(const detail::OutputsSnapshot& before,
                          const detail::OutputsSnapshot& after, c10::DeviceType device,
                          const std::source_location& loc) const;
  /// Records where save_for_backward is registered; throws c10::Error as
  /// Op::impl_save_for_backward (already registered, an autograd kernel from outside).
  void note_save_for_backward(std::source_location loc);
  /// Records where backward is registered and its output_differentiability; throws as
  /// Op::impl_backward (c10::Error, and c10::TypeError when `returns_backward_ok` is false,
  /// c10::ValueError for a flag count other than the number of returns).
  void note_backward(std::source_location loc, std::optional<std::vector<bool>> output_diff,
                     bool returns_backward_ok);
  /// Makes a formula half that Op<Args, Ret> has stored visible to calls on other threads
  /// (release); the autograd kernel reads the halves only once both are published (acquire).
  void publish_save_for_backward() {
    formula_parts_.fetch_or(kSavePart, std::memory_order_release);
  }
  void publish_backward() { formula_parts_.fetch_or(kBackwardPart, std::memory_order_release); }

  /// The typed half of the generated autograd kernel's forward (Op<Args, Ret>): reads the
  /// args struct from `args` (one IValue per schema argument) and the C++ return value from
  /// `outputs` (one IValue per return), runs save_for_backward, and moves the saved state's
  /// tensor fields into `tensors_to_save` (for the autograd context).
  virtual c10::intrusive_ptr<detail::SavedStateBase> save_boxed(
      torch::jit::Stack& args, const torch::jit::Stack& outputs,
      std::vector<at::Tensor>& tensors_to_save) = 0;
  /// The typed half of its backward: restores the saved state from `state` and
  /// `saved_tensors`, runs the backward formula on `grad_outputs` (one per output tensor) and
  /// appends the validated grads to `flat`, one per input of the autograd Node.
  virtual void backward_boxed(detail::SavedStateBase& state,
                              const std::vector<at::Tensor>& saved_tensors,
                              std::vector<at::Tensor>& grad_outputs,
                              std::vector<at::Tensor>& flat) = 0;

  /// Records where the JVP is registered; throws as Op::impl_jvp (already registered, a
  /// mutating op).
  void note_jvp(std::source_location loc);
  /// Makes the JVP that Op<Args, Ret> has stored visible to calls on other threads.
  void publish_jvp() { has_jvp_.store(true, std::memory_order_release); }
  /// The typed half of the JVP: reads the args struct from `primals` and from `tangents` (one
  /// IValue per schema argument each; tensors replaced by their tangents, undefined for none)
  /// and the kernel's returns from `outputs`, runs the formula and pushes its return value
  /// (one IValue per return) onto `result`.
  virtual void jvp_boxed(torch::jit::Stack& primals, torch::jit::Stack& tangents,
                         const torch::jit::Stack& outputs, torch::jit::Stack& result) = 0;
  /// Throws the reference's backward-time error: "In the backward function defined for <op>
  /// at <file:line> using the CustomOp API, <what>".
  [[noreturn]] void backward_error(const std::string& what) const;
  /// Validates grads returned by name exactly as the reference does, then appends them in
  /// schema order to `flat`: one tensor (undefined for None) per tensor input, none for a
  /// Tensor? argument that was None (it is no input of the autograd Node).
  void grads_to_flat(const Grads& grads, const detail::ArgsInfo& info,
                     std::vector<at::Tensor>& flat) const;
  /// Same for a backward that returned a dynamic c10::IValue (must be a Dict[str, ...]).
  void ivalue_grads_to_flat(const c10::IValue& grads, const detail::ArgsInfo& info,
                            std::vector<at::Tensor>& flat) const;
  /// Fills the tensor-like counts of `info` from the args on top of `stack`.
  void collect_args_info(const torch::jit::Stack& stack, detail::ArgsInfo& info) const;
  /// Forward-time output_differentiability: throws for a non-tensor return marked
  /// differentiable; appends the outputs to mark non-differentiable.
  void non_differentiable_outputs(const torch::jit::Stack& outputs,
                                  std::vector<at::Tensor>& out) const;
  /// "file:line" of the backward registration, or "<unknown>" when there is none.
  std::string backward_location() const;

 private:
  friend OpCore& register_op(std::unique_ptr<OpCore> op);
  friend struct AutogradKernel;
  friend struct DeviceKernel;
  friend struct TracerKernel;
  friend struct AutocastKernel;
  friend struct BatchedKernel;
  /// The FuncTorchBatched kernel (op_batching.cpp): the declared rule, per call.
  void batched_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) const;
  std::optional<BatchRule> batch_rule_;
  std::source_location batch_rule_loc_;
  void autocast_kernel(const c10::OperatorHandle& op, c10::DeviceType device,
                       torch::jit::Stack* stack) const;
  void tracer_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                     torch::jit::Stack* stack) const;
  void register_with_dispatcher();
  void install_autograd_indirection();
  void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                       torch::jit::Stack* stack);
  /// Runs the op with the generated autograd kernel (autograd_node.cpp) on the args on
  /// `stack`: a backward Node per call when an input requires grad under grad mode. With
  /// `fw_args` (a copy of the args, when one carries a tangent) it also sets the outputs'
  /// tangents, before the saved outputs are packed (so a saved output keeps its tangent).
  void run_autograd(c10::DispatchKeySet ks, torch::jit::Stack* stack,
                    const torch::jit::Stack* fw_args);
  /// Forward-mode AD (forward_grad.cpp). forward_grad_needed: whether an argument on top of
  /// `stack` carries a tangent; throws c10::NotImplementedError naming the op, the argument and
  /// impl_jvp when one does and the op has no JVP. apply_forward_grads: `args` are the call's
  /// arguments, its outputs are on top of `stack`; runs the JVP and sets each output's tangent.
  bool forward_grad_needed(const torch::jit::Stack& stack) const;
  void apply_forward_grads(const torch::jit::Stack& args, const torch::jit::Stack& stack);
  friend struct AutogradNode;
  void device_kernel(c10::DeviceType device, torch::jit::Stack* stack) const;
  /// What a device kernel takes and returns (op_kernel_returns.cpp). kernel_arg_storages: the
  /// storages of the tensor arguments on top of `stack`, for the alias check after the kernel;
  /// for the Meta kernel it first refuses a tensor argument that is not a meta tensor (a call
  /// mixing meta and real tensors reaches the fake kernel, which computes no values).
  /// check_kernel_returns: every Tensor output (Tensor[] elements too) is defined, on the
  /// kernel's device (a CUDA kernel may also return CPU tensors; a fake kernel returns meta
  /// ones), and shares memory with no argument. Throw c10::Error naming the op, the kernel's
  /// device and location, the output and the argument.
  detail::ArgStorages kernel_arg_storages(c10::DeviceType device,
                                          const torch::jit::Stack& stack) const;
  void check_kernel_returns(c10::DeviceType device, const detail::KernelEntry& entry,
                            const detail::ArgStorages& args, const torch::jit::Stack& stack) const;
  void install_kernel(c10::DeviceType device, detail::BoxedKernel fn, std::source_location loc);
  void init_from_schema(std::span<const detail::FieldInfo> fields,
                        std::span<const ArgKind> return_kinds);
  /// A `Tensor(a!)` argument: a Tensor, written (not a read alias), in its own alias set.
  /// Throws c10::ValueError naming the op and the argument.
  void check_written_argument(const c10::Argument& a, const c10::AliasInfo& alias,
                              std::vector<std::string>& write_sets) const;
  /// Mutable ops (op_mutation.cpp): the ADInplaceOrView kernel that bumps the version of each
  /// written argument, the written-argument checks before a kernel runs (an expanded or
  /// overlapping written tensor), and the autograd-time refusals.
  friend struct InplaceOrViewKernel;
  void install_inplace_or_view_kernel(torch::Library& lib);
  void inplace_or_view_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                              torch::jit::Stack* stack) const;
  void check_written_args(c10::DeviceType device, const torch::jit::Stack& stack) const;
  void check_written_args_autograd(const torch::jit::Stack& stack) const;
  /// The out= overload (op_out_variant.cpp): its definition, and its kernels at the device
  /// keys, Meta, Autograd (refuses grad) and ADInplaceOrView (bumps the out tensors' versions).
  friend struct OutVariantKernel;
  void define_out_overload(const std::source_location& loc);
  void out_kernel(int key, const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) const;
  void out_device_kernel(c10::DeviceType device, torch::jit::Stack* stack) const;
  std::vector<std::string> out_names_;
  std::optional<c10::OperatorHandle> out_handle_;
  /// The in-place variant (op_inplace_variant.cpp): its kernels at the device keys and Meta
  /// (the functional op, then a copy into the first argument), Autograd (refuses grad, or
  /// differentiates through the functional op: inplace_autograd) and ADInplaceOrView (bumps
  /// the first argument's version).
  friend struct InplaceVariantKernel;
  void inplace_kernel(int key, const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack) const;
  void inplace_autograd(torch::jit::Stack* stack) const;
  bool write_inplace_directly(const at::Tensor& self, torch::jit::Stack* stack) const;
  std::optional<c10::OperatorHandle> inplace_handle_;
  InplaceGrad inplace_grad_ = InplaceGrad::kRefuse;
  InplaceWrite inplace_write_ = InplaceWrite::kCopy;
  std::function<TensorSpec(torch::jit::Stack&)> result_spec_;
  std::atomic<const detail::KernelEntry*> out_kernels_[3] = {nullptr, nullptr, nullptr};

  std::string name_;
  std::string ns_;
  c10::FunctionSchema schema_;
  std::string schema_text_;
  std::vector<ArgSpec> args_;
  std::vector<ArgKind> returns_;
  std::source_location loc_;
  bool wrapped_ = false;
  bool mutates_ = false;
  std::optional<c10::OperatorHandle> handle_;
  std::vector<std::unique_ptr<torch::Library>> libraries_;
  // Kernels per device: written at registration, read on every call.
  // Indexed by kernel_slot(): CPU, CUDA, Meta (the fake kernel).
  std::atomic<const detail::KernelEntry*> kernels_[3] = {nullptr, nullptr, nullptr};
  std::vector<std::unique_ptr<detail::KernelEntry>> kernel_storage_;
  bool autograd_indirection_installed_ = false;
  // The AutocastPolicy as an int, -1 for none: written at registration, read on every call
  // under autocast (release/acquire, as the kernels).
  std::atomic<int> autocast_policy_{-1};
  std::source_location autocast_loc_;
  bool device_indirection_installed_[3] = {false, false, false};
  // Written by the registering thread before the matching part is published.
  std::optional<std::source_location> save_loc_;
  std::optional<std::source_location> backward_loc_;
  static constexpr uint8_t kSavePart = 1;
  static constexpr uint8_t kBackwardPart = 2;
  std::atomic<uint8_t> formula_parts_{0};
  std::optional<std::vector<bool>> output_differentiability_;
  std::optional<std::source_location> jvp_loc_;
  std::atomic<bool> has_jvp_{false};
  size_t num_tensor_like_args_ = 0;
  SampleGenerator sample_generator_;
  detail::BoxedKernel reference_;
  std::optional<Sharding> sharding_;
  std::optional<std::source_location> shape_loc_;
  std::optional<std::pair<c10::DeviceType, std::source_location>> allocating_kernel_;
  bool returns_grads_ = false;  // mark_grads_op
  std::source_location sharding_loc_;
};

/// Registers `op` with the dispatcher and the customop registry; refuses a second definition
/// of the same name, naming where the first one was made.
/// define() and wrap() call it; a wrapped op is only added to the registry.
/// \param op  the new op (ownership passes to the registry, which never frees it)
/// \returns   the registered op
/// \throws c10::Error naming the op and both locations when the registry has an op of that
///         name, or (not wrapped) the dispatcher already has one.
OpCore& register_op(std::unique_ptr<OpCore> op);

/// All ops defined or wrapped through customop in this process, in definition order.
/// \returns  pointers valid for the life of the process
/// \throws nothing customop-specific
/// Example:
///   for (const customop::OpCore* op : customop::registered_ops()) std::cout << op->name();
std::vector<const OpCore*> registered_ops();
/// The op called `qualified_name` ("ns::name"), or nullptr.
/// \param qualified_name  "ns::name", no overload name
/// \returns               the op defined or wrapped through customop, or nullptr (also for
///                        an op that exists only in the dispatcher)
/// \throws nothing customop-specific
/// Example:
///   const customop::OpCore* op = customop::find_op("customop::rms_norm");
const OpCore* find_op(std::string_view qualified_name);

}  // namespace customop
