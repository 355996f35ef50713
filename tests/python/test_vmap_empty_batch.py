"""vmap over a batch of size 0 through the built-in ops' batching rules (Op::vmap).

torch.func.jacrev of a function whose output has no elements vmaps the VJP over those 0
elements: the backward ops (BatchRule::loop) then see a batch of size 0, where no example exists
to call them on. They answer with empty batches of the right shapes (the op run once on the Meta
device), so jacrev and hessian of an empty input give the empty Jacobian ATen's composites give;
tests/core/batching_test.cpp covers the refusals (no shape function; a non-tensor return).

Environment: CUSTOMOP_OPS_LIB (libcustomop_ops.so).
"""

import os
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.func import hessian, jacrev, vmap

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS_LIB = os.environ.get("CUSTOMOP_OPS_LIB") or str(
    ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so")
if not os.path.exists(OPS_LIB):
    if "CUSTOMOP_OPS_LIB" in os.environ:
        raise FileNotFoundError(f"CUSTOMOP_OPS_LIB={OPS_LIB} does not exist")
    pytest.skip(f"op library not built ({OPS_LIB}); set CUSTOMOP_OPS_LIB", allow_module_level=True)
torch.ops.load_library(OPS_LIB)
ops = torch.ops.customop
D = torch.float64


@pytest.fixture(autouse=True)
def _no_vmap_fallback():
    """torch's per-example vmap fallback off: the ops' own batching rules must serve."""
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


def _rms_norm_composite(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_jacrev_of_bias_gelu_on_an_empty_input(argnums):
    x, b = torch.empty(0, 3, dtype=D), torch.randn(3, dtype=D)
    ours = jacrev(lambda a, c: ops.bias_gelu(a, c), argnums=argnums)(x, b)
    theirs = jacrev(lambda a, c: F.gelu(a + c), argnums=argnums)(x, b)
    for o, t in zip(*(v if isinstance(v, tuple) else (v,) for v in (ours, theirs))):
        assert o.shape == t.shape and o.dtype == t.dtype and o.device == t.device


def test_jacrev_and_hessian_of_rms_norm_on_an_empty_input():
    x, w = torch.empty(0, 4, dtype=D), torch.randn(4, dtype=D)
    ours = jacrev(lambda a, c: ops.rms_norm(a, c, 1e-6), argnums=(0, 1))(x, w)
    theirs = jacrev(_rms_norm_composite, argnums=(0, 1))(x, w)
    assert [o.shape for o in ours] == [t.shape for t in theirs] == [(0, 4, 0, 4), (0, 4, 4)]
    h = hessian(lambda a: ops.rms_norm(a, w, 1e-6).sum())(x)
    assert h.shape == (0, 4, 0, 4)


def test_vmap_of_a_backward_op_over_zero_examples():
    # bias_gelu_backward (BatchRule::loop: grad_bias sums the rows) over a batch of 0 grads.
    g, x, b = torch.empty(0, 2, 3, dtype=D), torch.randn(2, 3, dtype=D), torch.randn(3, dtype=D)
    out = vmap(lambda gg: ops.bias_gelu_backward(gg, x, b), in_dims=0)(g)
    # Each example's returns (grad_input [2, 3], grad_bias [3], as one call shows), batched by 0.
    one = ops.bias_gelu_backward(torch.randn(2, 3, dtype=D), x, b)
    assert [t.shape for t in out] == [(0, *t.shape) for t in one]
    assert all(t.dtype == D for t in out)


def test_a_written_argument_comes_back_unwritten_over_zero_examples():
    # fused_add_rms_norm_ (BatchRule::loop, writes input and residual, returns ()) over 0
    # examples.
    h, r = torch.empty(0, 2, 4, dtype=D), torch.empty(0, 2, 4, dtype=D)
    w = torch.randn(4, dtype=D)

    def step(a, c):
        ops.fused_add_rms_norm_(a, c, w, 1e-6)
        return a, c

    out = vmap(step)(h, r)
    assert [t.shape for t in out] == [(0, 2, 4), (0, 2, 4)]


def test_clamp_count_over_zero_examples_gives_each_return_batched_empty():
    # clamp_count (BatchRule::loop: its count is a total over one example's input).
    x = torch.empty(0, 5, dtype=D)
    out = vmap(lambda a: ops.clamp_count(a, -0.5, 0.5))(x)
    one = ops.clamp_count(torch.randn(5, dtype=D), -0.5, 0.5)
    assert [(t.shape, t.dtype) for t in out] == [((0, *t.shape), t.dtype) for t in one]
