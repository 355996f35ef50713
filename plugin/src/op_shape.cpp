// Shape functions (Op::shape): allocating an output as its TensorSpec says (on the meta
// device for the fake kernel, on the spec's device for an out kernel), the rule that an out
// kernel needs a shape function, and the check that an out kernel left its outputs where and
// as they were allocated.

#include <customop/cpu_cache.h>
#include <customop/op_core.h>
#include <customop/shape.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace customop {

namespace detail {

at::Tensor allocate(const TensorSpec& spec, bool meta) {
  TORCH_CHECK_VALUE(!spec.strides || spec.strides->size() == spec.sizes.size(),
                    "customop::TensorSpec: ", spec.sizes.size(), " sizes but ",
                    spec.strides->size(), " strides; give one stride per dim");
  // Real CPU outputs come from the CPU output cache (customop/cpu_cache.h).
  if (!meta && spec.device.is_cpu()) {
    const auto sizes = c10::asIntArrayRefSlowOpt(spec.sizes);
    if (sizes && !spec.strides) return cpu_cache::empty(*sizes, spec.dtype);
    if (sizes) {
      if (const auto strides = c10::asIntArrayRefSlowOpt(*spec.strides)) {
        return cpu_cache::empty_strided(*sizes, *strides, spec.dtype);
      }
    }
  }
  const auto options =
      at::TensorOptions().dtype(spec.dtype).device(meta ? c10::Device(c10::kMeta) : spec.device);
  if (!spec.strides) return at::empty_symint(spec.sizes, options);
  return at::empty_strided_symint(spec.sizes, *spec.strides, options);
}

}  // namespace detail

void OpCore::note_out_kernel(c10::DeviceType device, const std::source_location& loc) const {
  TORCH_CHECK(has_shape(), name_, ": the ", c10::DeviceTypeName(device), " kernel at ",
              format_location(loc),
              " writes into preallocated outputs (kernel(const Args&, outputs)), so the op "
              "needs a shape function to allocate them: declare op.shape(fn) before it "
              "(customop/op.h)");
}

void OpCore::check_output_devices(const detail::OutputsSnapshot& outputs, c10::DeviceType device,
                                  const std::source_location& loc) const {
  for (size_t i = 0; i < outputs.size(); ++i) {
    TORCH_CHECK(outputs[i].device.type() == device, name_, ": the shape function states output ", i,
                " on ", outputs[i].device, ", but the ", c10::DeviceTypeName(device),
                " out kernel at ", format_location(loc),
                " runs: give the output the device of the tensor it is computed from "
                "(TensorSpec::like(input))");
  }
}

namespace {
std::string layout_text(const detail::OutputLayout& l) {
  std::ostringstream os;
  os << "sizes " << c10::SymIntArrayRef(l.sizes) << ", strides " << c10::SymIntArrayRef(l.strides)
     << ", storage offset " << l.offset;
  return os.str();
}
}  // namespace

void OpCore::check_outputs_kept(const detail::OutputsSnapshot& before,
                                const detail::OutputsSnapshot& after, c10::DeviceType device,
                                const std::source_location& loc) const {
  for (size_t i = 0; i < before.size(); ++i) {
    const auto& b = before[i];
    const auto& a = after[i];
    const bool same_storage = a.storage == b.storage;
    const bool same_layout = a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset;
    TORCH_CHECK(same_storage && same_layout, name_, ": the ", c10::DeviceTypeName(device),
                " out kernel at ", format_location(loc), " ",
                same_storage ? "changed the layout of" : "replaced the storage of", " output ", i,
                " (allocated with ", layout_text(b), " as the shape function states; now ",
                layout_text(a),
                "). An out kernel writes into its outputs as they are (no resize_, set_ or "
                "as_strided_); change the shape function instead");
  }
}

}  // namespace customop
