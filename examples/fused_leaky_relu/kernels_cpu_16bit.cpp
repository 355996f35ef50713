// The CPU kernels for float16 and bfloat16: c10's 16-bit value types (header-only; they convert
// to and from float), computed in float (acc_t).
#include "kernels_cpu_impl.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace flrelu {

template void forward_cpu<c10::Half>(const ForwardParams<c10::Half>&);
template void forward_cpu<c10::BFloat16>(const ForwardParams<c10::BFloat16>&);
template void backward_cpu<c10::Half>(const BackwardParams<c10::Half>&);
template void backward_cpu<c10::BFloat16>(const BackwardParams<c10::BFloat16>&);

}  // namespace flrelu
