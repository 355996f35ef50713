"""customop.gradcheck.check from a new user's side: torch's own warnings and logs stay out of the
check (and out of its output), option values are refused in Python naming the option, the
package's op functions are ops, an op without a fake kernel is noted quietly, an empty sample
passes, and `import customop` without numpy warns no more than `import torch`.

Environment: PYTHONPATH holds the customop package (build/<preset>/python_dev).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import customop
import customop.gradcheck as gc
from customop._op_names import op_name

D = torch.float64


def _rms_norm_sample(rows: int = 3):
    return (torch.randn(rows, 8, dtype=D, requires_grad=True),
            torch.randn(8, dtype=D, requires_grad=True), 1e-6)


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (torch loads its forward-AD decompositions once per
    process: this one has not yet)."""
    return subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=dict(os.environ), timeout=300)


# ---- torch's own warnings ----------------------------------------------------------------------

_TRANSFORMS = """
    import torch, customop, customop.gradcheck as gc
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    r = gc.check(torch.ops.customop.rms_norm, [(x, w)], check_compiled=False)[0]
    assert r["passed"], gc.format_failure(r)
    assert "hessian" in r["transforms"]["transforms"], r["transforms"]
"""
_FORWARD_AD = """
    import torch, customop
    from customop.gradcheck import gradcheck
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert gradcheck(torch.sin, (x,), check_forward_ad=True)
"""
_BATCHED_FORWARD = """
    import torch, customop
    from customop.gradcheck import gradcheck
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert gradcheck(torch.sin, (x,), check_batched_forward_grad=True)
"""


@pytest.mark.parametrize("code", [_TRANSFORMS, _FORWARD_AD, _BATCHED_FORWARD],
                         ids=["check_transforms", "check_forward_ad", "batched_forward_grad"])
def test_torchs_jvp_futurewarning_neither_fails_nor_prints(code):
    # torch's first jvp imports decompositions that call torch.jit.script (FutureWarning).
    escalated = _python(code, "-W", "error::FutureWarning")
    assert escalated.returncode == 0, escalated.stderr[-3000:]
    plain = _python(code)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "FutureWarning" not in plain.stderr, plain.stderr[-3000:]


@torch.library.custom_op("customop_usability::warns", mutates_args=())
def _warns(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("the op's own warning", UserWarning)
    return x * 2.0


_warns.register_fake(lambda x: torch.empty_like(x))
_warns.register_autograd(lambda ctx, g: g * 2.0)


def test_the_ops_own_warning_still_reaches_the_caller():
    x = torch.randn(4, dtype=D, requires_grad=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = gc.check(_warns, [(x,)], check_compiled=False)[0]
    assert report["passed"], gc.format_failure(report)
    assert any("the op's own warning" in str(w.message) for w in seen)


# ---- import without numpy ----------------------------------------------------------------------

def test_import_customop_without_numpy_adds_no_warning_to_torchs():
    # NB: torch 2.15's own `import torch` warns "Failed to initialize NumPy" without numpy
    # (torch/_subclasses/functional_tensor.py, once per process): that one is torch's. What
    # customop's import adds must be nothing, and must not need numpy.
    proc = _python("""
        import sys, warnings
        class NoNumpy:
            def find_spec(self, name, path=None, target=None):
                if name == "numpy" or name.startswith("numpy."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, NoNumpy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            import customop, customop.gradcheck
        assert "numpy" not in sys.modules or sys.modules["numpy"] is None
        print([f"{w.category.__name__}: {w.message}" for w in seen])
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]" and proc.stderr == "", (proc.stdout, proc.stderr)


# ---- op spellings ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", customop.BUILT_IN_OPS)
def test_customops_own_functions_name_their_op(name):
    assert op_name(getattr(customop, name)) == f"customop::{name}"


def test_check_takes_customop_rms_norm():
    report = gc.check(customop.rms_norm, [_rms_norm_sample()], check_compiled=False)[0]
    assert report["op"] == "customop::rms_norm"
    assert report["passed"], gc.format_failure(report)


def test_check_refuses_a_plain_function_and_points_to_gradcheck():
    def twice(x):
        return 2 * x

    with pytest.raises(TypeError, match=r"expected an op .* got function; to check the Python "
                                        r"function 'test_check_refuses.*twice' itself, use "
                                        r"customop\.gradcheck\.gradcheck\(func, inputs\)"):
        gc.check(twice, [_rms_norm_sample()[:1]])


# ---- option values -----------------------------------------------------------------------------

@pytest.mark.parametrize("options, error, message", [
    ({"atol": "x"}, TypeError, "option 'atol' must be a number, got 'x' (str)"),
    ({"eps": -1}, ValueError, "option 'eps' must be a finite number > 0, got -1 (int)"),
    ({"eps": 0.0}, ValueError, "option 'eps' must be a finite number > 0, got 0.0 (float)"),
    ({"rtol": -1e-3}, ValueError, "option 'rtol' must be a finite number >= 0, got -0.001"),
    ({"nondet_tol": True}, TypeError, "option 'nondet_tol' must be a number, got True (bool)"),
    ({"seed": 1.5}, TypeError, "option 'seed' must be an int, got 1.5 (float)"),
    ({"seed": -1}, ValueError, "option 'seed' must be an int >= 0 and < 2^64, got -1 (int)"),
    ({"mode": "medium"}, ValueError, "option 'mode' must be \"slow\" or \"fast\", got 'medium'"),
    ({"check_second_order": 1}, TypeError,
     "option 'check_second_order' must be a bool (True or False), got 1 (int)"),
    ({"label": 3}, TypeError, "option 'label' must be a str, got 3 (int)"),
])
def test_bad_option_values_name_the_option(options, error, message):
    with pytest.raises(error) as raised:
        gc.check(torch.ops.customop.rms_norm, [_rms_norm_sample()], **options)
    assert str(raised.value).startswith("customop.gradcheck.check(customop::rms_norm): ")
    assert message in str(raised.value)


def test_numpy_option_values_are_taken():
    np = pytest.importorskip("numpy")
    report = gc.check(torch.ops.customop.rms_norm, [_rms_norm_sample()], eps=np.float64(1e-6),
                      seed=np.int64(3), check_compiled=False, check_transforms=False)[0]
    assert report["passed"], gc.format_failure(report)


# ---- an op without a fake kernel ---------------------------------------------------------------

def _cube_op(namespace: str, meta_raises: bool):
    """namespace::cube, CPU kernel and autograd only; with meta_raises, a Meta kernel that
    raises as customop's C++ ops without op.impl_fake do (plugin/src/op_dispatch.cpp)."""
    torch.library.define(f"{namespace}::cube", "(Tensor x) -> Tensor")
    torch.library.impl(f"{namespace}::cube", "CPU")(lambda x: x * x * x)
    if meta_raises:
        def meta(x):
            raise RuntimeError(f"{namespace}::cube: no fake (Meta) kernel registered, so the op "
                               f"cannot run on meta tensors, under FakeTensor, torch.compile or "
                               f"torch.export")
        torch.library.impl(f"{namespace}::cube", "Meta")(meta)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x

    torch.library.register_autograd(f"{namespace}::cube", backward, setup_context=setup)
    return getattr(torch.ops, namespace).cube


_NO_META = _cube_op("customop_usability_no_meta", meta_raises=False)
_META_RAISES = _cube_op("customop_usability_meta_raises", meta_raises=True)


@pytest.mark.parametrize("op", [_NO_META, _META_RAISES], ids=["no_meta_kernel", "meta_raises"])
def test_an_op_without_a_fake_kernel_is_noted_and_nothing_printed(op, capfd):
    x = torch.randn(5, dtype=D, requires_grad=True)
    report = gc.check(op, [(x,)])[0]
    assert report["passed"], gc.format_failure(report)
    assert "compiled: not checked (the op has no fake kernel)" in report["notes"]
    assert "shape lock: not checked (the op has no fake kernel)" in report["notes"]
    err = capfd.readouterr().err
    assert "fake_tensor.py" not in err and "Traceback" not in err, err


# ---- an empty sample ---------------------------------------------------------------------------

def test_an_empty_sample_passes_every_transform():
    x = torch.empty(0, 8, dtype=D, requires_grad=True)
    w = torch.randn(8, dtype=D, requires_grad=True)
    report = gc.check(torch.ops.customop.rms_norm, [(x, w, 1e-6)], check_compiled=False)[0]
    assert report["passed"], gc.format_failure(report)
    assert "hessian" in report["transforms"]["transforms"], report["transforms"]
