#pragma once
// What the files of customop::paged_kv_write share: the argument checks and the kernels.

#include <customop/ops/paged_kv_write.h>

namespace customop::ops::detail {

/// Device, dtype and shape checks of paged_kv_write (every device, the fake kernel
/// included). The slot range is checked by each kernel, before it writes.
void check_paged_kv_write(const PagedKvWriteArgs& args);

/// The kernels (cpu/paged_kv_write_cpu.cpp, cuda/paged_kv_write_cuda.cpp).
void paged_kv_write_cpu(const PagedKvWriteArgs& args);
void paged_kv_write_cuda(const PagedKvWriteArgs& args);

}  // namespace customop::ops::detail
