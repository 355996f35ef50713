"""customop.gradcheck.check(..., dtype=torch.bfloat16 / torch.float16): the low-precision rule
from Python, on a built-in op (its declared reference) and on a Python custom op whose backward
is wrong only in bfloat16 (the op's own float64 run, or a named reference, is the precise run)."""

from __future__ import annotations

import pytest
import torch

import customop  # noqa: F401  (loads torch.ops.customop.*)
import customop.gradcheck as gc


def leaf(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(True)


@torch.library.custom_op("customop_lp_test::softplus", mutates_args=())
def softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(x.float()).to(x.dtype) if x.dtype in (
        torch.bfloat16, torch.float16) else torch.nn.functional.softplus(x)


@softplus.register_fake
def _(x):
    return torch.empty_like(x)


FACTOR = {"low": 1.0}


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, g):
    (x,) = ctx.saved_tensors
    low = x.dtype in (torch.bfloat16, torch.float16)
    grad = g.float() * torch.sigmoid(x.float()) if low else g * torch.sigmoid(x)
    if low:
        grad = grad * FACTOR["low"]  # the planted bug: only in the low dtype
    return grad.to(x.dtype)


softplus.register_autograd(_backward, setup_context=_setup)

# The same function written with ATen ops (autograd differentiates it): a reference.
_LIB = torch.library.Library("customop_lp_test", "FRAGMENT")
_LIB.define("softplus_reference(Tensor x) -> Tensor")
_LIB.impl("softplus_reference", lambda x: torch.log1p(torch.exp(x)), "CompositeImplicitAutograd")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_builtin_op_passes_against_its_declared_reference(dtype):
    x, w = leaf(6, 16), (torch.rand(16, dtype=torch.float64) + 0.5).requires_grad_(True)
    (report,) = gc.check(torch.ops.customop.rms_norm, [(x, w, 1e-6)], dtype=dtype)
    assert report["passed"], gc.format_failure(report)
    assert report["dtype"] == str(dtype).removeprefix("torch.")
    assert report["precision_rule"] == "reference"
    assert [c["what"] for c in report["low_precision"]] == [
        "output 'output 0'", "grad of 'input'", "grad of 'weight'"]


@pytest.mark.parametrize("reference", [None, "customop_lp_test::softplus_reference"])
def test_a_backward_one_percent_off_only_in_bfloat16_is_caught(reference):
    opts = {} if reference is None else {"reference": reference}
    samples = [(leaf(16, 32, seed=s),) for s in range(3)]
    FACTOR["low"] = 1.0
    for r in gc.check(softplus, samples, dtype=torch.bfloat16, **opts):
        assert r["passed"], gc.format_failure(r)
        assert r["precision_rule"] == ("reference" if reference else "no reference")
    FACTOR["low"] = 1.01
    try:
        reports = gc.check(softplus, samples, dtype=torch.bfloat16, **opts)
        float64 = gc.check(softplus, samples[:1], dtype=torch.float64)
    finally:
        FACTOR["low"] = 1.0
    for r in reports:
        assert not r["passed"]
        (failure,) = [f for f in r["failures"] if f["check"] == "low_precision"]
        assert failure["headline"].startswith("bfloat16 grad of 'x' is off"), failure
    assert float64[0]["passed"]  # float64 never sees the flaw


def test_dtype_and_reference_are_checked():
    with pytest.raises(ValueError, match="dtype must be one of"):
        gc.check(softplus, [(leaf(3),)], dtype=torch.int32)
    with pytest.raises(ValueError, match="reference 'aten::nonexistent_op' is not a registered op"):
        gc.check(softplus, [(leaf(3),)], dtype=torch.bfloat16, reference="aten::nonexistent_op")
    with pytest.raises(ValueError, match="does not take the arguments and returns"):
        gc.check(softplus, [(leaf(3),)], dtype=torch.bfloat16, reference="aten::softplus")


# A logsumexp that keeps its output in the 16-bit dtype and reads it back in backward, as ATen's
# does: correct, though bfloat16's rounding of an output ~100 (0.5) moves exp(x - y) by 28 %.
# The no-reference rule judges it against its float64 run with the saved tensors rounded
# (Python's saved tensors reach that run through torch.autograd.graph.saved_tensors_hooks).
LSE_FACTOR = {"low": 1.0}


@torch.library.custom_op("customop_lp_test::lse", mutates_args=())
def lse(x: torch.Tensor) -> torch.Tensor:
    low = x.dtype in (torch.bfloat16, torch.float16)
    return torch.logsumexp(x.float() if low else x, -1).to(x.dtype)


@lse.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])


def _lse_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _lse_backward(ctx, g):
    x, y = ctx.saved_tensors
    low = x.dtype in (torch.bfloat16, torch.float16)
    t = torch.float32 if low else x.dtype
    grad = g.to(t).unsqueeze(-1) * torch.exp(x.to(t) - y.to(t).unsqueeze(-1))
    return (grad * LSE_FACTOR["low"] if low else grad).to(x.dtype)


lse.register_autograd(_lse_backward, setup_context=_lse_setup)


def test_a_saved_rounded_output_passes_and_a_wrong_backward_is_caught():
    big = [((leaf(16, 256, seed=s) * 30).detach().requires_grad_(True),) for s in range(4)]
    baselines = []
    for dtype in (torch.bfloat16, torch.float16):
        for seed, sample in enumerate(big):
            (r,) = gc.check(lse, [sample], dtype=dtype, seed=seed)
            assert r["passed"], gc.format_failure(r)
            (grad,) = [c for c in r["low_precision"] if c["what"] == "grad of 'x'"]
            assert grad["saved_rounding_error"] > 0  # exactly 0 when nothing was rounded
            baselines.append(grad["baseline"])
    # Where the precise run alone rejected the grad (a false alarm before), the saved-rounded
    # run accepted it.
    assert "saved rounded" in baselines, baselines
    # The drop-in on ATen's own logsumexp, whose saved output is rounded the same way.
    x = (leaf(16, 256, seed=1) * 30).to(torch.bfloat16).detach().requires_grad_(True)
    assert gc.gradcheck(lambda t: torch.logsumexp(t, -1), (x,))
    LSE_FACTOR["low"] = 1.03
    try:
        small = [((leaf(16, 256, seed=s) * 10).detach().requires_grad_(True),) for s in range(3)]
        reports = gc.check(lse, small, dtype=torch.float16)
    finally:
        LSE_FACTOR["low"] = 1.0
    for r in reports:
        assert not r["passed"]
        (failure,) = [f for f in r["failures"] if f["check"] == "low_precision"]
        assert "against the float64 run with its saved tensors rounded" in failure["detail"]


class _Softplus(torch.autograd.Function):
    """softplus saving exp(x), computed in float32 for the 16-bit dtypes; `half_above` halves
    the float16 grad where x > 11.5 (the planted bug), where exp(x) rounded to float16 is inf."""
    half_above = False

    @staticmethod
    def forward(ctx, x):
        low = x.dtype in (torch.float16, torch.bfloat16)
        e = torch.exp(x.float() if low else x)
        ctx.save_for_backward(x, e)
        return torch.log1p(e).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, e = ctx.saved_tensors
        grad = g.to(e.dtype) * e / (1 + e)
        if _Softplus.half_above and x.dtype == torch.float16:
            grad = torch.where(x > 11.5, grad * 0.5, grad)
        return grad.to(x.dtype)


def test_a_non_finite_saved_rounded_run_hides_no_wrong_element():
    # Rounding the saved exp(x) to float16 overflows above x ~ 11.1: that run is inf/NaN
    # there, and the precise run judges those elements.
    x = torch.linspace(-4, 14, 64, dtype=torch.float64).to(torch.float16).requires_grad_()
    assert gc.gradcheck(_Softplus.apply, (x,))
    _Softplus.half_above = True
    try:
        ok, report = gc.check_callable(gc.gradcheck, _Softplus.apply, (x,))
    finally:
        _Softplus.half_above = False
    assert not ok
    assert any(f["check"] == "low_precision" for f in report["failures"]), report["failures"]


def test_torch_func_inside_and_nested_checks_run_without_the_rounding_hooks():
    # torch.func refuses saved-tensor hooks: that run is left out, with a note.
    f = lambda t: torch.func.grad(lambda u: (torch.tanh(u) ** 2).sum())(t)  # noqa: E731
    x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ok, report = gc.check_callable(gc.gradcheck, f, (x.to(torch.bfloat16).requires_grad_(),))
    assert ok, gc.format_failure(report)
    assert any("saved tensors rounded to bfloat16 raised" in n for n in report["notes"])
    # A float64 check inside a function under a bfloat16 check runs at full precision, and
    # no hook is left installed afterwards.
    inner = []

    def outer(t):
        w = torch.linspace(0.5, 1.5, 8, dtype=torch.float64, requires_grad=True)
        inner.append(gc.gradcheck(lambda v: (v * torch.sigmoid(v)).exp(), (w,)))
        return torch.sigmoid(t) * 2

    assert gc.gradcheck(outer, (x.to(torch.bfloat16).requires_grad_(),))
    assert inner and all(inner)
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)  # torch >= 2.4
    assert top is None or top(True) is None


def llama_rms_norm(hidden_states, weight, eps=1e-6):
    """Hugging Face LLaMA's RMSNorm: computes in float32 whatever its input's dtype."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def upcast_exp(factor):
    """y = exp(a) / 2 computed in float32 inside; its backward (also in float32) is `factor`
    times the true one."""

    class UpcastExp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return (a.to(torch.float32).exp() * 0.5).to(a.dtype)

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return (g.to(torch.float32) * a.to(torch.float32).exp() * 0.5 * factor).to(a.dtype)

    return UpcastExp.apply


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_function_that_computes_in_float32_inside_is_judged_in_float64(dtype):
    # Its float64 run keeps float64 where the function casts to float32: before, that run was
    # float32-precise, so LLaMA's RMSNorm failed in bfloat16 and float16 (a layout "bug" of
    # float32 rounding), and a backward 10 % off passed with a warning.
    x = leaf(4, 64).detach().to(dtype).requires_grad_(True)
    w = (1 + 0.1 * leaf(64, seed=1)).detach().to(dtype).requires_grad_(True)
    assert gc.gradcheck(llama_rms_norm, (x, w))
    a = leaf(4, 8, seed=2).detach().to(dtype).requires_grad_(True)
    assert gc.gradcheck(upcast_exp(1.0), (a,))
    for fast in (False, True):
        assert not gc.gradcheck(upcast_exp(1.1), (a,), raise_exception=False, fast_mode=fast)


def test_a_module_whose_parameters_are_not_inputs_runs_in_float64_too():
    # Its float64 run gets the bfloat16 parameters in float64 (a differentiable cast): before,
    # F.linear raised "mat1 and mat2 must have the same dtype" there.
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4).to(torch.bfloat16)
    x = leaf(3, 8).detach().to(torch.bfloat16).requires_grad_(True)
    assert gc.gradcheck(linear, (x,))
    assert gc.gradcheck(lambda x: torch.tanh(linear(x)), (x,))


def test_the_float64_run_keeps_the_functions_own_roundings_and_integer_casts():
    # A constant rounded on purpose (a bfloat16 weight) keeps its rounding in the float64 run,
    # and type_as/.type to an integer or to a lower precision behave as the function says.
    torch.manual_seed(0)
    w = torch.randn(4, 3)
    index = torch.zeros(1, dtype=torch.long)
    x = leaf(2, 4).detach().float().requires_grad_(True)
    assert gc.gradcheck(lambda x: x @ w.bfloat16().to(x.dtype), (x,))
    assert gc.gradcheck(lambda x: x * (x.detach() * 3).type_as(index), (x,))
    assert gc.gradcheck(lambda x: x.type(torch.float16).float() * 3, (x,))
