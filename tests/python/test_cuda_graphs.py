"""Every built-in op in a CUDA graph: each registered sample (customop_registry::samples) in
float32, bfloat16 and float16 on CUDA, warmed up on a side stream, its forward (and forward +
backward, torch.autograd.grad) captured into a torch.cuda.CUDAGraph, then replayed after new
values were copied into the static inputs (and grad_outputs), and compared with the op run
eagerly on those values.

An op that synchronizes (a read-back, a blocking copy, a stream or device sync) or allocates
outside the caching allocator (cudaMalloc, pinned host memory) during capture makes the capture
raise (capture_error_mode "global", torch.cuda.graph's default); the failure names the op, the
sample and the error. An op whose launch reads host memory at capture time (a pageable
host-to-device copy that the capture accepted) replays stale values: the replay comparison
names it.

Skips without a CUDA device (ctest label gpu). Environment: PYTHONPATH with the `customop`
package (the build tree's python_dev folder, or an installed wheel).
    python -m pytest -q tests/python/test_cuda_graphs.py   (or: python tests/python/test_cuda_graphs.py)
"""

import sys

import pytest
import torch

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))

import customop  # noqa: E402  (loads torch.ops.customop.*)
from registry_samples import DTYPES, leaves, samples, tensors_in  # noqa: E402

# The functional ops: forward and backward against the CPU kernels. The ops that write their
# arguments (fused_add_rms_norm_, paged_kv_write, the in-place variants rms_norm_ and
# bias_gelu_) have no backward; their CUDA kernels are tested in tests/cuda_kernels.
OPS = [name for name in customop.BUILT_IN_OPS
       if not getattr(torch.ops.customop, name).default._schema.is_mutable]
# Collected everywhere (the import and the parametrisation are checked on CPU-only CI too),
# run where torch sees a CUDA device.
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is False)")
WARMUP = 3


def call(op, args):
    return getattr(customop, op)(*args)


def floating(outputs):
    return [t for t in tensors_in(outputs) if t.is_floating_point()]


def fresh_values(args, gen):
    """New values for every tensor argument (same sizes, dtype, device): normal values for
    floating tensors, a new random mask for bool ones; other tensors as they are."""
    def new(t):
        if t.is_floating_point():
            return torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.device, t.dtype)
        if t.dtype == torch.bool:
            return torch.rand(t.shape, generator=gen).to(t.device) > 0.3
        return t.detach().clone()
    return [new(t) for t in tensors_in(args)]


def copy_into(statics, values):
    with torch.no_grad():
        for s, v in zip(statics, values):
            s.copy_(v)


def like(args, values, requires_grad):
    """args with each tensor replaced by a fresh one of its sizes and strides holding the next
    of `values` (tensors_in order): the eager run on what the graph was replayed with."""
    it = iter(values)

    def conv(v):
        if isinstance(v, torch.Tensor):
            t = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
            t.copy_(next(it))
            return t.requires_grad_(requires_grad and t.is_floating_point())
        if isinstance(v, list):
            return [conv(x) for x in v]
        return v
    return [conv(a) for a in args]


def step(op, args, grad_outputs, backward):
    """The op's tensor outputs (and the grads of its floating tensor arguments)."""
    outputs = call(op, args)
    result = list(tensors_in(outputs))
    if backward:
        inputs = [t for t in tensors_in(args) if t.requires_grad]
        result += [g for g in torch.autograd.grad(floating(outputs), inputs, grad_outputs,
                                                  allow_unused=True) if g is not None]
    return result


def capture(what, fn):
    """Warms fn up on a side stream, captures it into a CUDA graph (its own capture stream: a
    failed capture leaves nothing behind for the next one); returns (graph, static results)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
            static = fn()
    except Exception as e:  # noqa: BLE001  (any error of the capture is the finding)
        # The op's own error, when the end of the capture raised over it.
        cause = f"\n  first error: {type(e.__context__).__name__}: {e.__context__}" if e.__context__ else ""
        pytest.fail(f"{what}: capture into a CUDA graph failed (the op syncs, allocates outside "
                    f"the caching allocator, or calls a CUDA API capture forbids): "
                    f"{type(e).__name__}: {e}{cause}", pytrace=False)
    torch.cuda.synchronize()
    return graph, static


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward+backward"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("op", OPS)
def test_capture_and_replay_match_eager(op, dtype, backward):
    gen = torch.Generator().manual_seed(3)
    cases = samples(op, "cuda", dtype)
    assert cases, f"{op}: no samples registered"
    for label, sample in cases:
        kind = "forward + backward" if backward else "forward"
        what = f"{op} ({label}, {str(dtype).removeprefix('torch.')}, {kind})"
        args = leaves(sample) if backward else sample
        with torch.no_grad():
            probe = floating(call(op, args))
        grad_outputs = [torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.device, t.dtype)
                        for t in probe] if backward else []
        graph, static = capture(what, lambda: step(op, args, grad_outputs, backward))

        for replay in range(2):
            new_inputs = fresh_values(args, gen)
            new_grads = [torch.randn(g.shape, generator=gen, dtype=torch.float64).to(g.device, g.dtype)
                         for g in grad_outputs]
            copy_into(tensors_in(args), new_inputs)
            copy_into(grad_outputs, new_grads)
            graph.replay()
            torch.cuda.synchronize()
            expected = step(op, like(args, new_inputs, backward), new_grads, backward)
            assert len(static) == len(expected), (
                f"{what}: {len(static)} results replayed, {len(expected)} eager")
            for k, (s, e) in enumerate(zip(static, expected)):
                torch.testing.assert_close(
                    s, e.detach(), equal_nan=True,
                    msg=lambda m: f"{what}, replay {replay}: result {k} differs from eager: {m}")
        del graph
