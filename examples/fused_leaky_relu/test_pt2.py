"""The fused bias + leaky ReLU (both registrations) in the PyTorch 2 stack: torch.library.opcheck
(its aot_dispatch test traces the backward, so the backward op's fake kernel is exercised),
torch.compile of a training step against eager, and double backward from Python.

Environment: FLRELU_OPS_LIB (libflrelu_ops.so).
"""

import os

import pytest
import torch

LIB = os.environ.get("FLRELU_OPS_LIB", "")
if not os.path.exists(LIB):
    pytest.skip(f"FLRELU_OPS_LIB={LIB!r} does not exist", allow_module_level=True)
torch.ops.load_library(LIB)

NAMESPACES = ["flrelu", "flrelu_by_hand"]


def _op(ns):
    return getattr(torch.ops, ns).fused_bias_leaky_relu.default


def _inputs(shape=(4, 3, 5), dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=dtype)
    x = (x + 0.1 * x.sign()).requires_grad_()  # away from the kink at x + bias = 0
    bias = (0.01 * torch.randn(shape[1], generator=g, dtype=dtype)).requires_grad_()
    return x, bias


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("ns", NAMESPACES)
def test_opcheck(ns, dtype):
    x, bias = _inputs(dtype=dtype)
    torch.library.opcheck(_op(ns), (x, bias, 0.2, 2.0 ** 0.5))
    backward = getattr(torch.ops, ns).fused_bias_leaky_relu_backward.default
    out = _op(ns)(x.detach(), bias.detach())
    assert out.dtype == dtype
    torch.library.opcheck(backward, (torch.randn_like(out).requires_grad_(), out, 0.2, 2.0 ** 0.5))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_compiled_training_step_matches_eager(ns):
    op = _op(ns)

    def step(x, bias, w):
        return (op(x, bias) * w).sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=True)
    for shape in [(4, 3, 5), (2, 3, 7)]:
        x, bias = _inputs(shape)
        w = torch.randn(shape, dtype=torch.float64)
        eager = step(x, bias, w)
        ge = torch.autograd.grad(eager, (x, bias))
        got = compiled(x, bias, w)
        gc = torch.autograd.grad(got, (x, bias))
        torch.testing.assert_close(got, eager, rtol=1e-12, atol=1e-12)
        for a, b in zip(gc, ge):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_gradgradcheck(ns):
    x, bias = _inputs((2, 3, 4))
    assert torch.autograd.gradgradcheck(lambda a, b: _op(ns)(a, b), (x, bias))
