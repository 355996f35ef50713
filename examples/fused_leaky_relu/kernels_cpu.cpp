#include "kernels_cpu_impl.h"

namespace flrelu {

template void forward_cpu<float>(const ForwardParams<float>&);
template void forward_cpu<double>(const ForwardParams<double>&);
template void backward_cpu<float>(const BackwardParams<float>&);
template void backward_cpu<double>(const BackwardParams<double>&);

}  // namespace flrelu
