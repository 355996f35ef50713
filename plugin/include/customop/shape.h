#pragma once
/// \file
/// `customop::TensorSpec`: what an op's shape function (Op::shape) says about one Tensor
/// return: its sizes and strides (symbolic: c10::SymInt), dtype and device. From one shape
/// function customop makes the fake (Meta) kernel, in C++, and allocates the real outputs
/// that out kernels (`kernel(const Args&, const at::Tensor& out)`) write into, so the fake and
/// the real outputs cannot drift apart.
///
/// Keep sizes symbolic: read them with `sym_sizes()` / `sym_size(d)` (never `sizes()` or
/// `size(d)`, which throw under torch.compile(dynamic=True)), and compare them with
/// `sym_eq` inside TORCH_SYM_CHECK rather than `==` in an `if` (which fixes the size the
/// compiled graph is valid for). TensorSpec's own helpers never read a size's value.
///
/// Example:
///   op.shape([](const RowsArgs& a) {
///     TORCH_SYM_CHECK(a.weight.sym_size(0).sym_eq(a.input.sym_size(-1)), "weight must be [D]");
///     return customop::TensorSpec::like(a.input);  // input's sizes, dtype, device; contiguous
///   });

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>

#include <c10/util/SmallVector.h>

#include <optional>
#include <tuple>
#include <type_traits>

namespace customop {

/// One Tensor return of an op, as its shape function states it.
struct TensorSpec {
  c10::SymDimVector sizes;                   ///< one entry per dim (symbolic under compile)
  std::optional<c10::SymDimVector> strides;  ///< in elements; std::nullopt: contiguous
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::kCPU;  ///< the real outputs' device (meta for the fake kernel)

  /// `t`'s sizes, dtype and device, contiguous strides (what at::empty_like gives a
  /// contiguous tensor).
  /// \param t  any defined tensor (real, meta or fake)
  /// \returns  the spec of a fresh contiguous tensor shaped like `t`
  /// \throws c10::Error when `t` is undefined
  /// Example:
  ///   return customop::TensorSpec::like(a.input).typed(at::kLong);
  static TensorSpec like(const at::Tensor& t) {
    TORCH_CHECK(t.defined(), "customop::TensorSpec::like: the tensor is undefined");
    return TensorSpec{c10::SymDimVector(t.sym_sizes().begin(), t.sym_sizes().end()), std::nullopt,
                      t.scalar_type(), t.device()};
  }
  /// This spec with other sizes (contiguous strides).
  TensorSpec sized(c10::SymIntArrayRef new_sizes) const {
    TensorSpec s = *this;
    s.sizes.assign(new_sizes.begin(), new_sizes.end());
    s.strides.reset();
    return s;
  }
  /// This spec with another dtype.
  TensorSpec typed(c10::ScalarType new_dtype) const {
    TensorSpec s = *this;
    s.dtype = new_dtype;
    return s;
  }
  /// This spec with explicit strides (in elements, one per dim).
  TensorSpec strided(c10::SymIntArrayRef new_strides) const {
    TensorSpec s = *this;
    s.strides = c10::SymDimVector(new_strides.begin(), new_strides.end());
    return s;
  }
};

namespace detail {

/// One TensorSpec per return of `Returns` (a std::tuple of return types): TensorSpec for one
/// return, std::tuple<TensorSpec, ...> for several.
template <class Returns>
struct SpecsOf {
  using type = std::tuple<>;
};
template <>
struct SpecsOf<std::tuple<at::Tensor>> {
  using type = TensorSpec;
};
template <class... R>
requires(sizeof...(R) > 1) struct SpecsOf<std::tuple<R...>> {
  using type = std::tuple<std::conditional_t<true, TensorSpec, R>...>;
};

/// True when `Returns` has at least one return and each is a single Tensor.
template <class Returns>
inline constexpr bool kAllReturnsSingleTensors = false;
template <class... R>
inline constexpr bool kAllReturnsSingleTensors<std::tuple<R...>> = sizeof...(R) > 0 &&
                                                                   (std::is_same_v<R, at::Tensor> &&
                                                                    ...);

/// Where an output lives and how it is laid out: an out kernel must leave it so.
struct OutputLayout {
  c10::SymDimVector sizes;
  c10::SymDimVector strides;
  const void* storage = nullptr;
  c10::SymInt offset;
  c10::Device device = c10::kCPU;
  static OutputLayout of(const at::Tensor& t) {
    return {
        c10::SymDimVector(t.sym_sizes().begin(), t.sym_sizes().end()),
        c10::SymDimVector(t.sym_strides().begin(), t.sym_strides().end()),
        t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl()) : nullptr,
        t.sym_storage_offset(), t.device()};
  }
};
using OutputsSnapshot = c10::SmallVector<OutputLayout, 2>;

/// A tensor as `spec` says, uninitialized: on the meta device when `meta` (the fake kernel),
/// on spec.device otherwise.
/// \throws c10::ValueError when spec.strides has another length than spec.sizes
at::Tensor allocate(const TensorSpec& spec, bool meta);

}  // namespace detail
}  // namespace customop
