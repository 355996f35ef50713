"""customop.gradcheck for Python users: the drop-in gradcheck/gradgradcheck on any callable,
errors that come back as reports, the input-subset check, check() with keywords and defaults,
and the pytest plugin."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import customop.gradcheck as gc
from torch.autograd.gradcheck import GradcheckError


def leaf(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True)


class Scale(torch.autograd.Function):
    """y = x * w; `factor` scales the grad of w (1.0: correct)."""

    factor = 1.0

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x * Scale.factor


class SkipsWhenAlone(torch.autograd.Function):
    """y = x * w, whose grad of x is wrong only when w does not require grad: the path the
    full check never takes."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = g * w if ctx.needs_input_grad[1] else g * w * 1.5
        return gx, (g * x if ctx.needs_input_grad[1] else None)


class RaisingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise ValueError("my backward is broken")


def test_torch_style_calls_run_unchanged():
    x, w = leaf(4, 3), leaf(3, seed=1)
    assert gc.gradcheck(torch.sin, (x,))
    assert gc.gradcheck(torch.sin, x)  # one tensor, as torch takes it
    assert gc.gradcheck(Scale.apply, (x, w), eps=1e-6, atol=1e-5, rtol=1e-3, nondet_tol=0.0,
                        check_undefined_grad=True, check_grad_dtypes=True, fast_mode=True,
                        check_batched_grad=False, check_backward_ad=True, masked=None)
    assert gc.gradcheck(lambda xs, k: (xs[0] * xs[1]).pow(k), ([x, leaf(4, 3, seed=2)], 2))
    assert gc.gradgradcheck(torch.tanh, (x,))
    assert gc.gradgradcheck(lambda a, b: (a * b).sin(), (x, leaf(4, 3, seed=3)))
    assert gc.gradcheck(lambda a: torch.max(a, 1), (x,))  # values + int64 indices


def test_failure_names_the_parameter_and_the_element():
    Scale.factor = 1.01
    try:
        with pytest.raises(gc.GradcheckError) as e:
            gc.gradcheck(Scale.apply, (leaf(5), leaf(5, seed=1)))
        assert gc.gradcheck(Scale.apply, (leaf(5), leaf(5, seed=1)), raise_exception=False) is False
    finally:
        Scale.factor = 1.0
    text = str(e.value)
    assert "Jacobian mismatch for output 0 with respect to input 1 ('w')" in text, text
    assert "worst element: d output 0[" in text and "numerical" in text and "analytical" in text


def test_named_parameters_and_nested_inputs_name_the_input():
    def f(x, pair):
        return x * pair[0] + pair[1] * 1.01 if False else x * pair[0] + pair[1]

    def wrong(x, pair):
        return WrongSecond.apply(x, pair[1])

    assert gc.gradcheck(f, (leaf(3), [leaf(3, seed=1), leaf(3, seed=2)]))
    with pytest.raises(gc.GradcheckError, match=r"input 2 \('pair\[1\]'\)"):
        gc.gradcheck(wrong, (leaf(3), [leaf(3, seed=1), leaf(3, seed=2)]))


class WrongSecond(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        return g, g * 2


def test_refused_keywords_name_themselves():
    with pytest.raises(NotImplementedError, match="masked"):
        gc.gradcheck(torch.sin, (leaf(3),), masked=True)
    with pytest.raises(NotImplementedError, match="check_backward_ad"):
        gc.gradcheck(torch.sin, (leaf(3),), check_backward_ad=False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tolerance'"):
        gc.gradcheck(torch.sin, (leaf(3),), tolerance=1)


class SinMul(torch.autograd.Function):
    """y = x * sin(w), with a correct JVP."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        ctx.primals = (x, w)
        return x * w.sin()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w.sin(), g * x * w.cos()

    @staticmethod
    def jvp(ctx, tx, tw):
        x, w = ctx.primals
        return tx * w.sin() + x * w.cos() * tw


class SinMulWrongJvp(SinMul):
    """The planted bug: the JVP's w term is halved (the backward is right)."""

    @staticmethod
    def jvp(ctx, tx, tw):
        x, w = ctx.primals
        return tx * w.sin() + 0.5 * x * w.cos() * tw


@pytest.mark.parametrize("fast_mode", [False, True])
def test_check_forward_ad_catches_a_wrong_jvp_and_passes_its_twin(fast_mode):
    args = (leaf(3, 4, seed=1), leaf(3, 4, seed=2))
    ok, report = gc.check_callable(gc.gradcheck, SinMul.apply, args, check_forward_ad=True,
                                   fast_mode=fast_mode)
    assert ok and "forward_ad" in report["checks_run"], report.get("failures")
    ok, report = gc.check_callable(gc.gradcheck, SinMulWrongJvp.apply, args,
                                   check_forward_ad=True, fast_mode=fast_mode)
    assert not ok
    (failure,) = [f for f in report["failures"] if f["check"] == "forward_ad"]
    assert "input 'w'" in failure["headline"]  # x's JVP term is right: only w is named
    if not fast_mode:
        assert "at element [0, 0]" in failure["headline"]
    # The backward is right: the reverse-mode checks pass.
    assert all(f["check"] == "forward_ad" for f in report["failures"])


def test_check_forward_ad_reports_a_function_without_forward_mode_ad():
    class NoJvp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    ok, report = gc.check_callable(gc.gradcheck, NoJvp.apply, (leaf(3),), check_forward_ad=True)
    assert not ok
    (failure,) = report["failures"]
    assert failure["check"] == "forward_ad" and "raised" in failure["headline"]
    assert "jvp" in failure["detail"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_check_forward_ad_passes_the_builtin_ops(dtype):
    ops = torch.ops.customop
    x, y, w = leaf(3, 4, seed=3, dtype=dtype), leaf(3, 4, seed=4, dtype=dtype), leaf(4, seed=5, dtype=dtype)
    cases = {
        "rms_norm": (lambda a, b: ops.rms_norm(a, b, 1e-6), (x, w)),
        "bias_gelu": (lambda a, b: ops.bias_gelu(a, b, "tanh"), (x, w)),
        "max_along": (lambda a: ops.max_along(a, 1), (x,)),
        "clamp_count": (lambda a: ops.clamp_count(a, -0.5, 0.7), (x,)),
        "masked_softmax": (lambda a: ops.masked_softmax(a, None, -1), (x,)),
        "weighted_sum": (lambda a, b: ops.weighted_sum([a, b], [0.5, 2.0]), (x, y)),
    }
    for name, (f, args) in cases.items():
        for fast_mode in (False, True):
            ok, report = gc.check_callable(gc.gradcheck, f, args, check_forward_ad=True,
                                           fast_mode=fast_mode)
            assert ok, (name, fast_mode, report.get("failures"))


@pytest.mark.parametrize("kw", ["check_batched_grad", "check_batched_forward_grad"])
def test_batched_checks_run_the_function_under_vmap(kw):
    def f(x, w):
        return torch.ops.customop.rms_norm(x, w, 1e-6).sin() * w

    args = (leaf(3, 4, seed=8), leaf(4, seed=9))
    ok, report = gc.check_callable(gc.gradcheck, f, args, **{kw: True})
    assert ok, report.get("failures")
    assert kw.removeprefix("check_") in report["checks_run"]
    # An old-style autograd.Function (no setup_context) cannot run under torch.func.vmap:
    # NotImplementedError naming that, not a false failure.
    with pytest.raises(NotImplementedError, match="setup_context"):
        gc.gradcheck(Scale.apply, (leaf(3), leaf(3, seed=1)), **{kw: True})


def test_a_raising_backward_is_a_report_not_a_system_error():
    report = None
    with pytest.raises(gc.GradcheckError) as e:
        gc.gradcheck(RaisingBackward.apply, (leaf(3),))
    text = str(e.value)
    assert "backward raised an error" in text and "my backward is broken" in text, text
    line = inspect.getsourcelines(RaisingBackward.backward)[1] + 2
    assert f"ValueError: my backward is broken (raised at {__file__}:{line} in backward)" in text, \
        text
    ok, report = gc.check_callable(gc.gradcheck, RaisingBackward.apply, (leaf(3),))
    assert not ok and report["failures"][0]["check"] == "backward_error"
    # The interpreter is left clean: the next check runs.
    assert gc.gradcheck(torch.sin, (leaf(3),))


def test_a_raising_custom_op_backward_comes_back_from_check():
    @torch.library.custom_op("customop_callables::double_it", mutates_args=())
    def double_it(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def backward(ctx, g):
        raise ValueError("my backward is broken")

    double_it.register_autograd(backward)
    reports = gc.check(double_it, [(leaf(3),)])
    assert not reports[0]["passed"]
    assert any("my backward is broken" in f["detail"] for f in reports[0]["failures"])
    assert gc.check(torch.ops.aten.sin, [(leaf(3),)])[0]["passed"]


def test_a_raising_forward_is_a_report():
    def f(x):
        if x.shape[0] == 3:
            raise RuntimeError("forward refuses 3 elements")
        return x

    with pytest.raises(gc.GradcheckError, match="forward refuses 3 elements") as e:
        gc.gradcheck(f, (leaf(3),))
    assert isinstance(e.value.__cause__, RuntimeError)
    calls = []

    def raises_when_perturbed(x):
        calls.append(1)
        if len(calls) > 3:
            raise ArithmeticError("not at this point")
        return x * 2

    ok, report = gc.check_callable(gc.gradcheck, raises_when_perturbed, (leaf(3),))
    assert not ok and report["failures"][0]["check"] == "forward_error", report["failures"]
    assert "not at this point" in report["failures"][0]["detail"]


def test_input_subsets_catch_the_needs_input_grad_path_torch_misses():
    x, w = leaf(4), leaf(4, seed=1)
    assert torch.autograd.gradcheck(SkipsWhenAlone.apply, (x, w))  # torch never takes the path
    assert gc.gradcheck(SkipsWhenAlone.apply, (x, w), input_subsets="none")
    with pytest.raises(gc.GradcheckError,
                       match=r"the grad of input 0 \('x'\) differs when only 'x' requires grad"):
        gc.gradcheck(SkipsWhenAlone.apply, (x, w))
    ok, report = gc.check_callable(gc.gradcheck, Scale.apply, (x, w))
    assert ok and report["input_subsets"] == ["'x'", "'w'"], report["input_subsets"]
    assert report["subset_forward_calls"] == 2 and report["subset_vjp_calls"] == 3


def test_check_takes_keywords_and_fills_schema_defaults():
    @torch.library.custom_op("customop_callables::scaled", mutates_args=())
    def scaled(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
        return x * alpha

    scaled.register_autograd(lambda ctx, g: (g * ctx.alpha, None),
                             setup_context=lambda ctx, inputs, output:
                             setattr(ctx, "alpha", inputs[1]))
    x = leaf(3)
    reports = gc.check(scaled, [(x,), {"x": x, "alpha": 3.0}, gc.Sample(x, alpha=0.5)])
    assert [r["passed"] for r in reports] == [True, True, True]
    with pytest.raises(ValueError, match="missing a value for argument 'x'"):
        gc.check(scaled, [{"alpha": 1.0}])
    with pytest.raises(ValueError, match="no argument named 'beta'"):
        gc.check(scaled, [gc.Sample(x, beta=1.0)])


def test_gradgradcheck_catches_a_backward_that_is_not_differentiable():
    class DetachedBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos().detach()  # wrong second derivative, right first

    x = leaf(4)
    assert gc.gradcheck(DetachedBackward.apply, (x,))
    assert not gc.gradgradcheck(DetachedBackward.apply, (x,), raise_exception=False)


PLUGIN_SUITE = """
import torch
from torch.autograd import gradcheck

{skips_when_alone}

def leaf(n, dtype=torch.float64):
    return torch.randn(n, dtype=dtype).requires_grad_(True)

def test_correct():
    assert gradcheck(torch.sin, (leaf(5),))

def test_float32():
    assert torch.autograd.gradcheck(torch.exp, (leaf(5, torch.float32),), raise_exception=False)

def test_branch_bug():
    assert gradcheck(SkipsWhenAlone.apply, (leaf(4), leaf(4)))

def test_second_order():
    assert torch.autograd.gradgradcheck(torch.tanh, (leaf(3),))

def test_fixture(customop_gradcheck):
    customop_gradcheck(torch.tanh, (leaf(3),))
    customop_gradcheck.op(torch.ops.aten.sin, [(leaf(3),)])
"""


def test_pytest_plugin_routes_torch_gradcheck_and_lists_disagreements(tmp_path):
    source = PLUGIN_SUITE.format(skips_when_alone=textwrap.dedent(inspect.getsource(SkipsWhenAlone)))
    (tmp_path / "test_suite.py").write_text(source)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--customop-gradcheck", str(tmp_path / "test_suite.py")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    out = run.stdout + run.stderr
    assert "1 failed, 4 passed" in out, out
    assert "test_suite.py::test_branch_bug" in out and "differs when only 'x'" in out, out
    assert "4 gradcheck calls routed to customop" in out, out
    assert "2 verdicts differ from torch.autograd.gradcheck" in out, out
    assert "test_float32: gradcheck(exp): customop pass, torch fail" in out, out
    plain = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(tmp_path / "test_suite.py")],
                           capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert "1 failed, 4 passed" in plain.stdout, plain.stdout  # torch fails float32, passes the bug
    assert "test_float32" in plain.stdout and "customop gradcheck" not in plain.stdout


def test_functions_that_differentiate_inside_run_as_under_torch():
    def hvp(a):
        return torch.autograd.grad((a ** 3).sum(), a, create_graph=True)[0]

    assert gc.gradcheck(hvp, (leaf(3),))
    assert torch.autograd.gradcheck(hvp, (leaf(3),))


def test_the_users_tensors_are_never_modified():
    def doubles_in_place(a, b):
        b.mul_(2)
        return a * b

    x, y = leaf(3), torch.ones(3, dtype=torch.float64)
    gc.gradcheck(doubles_in_place, (x, y), raise_exception=False)
    assert torch.equal(y, torch.ones(3, dtype=torch.float64))


class ZeroGrad(torch.autograd.Function):
    """y = sin(x) with an all-zero backward: wrong everywhere."""

    @staticmethod
    def forward(ctx, x):
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g)


class WritesItsInput(torch.autograd.Function):
    """y = sin(x) saved, then x doubled in place: the backward sees cos(2 x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x.sin()
        x.mul_(2)
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


def test_a_write_into_an_input_requiring_grad_fails_naming_it():
    # Before, each perturbed call added to the last one's write: every Jacobian entry was
    # "unjudgeable", and even an all-zero backward passed with a warning.
    def bumps(x):
        with torch.no_grad():
            x.add_(1)
        return x.sin()

    def bumps_zero_grad(x):
        with torch.no_grad():
            x.add_(1)
        return ZeroGrad.apply(x)

    for func in (bumps, bumps_zero_grad, WritesItsInput.apply):
        for fast in (False, True):
            passed, report = gc.check_callable(gc.gradcheck, func, (leaf(4, 5),), fast_mode=fast)
            assert not passed, func
            assert [f["check"] for f in report["failures"]] == ["mutation"]
            assert "wrote into its input 'x'" in report["failures"][0]["headline"]
    with pytest.raises(GradcheckError, match=r"changed 'x' in place: \[0, 0\] was"):
        gc.gradcheck(bumps, (leaf(4, 5),))


def test_reordering_or_growing_a_list_argument_is_not_a_write():
    def appends(cache, x):
        cache.append(x.detach().sin())
        return x.sin()

    def reverses(xs):
        xs.reverse()
        return xs[0] * xs[1].exp()

    assert gc.gradcheck(appends, ([], leaf(3)))
    assert gc.gradcheck(reverses, ([leaf(3), leaf(3, seed=1)],))


def test_a_write_into_a_buffer_that_does_not_require_grad_passes():
    def with_running_mean(x, running):  # as batch norm's training mode updates its statistics
        running.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gc.gradcheck(with_running_mean, (leaf(4, 3), torch.zeros(3, dtype=torch.float64)))


class ScalesItsGrad(torch.autograd.Function):
    """y = sin(x); backward returns the right grad, computed in place in the grad it is given
    (the caller's grad_output: torch.autograd.grad(y, x, v) hands it v)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul_(x.cos())


def test_a_backward_that_writes_into_its_grad_output_fails_naming_it():
    # Before, the layout variants compared with the written grad and blamed a backward that
    # reads memory as if it were contiguous.
    for fast in (False, True):
        passed, report = gc.check_callable(gc.gradcheck, ScalesItsGrad.apply, (leaf(5),),
                                           fast_mode=fast)
        assert not passed
        (failure,) = report["failures"]
        assert failure["check"] == "mutation"
        assert "wrote into the grad_output of output 0" in failure["headline"]
        assert "contiguous" not in failure["detail"]
    assert gc.gradcheck(torch.sin, (leaf(5),))  # its twin

    class ScalesItsScalarGrad(torch.autograd.Function):  # a 0-d loss: the commonest output
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x * x).sum()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g.mul_(2) * x

    passed, report = gc.check_callable(gc.gradcheck, ScalesItsScalarGrad.apply, (leaf(5),))
    assert not passed
    # (also a reentrancy failure: the second backward scales the already scaled grad)
    assert any(f["check"] == "mutation" and "its value was" in f["detail"]
               for f in report["failures"]), report["failures"]


def test_a_function_whose_output_count_changes_after_the_first_call_fails():
    # Before, the outputs past the first call's count were dropped, never differentiated.
    calls = []

    def grows(x):
        calls.append(1)
        return x.sin() if len(calls) == 1 else (x.sin(), 5 * x.cos())

    passed, report = gc.check_callable(gc.gradcheck, grows, (leaf(4),))
    assert not passed
    assert "returned 2 tensor(s) on this call and 1 on the first" in str(report["failures"])


class UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("str fails")


@torch.library.custom_op("customop_test::raises_unprintable", mutates_args=())
def raises_unprintable(x: torch.Tensor) -> torch.Tensor:
    raise UnprintableError()


def test_an_error_whose_str_raises_is_still_a_report():
    def f(x):
        raise UnprintableError()

    assert gc.gradcheck(f, (leaf(3),), raise_exception=False) is False
    with pytest.raises(GradcheckError, match=r"UnprintableError: <its str\(\) raised "
                                             r"RuntimeError: str fails>"):
        gc.gradcheck(f, (leaf(3),))
    (report,) = gc.check(raises_unprintable, [(leaf(3),)])
    assert report["passed"] is False


def test_keyboard_interrupt_propagates_and_errors_chain_the_original():
    class Interrupted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gc.gradcheck(Interrupted.apply, (leaf(3),))
    with pytest.raises(gc.GradcheckError) as e:
        gc.gradcheck(RaisingBackward.apply, (leaf(3),))
    assert isinstance(e.value.__cause__, ValueError)
    assert str(e.value.__cause__) == "my backward is broken"


def test_bad_keywords_and_unjudgeable_dtypes_are_refused_by_name():
    x = leaf(3)
    for kw, exc, text in ((dict(eps=0), ValueError, "eps must be a finite number > 0"),
                          (dict(eps=float("nan")), ValueError, "eps must be"),
                          (dict(nondet_tol=-1), ValueError, "nondet_tol must be"),
                          (dict(backward_roundoff=-1e-9), ValueError,
                           "option 'backward_roundoff' must be a finite number >= 0"),
                          (dict(atol=float("inf")), ValueError, "atol must be"),
                          (dict(foo=1), TypeError, "unexpected keyword argument 'foo'")):
        with pytest.raises(exc, match=text):
            gc.gradcheck(torch.sin, (x,), **kw)
    assert gc.gradcheck(torch.sin, (x,), check_batched_grad=None, check_backward_ad=1)
    with pytest.raises(NotImplementedError, match="complex128 requires grad"):
        gc.gradcheck(torch.sin, (torch.randn(3, dtype=torch.complex128, requires_grad=True),))
    # bfloat16 inputs: the low-precision rule (torch.sin in bfloat16 against its float64 run).
    assert gc.gradcheck(torch.sin, (leaf(3, dtype=torch.bfloat16),))
    with pytest.raises(NotImplementedError, match="low-precision outputs of higher-precision"):
        gc.gradcheck(lambda a: a.to(torch.bfloat16), (x,))
    with pytest.raises(NotImplementedError, match="an output of dtype torch.complex128"):
        gc.gradcheck(lambda a: a * (1 + 1j), (x,))
    with pytest.raises(ValueError, match="returned no tensor that requires grad"):
        gc.gradgradcheck(lambda a: None, (x,))


def test_entries_the_differences_cannot_judge_warn_and_a_quantized_step_is_refused():
    # float64 differences of an output rounded to float32: 6e-8 |f| / 1e-6 of noise per entry
    with pytest.warns(gc.UnreliableDifferencesWarning, match="may pass"):
        assert gc.gradcheck(lambda a: (a * 3).float(), (leaf(3),))
    huge = (torch.randn(3, dtype=torch.float64) * 1e10).requires_grad_()
    with pytest.raises(ValueError, match=r"eps = 1e-06 is too small for input 0 \('a'\)"):
        gc.gradcheck(lambda a: a * 3, (huge,))
    assert gc.gradcheck(lambda a: a * 3, (huge,), eps=1e-2)


def test_check_samples_name_self_and_refuse_a_missing_list():
    a, b = leaf(2, 3), leaf(2, 3, seed=1)
    assert gc.check("aten::add.Tensor", [gc.Sample(self=a, other=b)])[0]["passed"]
    with pytest.raises(TypeError, match="is the list around a single sample missing"):
        gc.check("aten::add.Tensor", (a, b))
    with pytest.raises(ValueError, match="argument 'min': a non-finite float"):
        gc.check("aten::clamp", [(a, float("-inf"), 0.5)])
    # A float for an int argument is refused by name, never truncated (2.5 -> 2).
    with pytest.raises(ValueError, match=r"argument 'dim': expected a value of type int, got 1.5"):
        gc.check("aten::cumsum", [(a, 1.5)])
    with pytest.raises(ValueError, match=r"argument 'dim': expected a value of type int\[\]\?, got \[0.5\]"):
        gc.check("aten::sum.dim_IntList", [(a, [0.5])])
    assert gc.check("aten::cumsum", [(a, 1)])[0]["passed"]


def test_check_refuses_meta_samples_by_name_and_runs_under_inference_mode():
    a, b = leaf(2, 3), leaf(2, 3, seed=1)
    with pytest.raises(ValueError, match=r"sample 0, argument 'other' is a meta tensor"):
        gc.check("aten::add.Tensor", [(a, b.detach().to("meta"))])
    # Under inference_mode no graph is recorded: check() turns it off for the run and works on
    # normal copies of inference tensors, and the verdict is the same as outside it.
    with torch.inference_mode():
        x = torch.randn(2, 3, dtype=torch.float64)
        y = torch.randn(2, 3, dtype=torch.float64)
        reports = gc.check("aten::mul.Tensor", [(x.requires_grad_(), y.requires_grad_())])
        assert torch.is_inference_mode_enabled()
    assert reports[0]["passed"], gc.format_failure(reports[0])
    assert x.is_inference() and x.grad is None


def test_a_check_run_in_python_leaves_one_note_not_the_cpp_sides_off_note():
    # check_transforms runs in Python; the C++ harness, which gets it turned off, must not add
    # "transforms: not checked (check_transforms off)" next to the Python result.
    a = leaf(2, 3)
    report = gc.check("aten::sin", [(a,)], check_compiled=False)[0]
    transforms = [n for n in report["notes"] if n.startswith("transforms:")]
    assert len(transforms) == 1 and "check_transforms off" not in transforms[0], transforms
    # Turned off by the caller, the note says so.
    off = gc.check("aten::sin", [(a,)], check_compiled=False, check_transforms=False)[0]
    assert "transforms: not checked (check_transforms off)" in off["notes"]


def test_gradcheck_names_the_line_a_forward_error_was_raised_at():
    def broken(x):
        raise KeyError("plain function broken")

    with pytest.raises(gc.GradcheckError) as e:
        gc.gradcheck(broken, (leaf(3),))
    text = str(e.value)
    assert "KeyError: 'plain function broken'" in text, text
    line = inspect.getsourcelines(broken)[1] + 1
    assert f"raised at {__file__}:{line} in broken" in text, text


def test_a_cast_that_makes_a_sample_infinite_is_refused_not_blamed_on_the_backward():
    # 1e6 is inf in float16: every check would then report NaN grads against the backward.
    x = leaf(4)
    c = torch.tensor([1.0, 1e3, 1e6, 2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"sample 0, argument 'other' element \[2\] = 1e\+06 is "
                                         r"outside torch.float16's range \(largest finite "
                                         r"value 65504\)"):
        gc.check("aten::mul.Tensor", [(x, c)], dtype=torch.float16)
    # bfloat16 holds it: the same sample is checked.
    assert gc.check("aten::mul.Tensor", [(x, c)], dtype=torch.bfloat16,
                    check_compiled=False)[0]["passed"]
    # A stride-0 input is refused in every dtype, as in float64 (the cast would copy it).
    expanded = torch.rand(4, dtype=torch.float64).expand(3, 4).requires_grad_()
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        with pytest.raises(ValueError, match="has a dimension with stride 0"):
            gc.check("aten::sin", [(expanded,)], dtype=dtype)


def test_a_tensor_list_output_is_named_one_way_in_a_report():
    @torch.library.custom_op("customop_callables::sin_and_twice_cos", mutates_args=())
    def f(x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.sin(x), torch.cos(x) * 2]

    f.register_fake(lambda x: [torch.empty_like(x), torch.empty_like(x)])

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, gs):
        (x,) = ctx.saved_tensors
        return gs[0] * torch.cos(x) - gs[1] * torch.sin(x)  # drops the 2 of the second output

    f.register_autograd(backward, setup_context=setup)
    report = gc.check(f, [(leaf(4),)], check_compiled=False)[0]
    jac = [fl for fl in report["failures"] if fl["check"] == "jacobian"]
    assert jac, report["failures"]
    assert jac[0]["headline"].startswith("Jacobian mismatch for output 0[1] with respect to"), jac
    assert "d output 0[1][" in jac[0]["detail"], jac[0]["detail"]


def test_gradgradcheck_does_not_warn_for_a_block_that_is_exactly_zero():
    # d(grad_w)/dw of sin(x) * w is exactly zero: no entry there is judged loosely.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gc.UnreliableDifferencesWarning)
        assert gc.gradgradcheck(lambda a, b: torch.sin(a) * b, (leaf(4), leaf(4, seed=1)))
    # A block that is not exactly zero but below the differences' noise still warns.
    with pytest.warns(gc.UnreliableDifferencesWarning, match="may pass"):
        assert gc.gradcheck(lambda a: (a * 3).float(), (leaf(3),))


def test_nan_is_written_nan_whatever_its_sign_bit():
    # 0 * inf is x86's default NaN, whose sign bit is set: printf writes it "-nan".
    class NanGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * (torch.zeros_like(g) * float("inf"))

    nan_out = (lambda x: x * (torch.zeros_like(x) * float("inf")))
    for fn in (NanGrad.apply, nan_out):
        for fast in (False, True):
            ok, report = gc.check_callable(gc.gradcheck, fn, (leaf(3),), fast_mode=fast)
            assert not ok
            text = gc.format_failure(report)
            assert " nan" in text and "-nan" not in text, text


def test_a_nan_forward_output_is_reported_as_such_not_as_a_jacobian_mismatch():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    ok, report = gc.check_callable(gc.gradcheck, torch.sqrt, (x,))
    assert not ok
    assert report["failures"][0]["check"] == "forward_error", report["failures"]
    failure = report["failures"][0]
    assert failure["headline"] == "the function returned a non-finite value", failure
    assert "output 0[1] is nan at the sample point (1 of 3 elements not finite)" in \
        failure["detail"], failure["detail"]
    # Inside the domain the same function passes.
    assert gc.gradcheck(torch.sqrt, (x.detach().abs().requires_grad_(),))


def test_a_forward_error_after_the_first_call_is_written_as_the_first_calls():
    # The first call runs in Python; the later ones run from the C++ harness, whose pybind11
    # traceback line ("f.py(20): fn") is rewritten as the Python side writes it.
    calls = [0]

    def fails_later(x):
        calls[0] += 1
        if calls[0] > 2:
            raise RuntimeError("fails on its third call")
        return x * 3

    with pytest.raises(gc.GradcheckError) as e:
        gc.gradcheck(fails_later, (leaf(3),))
    line = inspect.getsourcelines(fails_later)[1] + 3
    expected = f"RuntimeError: fails on its third call (raised at {__file__}:{line} in fails_later)"
    assert expected in str(e.value), str(e.value)


def test_a_forward_error_through_torch_ops_names_the_callers_line():
    def calls_an_op(x):
        return torch.ops.aten.mul.Tensor(x, torch.ones(4, dtype=x.dtype))  # 3 vs 4 elements

    with pytest.raises(gc.GradcheckError) as e:
        gc.gradcheck(calls_an_op, (leaf(3),))
    line = inspect.getsourcelines(calls_an_op)[1] + 1
    assert f"raised at {__file__}:{line} in calls_an_op" in str(e.value), str(e.value)


def test_a_cast_that_hides_overlapping_memory_is_refused():
    x = torch.rand(8, dtype=torch.float64).as_strided((2, 2), (1, 1)).requires_grad_()
    for dtype in (None, torch.float32):  # float64 as given (the C++ check), and cast
        with pytest.raises(ValueError, match=r"'self'\)? has overlapping memory"):
            gc.check("aten::sin", [(x,)], dtype=dtype)


def test_gradcheck_names_a_nested_output_as_check_does():
    # (Tensor, [Tensor, Tensor]): the third tensor is output 1[1], not output 2.
    def f(x):
        return torch.sin(x), [torch.cos(x), Scale.apply(x, x)]

    Scale.factor = 1.5
    try:
        ok, report = gc.check_callable(gc.gradcheck, f, (leaf(3),))
    finally:
        Scale.factor = 1.0
    assert not ok
    jac = [fl for fl in report["failures"] if fl["check"] == "jacobian"]
    assert jac and jac[0]["headline"].startswith("Jacobian mismatch for output 1[1] with"), jac
    assert "d output 1[1][" in jac[0]["detail"], jac[0]["detail"]


def test_a_sample_that_is_already_infinite_is_said_so_in_low_precision_too():
    x = torch.tensor([1.0, float("inf")], dtype=torch.float64, requires_grad=True)
    report = gc.check("aten::square", [(x,)], dtype=torch.float16, check_compiled=False)[0]
    assert not report["passed"]
    heads = [f["headline"] for f in report["failures"]]
    assert "float64 run: the function returned a non-finite value" in heads, heads
    low = [f for f in report["failures"] if f["check"] == "low_precision"]
    assert low and "float64 run returned a non-finite value" in low[0]["headline"], heads
    assert "does not run in float64" not in low[0]["headline"], heads


def test_backward_roundoff_declares_an_approximate_float64_backward():
    # sin with a backward good to ~2e-9 relative (as a series approximation is: ATen's
    # trigamma, digamma's backward, ~5e-10): the float64 precision probe fails it and names the
    # option; declared, it passes.
    class ApproxSin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos() * (1 + 2e-9)

    x = leaf(6)
    with pytest.raises(gc.GradcheckError, match="backward_roundoff"):
        gc.gradcheck(ApproxSin.apply, (x,))
    assert gc.gradcheck(ApproxSin.apply, (x,), backward_roundoff=1e-8)
