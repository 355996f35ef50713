#pragma once
// One backward pass (a vector-Jacobian product, VJP) of the harness, and the route that runs it
// without torch's autograd engine where the engine would add nothing. Internal to
// customop_gradcheck.

#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace customop::gradcheck::detail {

/// grads[j] = sum_i grad_outputs[i]^T d outputs[i] / d inputs[j], as
/// torch::autograd::grad(outputs, inputs, grad_outputs, retain_graph=true, create_graph,
/// allow_unused=true) returns them (undefined where an input is not reached; a ZeroTensor is
/// materialized as zeros). Counts one VJP in counts.vjp_calls. Runs direct_vjp() when it
/// applies, the engine otherwise; throws what the backward or the engine throws.
std::vector<at::Tensor> vjp(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& grad_outputs,
                            const std::vector<at::Tensor>& inputs, OpCounts& counts,
                            bool create_graph = false);

/// vjp() where the grad of each output with undefined[i] reaches its backward undefined, as
/// when that output is unused (torch's _test_undefined_backward_mode); grad_outputs[i] is the
/// grad_output of each other output and a zeros-like for the undefined ones (their engine
/// route wraps each such output in an identity whose backward returns an undefined grad).
/// Counts one VJP.
std::vector<at::Tensor> vjp_undefined(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& grad_outputs,
                                      const std::vector<bool>& undefined,
                                      const std::vector<at::Tensor>& inputs, OpCounts& counts);

/// The VJP by one call of the outputs' backward Node, when that call is all the engine would
/// run and the engine would change none of its results; std::nullopt otherwise (nothing run,
/// or the Node ran but the engine would have to fix up or refuse a grad: run the engine).
///
/// Applies when: create_graph is false and anomaly mode is off; every output is defined and
/// comes from the same Node (distinct output slots) with no hooks on it; every grad_output is
/// defined and has its output's sizes, dtype and device; every tensor is a strided CPU tensor;
/// every next edge of the Node that is valid goes to an AccumulateGrad (a leaf: nothing past
/// it), each requested input's at most once; and the Node returns one grad per next edge, each
/// with the sizes, dtype and device its edge expects. Then the engine would run the Node once
/// under grad mode off (as here) and hand its grads to the captured inputs unchanged. (Engine
/// steps it skips: the graph task, its ready queue and device threads, the thread-local state
/// set around the Node, the input buffers.) CUDA tensors always take the engine: it runs their
/// Node on the device's thread and stream.
std::optional<std::vector<at::Tensor>> direct_vjp(const std::vector<at::Tensor>& outputs,
                                                  const std::vector<at::Tensor>& grad_outputs,
                                                  const std::vector<at::Tensor>& inputs);

}  // namespace customop::gradcheck::detail
