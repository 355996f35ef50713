"""The built-in ops on CUDA from Python, as a user calls them (`import customop`): every op's
CUDA forward kernel and its backward on CUDA against the CPU kernels, in float32, bfloat16 and
float16, on every registered sample (customop_registry::samples: contiguous, transposed, sliced,
0-d) and on large inputs that take the kernels' multi-block paths; the ops under
torch.autocast("cuda"); a device mismatch naming the op and the argument.

CUDA vs CPU: both run on the same (rounded) inputs, and each is compared with a float64 CPU run
on those inputs: the CUDA error may be at most twice the CPU kernel's plus a few units in the
last place (summation order differs between the kernels); integer outputs (max_along's indices,
clamp_count's count) must be equal.

Skips without a CUDA device (ctest label gpu). Environment: PYTHONPATH with the `customop`
package (the build tree's python_dev folder, or an installed wheel).
    python -m pytest -q tests/python/test_cuda_ops.py      (or: python tests/python/test_cuda_ops.py)
"""

import math
import sys

import pytest
import torch

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))

import customop  # noqa: E402  (loads torch.ops.customop.*)
from registry_samples import DTYPES, leaves, samples, tensors_in, to  # noqa: E402

# The functional ops: forward and backward against the CPU kernels. The ops that write their
# arguments (fused_add_rms_norm_, paged_kv_write, the in-place variants rms_norm_ and
# bias_gelu_) have no backward; their CUDA kernels are tested in tests/cuda_kernels.
OPS = [name for name in customop.BUILT_IN_OPS
       if not getattr(torch.ops.customop, name).default._schema.is_mutable]
# Collected everywhere (the import and the parametrisation are checked on CPU-only CI too),
# run where torch sees a CUDA device.
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is False)")
CUDA = "cuda"
F64 = torch.float64
ULPS = 4  # units in the last place (at the largest |value|) allowed beyond twice the CPU error


def large_cases(op):
    """Inputs (float64, CPU) big enough for several blocks / rows per block and odd sizes."""
    g = torch.Generator().manual_seed(20261204)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)
    # Values exact in every dtype and distinct along the reduced dim: the argmax is one index.
    perm = lambda *s, dim: torch.argsort(torch.rand(*s, generator=g), dim=dim).to(F64) - s[dim] // 2
    if op == "rms_norm":
        return [("[67, 1025]", [r(67, 1025), r(1025), 1e-6]), ("[3, 8193]", [r(3, 8193), r(8193), 1e-5])]
    if op == "bias_gelu":
        return [("tanh [67, 1025]", [r(67, 1025), r(1025), "tanh"]),
                ("exact [3, 8193]", [r(3, 8193), r(8193), "none"])]
    if op == "weighted_sum":
        return [("three [67, 1025]", [[r(67, 1025), r(67, 1025), r(67, 1025)], [0.5, -1.25, 2.0]])]
    if op == "max_along":
        return [("dim 1 of [33, 200, 5]", [perm(33, 200, 5, dim=1), 1, False]),
                ("last dim, keepdim [65, 257]", [perm(65, 257, dim=1), -1, True])]
    if op == "masked_softmax":
        mask = torch.rand(67, 1025, generator=g) > 0.3
        mask[:, 0] = True
        mask[5] = False  # a fully masked row
        return [("masked, last dim [67, 1025]", [r(67, 1025), mask, -1]),
                ("dim 0 [1025, 67]", [r(1025, 67), None, 0])]
    if op == "clamp_count":
        # Bounds exact in every dtype: no rounding of the bounds to tell the kernels apart.
        return [("[100003]", [r(100003), -0.5, 0.75])]
    raise AssertionError(f"no large case for {op}: add one")


def cases(op, dtype):
    """[(label, args on CPU in dtype)]: the registered samples and the large cases."""
    out = [(label, args) for label, args in samples(op, "cpu", dtype)]
    out += [(label, to(args, dtype=dtype)) for label, args in large_cases(op)]
    return out


def call(op, args):
    return getattr(customop, op)(*args)


def floating(outputs):
    return [t for t in tensors_in(outputs) if t.is_floating_point()]


def max_error(x, ref):
    """max |x - ref| over the finite elements; inf when the NaN/inf positions differ."""
    x = x.detach().to("cpu", F64)
    ref = ref.detach().to("cpu", F64)
    if not torch.equal(torch.isfinite(x), torch.isfinite(ref)):
        return math.inf
    finite = torch.isfinite(ref)
    return (x - ref)[finite].abs().max().item() if finite.any() else 0.0


def check_close(what, dtype, cuda, cpu, ref):
    """CUDA's error vs the float64 reference at most 2x the CPU kernel's + ULPS ulps."""
    assert cuda.device.type == CUDA, f"{what}: on {cuda.device}, expected cuda"
    assert cuda.dtype == cpu.dtype and cuda.shape == cpu.shape, (
        f"{what}: CUDA gives {cuda.dtype} {list(cuda.shape)}, CPU {cpu.dtype} {list(cpu.shape)}")
    finite = ref[torch.isfinite(ref)]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    e_cuda, e_cpu = max_error(cuda, ref), max_error(cpu, ref)
    allowed = 2 * e_cpu + ULPS * torch.finfo(dtype).eps * scale
    assert e_cuda <= allowed, (
        f"{what}: CUDA is off the float64 reference by {e_cuda:.3g}, the CPU kernel by {e_cpu:.3g} "
        f"(allowed {allowed:.3g}); max |CUDA - CPU| = {max_error(cuda, cpu.to(F64)):.3g}")


def run(op, args, grad_outputs):
    """The op's outputs and the grads of its floating tensor arguments (None where unused)."""
    args = leaves(args)
    outputs = call(op, args)
    outs = floating(outputs)
    inputs = [t for t in tensors_in(args) if t.requires_grad]
    grads = torch.autograd.grad(outs, inputs, [g.to(outs[0].device, outs[k].dtype) for k, g in
                                               enumerate(grad_outputs)], allow_unused=True)
    return outputs, grads


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("op", OPS)
def test_cuda_forward_and_backward_match_the_cpu_kernels(op, dtype):
    gen = torch.Generator().manual_seed(1)
    for label, args in cases(op, dtype):
        what = f"{op} ({label}, {str(dtype).removeprefix('torch.')})"
        with torch.no_grad():
            probe = floating(call(op, args))
        grad_outputs = [torch.randn(t.shape, generator=gen, dtype=F64).to(dtype) for t in probe]
        cpu_out, cpu_grads = run(op, args, grad_outputs)
        cuda_out, cuda_grads = run(op, to(args, device=CUDA), grad_outputs)
        ref_out, ref_grads = run(op, to(args, dtype=F64), [g.to(F64) for g in grad_outputs])

        cuda_t, cpu_t, ref_t = tensors_in(cuda_out), tensors_in(cpu_out), tensors_in(ref_out)
        assert len(cuda_t) == len(cpu_t), f"{what}: {len(cuda_t)} outputs on CUDA, {len(cpu_t)} on CPU"
        for k, (c, p, r) in enumerate(zip(cuda_t, cpu_t, ref_t)):
            if c.is_floating_point():
                check_close(f"{what} output {k}", dtype, c, p, r)
            else:
                assert c.dtype == p.dtype and torch.equal(c.cpu(), p), (
                    f"{what} output {k} ({p.dtype}): CUDA {c.cpu()} != CPU {p}"[:2000])
        for k, (c, p, r) in enumerate(zip(cuda_grads, cpu_grads, ref_grads)):
            assert (c is None) == (p is None), f"{what} grad {k}: CUDA {c is None=}, CPU {p is None=}"
            if c is not None:
                check_close(f"{what} grad of tensor argument {k}", dtype, c, p, r)


@pytest.mark.parametrize("op", OPS)
def test_each_op_keeps_its_autocast_policy_on_cuda(op):
    """Under torch.autocast("cuda", bfloat16) an op's outputs have the dtypes autocast("cpu")
    gives on CPU (the policy is declared once, for both keys), and agree to bfloat16 rounding;
    the backward runs and each grad has its input's dtype."""
    for label, args in samples(op, "cpu", torch.float32)[:2]:
        what = f"{op} ({label})"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cpu_out = tensors_in(call(op, args))
        cuda_args = leaves(to(args, device=CUDA))
        with torch.autocast(CUDA, dtype=torch.bfloat16):
            outputs = call(op, cuda_args)
        cuda_out = tensors_in(outputs)
        assert [t.dtype for t in cuda_out] == [t.dtype for t in cpu_out], (
            f"{what}: autocast(cuda) gives {[t.dtype for t in cuda_out]}, "
            f"autocast(cpu) {[t.dtype for t in cpu_out]}")
        for c, p in zip(cuda_out, cpu_out):
            if c.is_floating_point():
                torch.testing.assert_close(c.detach().cpu().float(), p.float(), rtol=2e-2, atol=2e-2,
                                           equal_nan=True, msg=lambda m: f"{what}: {m}")
        outs = floating(outputs)
        inputs = [t for t in tensors_in(cuda_args) if t.requires_grad]
        grads = torch.autograd.grad([o.float().sum() for o in outs], inputs, allow_unused=True)
        for t, g in zip(inputs, grads):
            assert g is None or (g.dtype == t.dtype and g.device == t.device), (
                f"{what}: grad {g.dtype} on {g.device} for an input {t.dtype} on {t.device}")


def test_mixed_precision_layer_on_cuda_under_autocast():
    """bfloat16 activations beside float32 parameters (a linear layer under autocast feeding
    the ops, as the digits demo's model): runs on CUDA, float32 grads for the parameters."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g).to(CUDA)
    lin = (torch.randn(48, 32, generator=g) / 6).to(CUDA).requires_grad_()
    norm = (torch.rand(48, generator=g) + 0.5).to(CUDA).requires_grad_()
    bias = torch.randn(48, generator=g).to(CUDA).requires_grad_()
    with torch.autocast(CUDA, dtype=torch.bfloat16):
        h = torch.nn.functional.linear(x, lin)
        assert h.dtype == torch.bfloat16
        h = customop.rms_norm(h, norm, 1e-6)
        h = customop.bias_gelu(h, bias, "tanh")
        p = customop.masked_softmax(h, None, -1)
        m, _ = customop.max_along(customop.weighted_sum([p, h], [0.5, 2.0]), -1, True)
        out = (m.float() ** 2).sum()
    out.backward()
    for name, t in (("linear", lin), ("rms_norm weight", norm), ("bias_gelu bias", bias)):
        assert t.grad is not None and t.grad.dtype == torch.float32, f"{name}: {t.grad}"
        assert torch.isfinite(t.grad).all(), f"{name}: non-finite grad"


def test_an_argument_on_another_device_names_the_op_and_the_argument():
    x = torch.randn(4, 8, device=CUDA)
    with pytest.raises(RuntimeError, match=r"rms_norm: weight must be on the same device as input "
                                           r"\(cuda:0\), but got cpu"):
        customop.rms_norm(x, torch.ones(8), 1e-6)
