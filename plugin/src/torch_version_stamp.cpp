// Compiled into libcustomop and into every library or program that links customop::customop
// (an INTERFACE source): records the torch version it is compiled against in the ELF section
// .customop_torch, which customop::load_op_library (C++) and customop.load_library (Python)
// read before loading a library, so a library built against another torch is refused with both
// versions named instead of an undefined-symbol error.
#include <torch/version.h>

namespace {
[[gnu::used, gnu::section(".customop_torch")]] const char kTorchVersionStamp[] =
    "torch " TORCH_VERSION;
}  // namespace
