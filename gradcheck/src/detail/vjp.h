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
/// run and the engine would change none of its inputs; std::nullopt otherwise (nothing run:
/// run the engine).
///
/// Applies when: anomaly mode is off and no backward is running on this thread (a Node run
/// inside one reads that graph task's state); every output is defined and comes from the same
/// Node (distinct output slots), one of ATen's generated Nodes (traceable) or a customop op's
/// (customop/detail/autograd_node.h), with no hooks; every grad_output is defined and has its
/// output's sizes, dtype and device; every tensor is a strided CPU tensor; and every valid next
/// edge of the Node goes to a requested input, whose grad accumulator (a leaf) ends the graph
/// and has no hooks, one edge per input. The engine would then run that Node once with grad
/// mode off (as here) and nothing else, compute every grad it offers (none pruned), and hand
/// them to the captured inputs through validate_outputs, which this route calls too (a grad
/// to sum to its input's shape or to convert to its dtype is fixed up, a wrong count, shape or
/// device raises, with the engine's message). (Engine steps it skips: the graph task, its ready
/// queue and device threads, the thread-local state set around the Node, the input buffers.)
/// Not taken: a C++ or Python autograd::Function's Node (its user code may use engine state:
/// queue_callback, checkpoint validity), CUDA tensors (the engine runs their Node on the
/// device's thread and stream), create_graph. Compiled autograd, enabled from Python, is not
/// consulted: the eager Node runs.
std::optional<std::vector<at::Tensor>> direct_vjp(const std::vector<at::Tensor>& outputs,
                                                  const std::vector<at::Tensor>& grad_outputs,
                                                  const std::vector<at::Tensor>& inputs);

}  // namespace customop::gradcheck::detail
