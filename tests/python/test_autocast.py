"""The built-in ops under torch.autocast on CPU: each declares its policy (op.autocast in C++),
so a model that feeds them bfloat16 activations beside float32 parameters runs, eagerly and
under torch.compile(fullgraph=True), and the grads come back in each input's dtype.

Environment: CUSTOMOP_OPS_LIB (libcustomop_ops.so)."""

import os
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS_LIB = os.environ.get("CUSTOMOP_OPS_LIB") or str(
    ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so")
if not os.path.exists(OPS_LIB):
    if "CUSTOMOP_OPS_LIB" in os.environ:
        raise FileNotFoundError(f"CUSTOMOP_OPS_LIB={OPS_LIB} does not exist")
    pytest.skip(f"op library not built ({OPS_LIB}); set CUSTOMOP_OPS_LIB", allow_module_level=True)
torch.ops.load_library(OPS_LIB)
ops = torch.ops.customop
BF16 = torch.bfloat16


def model(x, lin_w, norm_w, bias, mask):
    """A linear layer (bfloat16 under autocast) into every built-in op."""
    h = torch.nn.functional.linear(x, lin_w)
    h = ops.rms_norm(h, norm_w, 1e-6)
    h = ops.bias_gelu(h, bias, "tanh")
    p = ops.masked_softmax(h, mask, -1)
    s = ops.weighted_sum([p, h], [0.5, 2.0])
    m, _indices = ops.max_along(s, -1, True)
    c, _clamped = ops.clamp_count(s, -1.0, 1.0)
    return (c * m).sum()


def inputs(requires_grad=True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, generator=g)
    lin_w = (torch.randn(8, 16, generator=g) / 4).requires_grad_(requires_grad)
    norm_w = (torch.rand(8, generator=g) + 0.5).requires_grad_(requires_grad)
    bias = torch.randn(8, generator=g).requires_grad_(requires_grad)
    mask = torch.rand(4, 8, generator=g) > 0.2
    return x, lin_w, norm_w, bias, mask


def test_each_op_declares_a_policy_and_runs_under_a_bfloat16_autocast():
    x, lin_w, norm_w, bias, mask = inputs()
    with torch.autocast("cpu", dtype=BF16):
        h = torch.nn.functional.linear(x, lin_w)
        assert h.dtype == BF16  # what the ops are fed: bfloat16 beside float32 parameters
        y = ops.rms_norm(h, norm_w, 1e-6)
        assert y.dtype == torch.float32  # float32 policy, as torch's norms
        g = ops.bias_gelu(h, bias, "tanh")
        assert g.dtype == torch.float32  # promote: bfloat16 beside a float32 bias
        out = model(x, lin_w, norm_w, bias, mask)
    out.backward()
    assert all(t.grad is not None and t.grad.dtype == torch.float32 for t in (lin_w, norm_w, bias))
    # The same model in float32 on the bfloat16-rounded linear output agrees to bfloat16 rounding.
    with torch.no_grad():
        ref = model(x, lin_w, norm_w, bias, mask)
    assert torch.allclose(out.detach(), ref, rtol=5e-2, atol=5e-2), (out, ref)


def test_without_autocast_mixed_dtypes_still_name_the_op_and_both_arguments():
    x, lin_w, norm_w, bias, mask = inputs(requires_grad=False)
    with pytest.raises(TypeError, match=r"rms_norm: weight must have the dtype of input \(float64\), "
                                        r"but got float32"):
        ops.rms_norm(x.double(), norm_w, 1e-6)
    h = torch.nn.functional.linear(x, lin_w)  # [4, 8], as the ops get it in the model
    with pytest.raises(TypeError, match=r"bias_gelu: bias must have the dtype of input \(bfloat16\), "
                                        r"but got float32"):
        ops.bias_gelu(h.to(BF16), bias, "none")
    # All in bfloat16, no autocast: the bfloat16 CPU kernel, in bfloat16 out.
    assert ops.rms_norm(h.to(BF16), norm_w.to(BF16), 1e-6).dtype == BF16


def test_torch_compile_fullgraph_under_autocast_matches_eager():
    x, lin_w, norm_w, bias, mask = inputs(requires_grad=False)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=BF16):
        eager = model(x, lin_w, norm_w, bias, mask)
        traced = compiled(x, lin_w, norm_w, bias, mask)
    assert traced.dtype == eager.dtype
    assert torch.allclose(traced, eager, rtol=1e-5, atol=1e-5), (traced, eager)
