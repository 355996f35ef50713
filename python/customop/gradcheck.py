"""customop's gradcheck from Python.

Two entry points, the same C++ checks behind both (Jacobian by central finite differences
against the backward's VJPs with tolerances from error estimates, fast mode's projections,
reentrancy, undefined grads, grad_output scaling, grad metadata, forward in grad mode, layout
variants, input subsets; second order on request):

- `gradcheck(func, inputs)` / `gradgradcheck(func, inputs)`: torch.autograd.gradcheck's
  signature and meaning, for any callable (a function of ATen ops, an autograd.Function's
  apply, a torch.library.custom_op, a module's forward). Replacing torch.autograd.gradcheck
  with it in a test suite is a one-line change.

      from customop.gradcheck import gradcheck
      assert gradcheck(MyFunction.apply, (torch.randn(5, dtype=torch.float64, requires_grad=True),))

- `check(op, samples)`: any dispatcher op (customop's, a TORCH_LIBRARY op, a
  torch.library.custom_op) on samples given positionally or by keyword; returns one report per
  sample (the JSON objects the CLI writes with --json, see customop/gradcheck/report.h).

      report = check(torch.ops.mylib.cube, [(torch.randn(5, dtype=torch.float64),)])
      assert report[0]["passed"], format_failure(report[0])

An error the checked function raises (forward, backward) is a failed check in the report with
its original message and where it was raised, never an exception escaping the check.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.autograd.gradcheck import GradcheckError

from . import _callable
from ._torch_check import load_library

__all__ = ["GradcheckError", "Sample", "assert_gradcheck", "check", "format_failure", "gradcheck",
           "gradgradcheck"]

_LIBRARY = pathlib.Path(__file__).resolve().parent / "lib" / "libcustomop_gradcheck_ops.so"
_loaded = False


def _op_name(op) -> str:
    """'ns::name' or 'ns::name.overload' for an OpOverload, an OpOverloadPacket (its default
    overload), a torch.library.custom_op object, or a string."""
    if isinstance(op, str):
        return op
    if hasattr(op, "_opoverload"):  # torch.library.custom_op
        op = op._opoverload
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if isinstance(op, torch._ops.OpOverload):
        name = op._schema.name
        return name if op._overloadname == "default" else f"{name}.{op._overloadname}"
    raise TypeError(f"customop.gradcheck.check: expected an op (torch.ops.ns.name, an overload, "
                    f"a torch.library.custom_op) or 'ns::name', got {type(op).__name__}")


def _encode(value, tensors: list):
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return {"tensors": [_encode(v, tensors)["tensor"] for v in value]}
    if isinstance(value, tuple):
        return list(value)
    return value


class Sample:
    """One sample for check(): positional and keyword arguments, as the op is called.

        Sample(x, weight, eps=1e-5)   # == op(x, weight, eps=1e-5); the rest from defaults
    """

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        load_library(_LIBRARY)
        _loaded = True


def _schema_of(name: str):
    qualified, _, overload = name.partition(".")
    namespace, _, opname = qualified.partition("::")
    packet = getattr(getattr(torch.ops, namespace), opname)
    return getattr(packet, overload or "default")._schema


def _bind(name: str, sample) -> list:
    """One value per schema argument: positional values, then keyword ones, then the schema's
    defaults. Raises ValueError naming the op and the argument that has none, or a keyword the
    schema lacks."""
    if isinstance(sample, Sample):
        args, kwargs = list(sample.args), dict(sample.kwargs)
    elif isinstance(sample, Mapping):
        args, kwargs = [], dict(sample)
    else:
        args, kwargs = list(sample), {}
    try:
        schema = _schema_of(name)
    except (AttributeError, RuntimeError):
        if kwargs:
            raise ValueError(f"customop.gradcheck.check({name}): keyword arguments need the op's "
                             f"schema, and no op '{name}' is registered") from None
        return args  # the C++ side names the missing op
    params = schema.arguments
    if len(args) > len(params):
        raise ValueError(f"customop.gradcheck.check({name}): expected at most {len(params)} "
                         f"arguments ({schema}), got {len(args)} positional ones")
    known = {p.name for p in params}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"customop.gradcheck.check({name}): no argument named "
                         f"{', '.join(repr(u) for u in unknown)} in {schema}")
    bound = []
    for k, p in enumerate(params):
        if k < len(args):
            if p.name in kwargs:
                raise ValueError(f"customop.gradcheck.check({name}): argument '{p.name}' given "
                                 f"both by position and by keyword")
            bound.append(args[k])
        elif p.name in kwargs:
            bound.append(kwargs[p.name])
        elif p.has_default_value():
            bound.append(p.default_value)
        else:
            raise ValueError(f"customop.gradcheck.check({name}): missing a value for argument "
                             f"'{p.name}' ({schema})")
    return bound


def _run(name: str, args: list, options: dict) -> dict:
    tensors: list = []
    encoded = [_encode(v, tensors) for v in args]
    text = torch.ops.customop_gradcheck.check(name, tensors, json.dumps(encoded),
                                              json.dumps(options))
    return json.loads(text)


def check(op, samples: Sequence[Any], **options) -> list[dict]:
    """Gradchecks `op` on each sample and returns one report (a dict, as the CLI's JSON) per
    sample, in order; report["passed"] is the verdict. Never raises for a failed check, nor for
    an error the op raises (forward or backward): that is a failed check ("forward_error",
    "backward_error") with the op's message.

    - op: torch.ops.ns.name (its default overload), an OpOverload, a torch.library.custom_op,
      or "ns::name[.overload]".
    - samples: each a tuple of positional arguments, a dict of keyword arguments, or a
      Sample(*args, **kwargs); arguments not given take the schema's defaults. As in
      torch.autograd.gradcheck, the tensors that require grad (also inside lists) are the
      differentiable inputs; their dtype and device are the run's (float64 for tight
      tolerances).
    - options: GradcheckOptions fields, e.g. mode="fast", eps=1e-6, atol=1e-5, rtol=1e-3,
      seed=0, check_second_order=True, check_fake_kernel=False, input_subsets="singles",
      label="my case".
    Raises ValueError naming the op and the argument when a sample does not fit the schema or an
    option is unknown.
    """
    _ensure_loaded()
    name = _op_name(op)
    reports = []
    for i, sample in enumerate(samples):
        opts = dict(options)
        opts.setdefault("label", f"sample {i}")
        reports.append(_run(name, _bind(name, sample), opts))
    return reports


# torch.autograd.gradcheck's keywords that this harness has no check for: refused when set to
# anything but their default (a check silently skipped would be a false pass).
_REFUSED = {
    "check_batched_grad": (False, "vmap over the backward (torch's batched-grad check); run "
                                  "torch.autograd.gradcheck(..., check_batched_grad=True) for it"),
    "check_batched_forward_grad": (False, "forward-mode AD under vmap"),
    "check_forward_ad": (False, "forward-mode AD (jvp)"),
    "masked": (None, "sparse inputs"),
}


def _options(caller: str, eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode,
             extra: dict) -> dict:
    for key, value in list(extra.items()):
        if key in _REFUSED:
            default, what = _REFUSED[key]
            if value not in (default, False):
                raise NotImplementedError(f"customop.gradcheck.{caller}: {key}={value!r} is not "
                                          f"supported: this harness does not check {what}")
            del extra[key]
    extra.pop("check_grad_dtypes", None)  # always checked here (grad metadata)
    if extra.pop("check_backward_ad", True) is not True:
        raise NotImplementedError(f"customop.gradcheck.{caller}: check_backward_ad=False leaves "
                                  f"nothing this harness checks (it checks backward-mode AD)")
    opts = {"eps": eps, "nondet_tol": nondet_tol, "check_undefined_grad": check_undefined_grad,
            "mode": "fast" if fast_mode else "slow"}
    if atol is not None:
        opts["atol"] = atol
    if rtol is not None:
        opts["rtol"] = rtol
    opts.update(extra)
    return opts


def _forward_error_report(name: str, error: BaseException) -> dict:
    where = f"{type(error).__name__}: {error}"
    return {"op": name, "label": "", "passed": False, "failures": [{
        "check": "forward_error", "second_order": False, "output": -1, "input": -1,
        "headline": "the function raised an error",
        "detail": f"  {name} raised: {where}"}]}


def _verdict(report: dict, raise_exception: bool, cause: BaseException | None = None) -> bool:
    if report["passed"]:
        return True
    if raise_exception:
        raise GradcheckError(format_failure(report)) from cause
    return False


def gradcheck(func: Callable, inputs, *, eps: float = 1e-6, atol: float | None = None,
              rtol: float | None = None, raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, fast_mode: bool = False, **options) -> bool:
    """torch.autograd.gradcheck for any callable, judged by customop's checks.

    - func: a callable taking `inputs` positionally and returning a tensor or a (nested)
      sequence of tensors; non-tensor outputs are ignored, as torch does.
    - inputs: a tensor, or a sequence of inputs: tensors (any shape; float64 for the tightest
      verdict, float32 judged against a float64 run of func), nested sequences of tensors, or
      other values passed through. The floating tensors that require grad are differentiated.
    - eps: central-difference step (input units), torch's default 1e-6.
    - atol, rtol: None (default) judges each Jacobian entry by error estimates (options.h,
      Tolerances); a number switches to torch's fixed rule |a - n| <= atol + rtol |n|.
    - raise_exception: on failure raise torch.autograd.gradcheck.GradcheckError (a
      RuntimeError, as torch) with the report: check, output, input (by the callable's
      parameter name, "xs[1]" inside a sequence), worst element, numerical vs analytical;
      else return False.
    - nondet_tol, check_undefined_grad, fast_mode: as torch (fast mode: customop's random
      projections, whose guarantee is stated in options.h).
    - check_grad_dtypes: accepted; grad dtype, device and shape are always checked here.
    - check_batched_grad, check_batched_forward_grad, check_forward_ad (True), masked (True),
      check_backward_ad (False): NotImplementedError naming the keyword (no such check here).
    - options: customop's own, e.g. seed=0, input_subsets="singles", check_layout_variants=False,
      low_precision (see check()).
    Returns True when every check passed. An error func raises (forward or backward) is a
    failed check with its message, raised as GradcheckError (from the original error where
    Python still has it) or returned as False. Raises ValueError when no tensor input requires
    grad, or an input that does is complex or overlaps in memory.
    Example:
        gradcheck(torch.sin, (torch.randn(4, dtype=torch.float64, requires_grad=True),))
    """
    top_names = options.pop("_top_names", None)  # gradgradcheck's names for its function
    want_report = options.pop("_want_report", False)  # _check_callable's (verdict, report)
    opts = _options("gradcheck", eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode,
                    options)
    _ensure_loaded()
    inputs = _callable.as_tuple(inputs)
    name = _callable.function_name(func)
    cause = None
    try:
        with torch.no_grad():
            probe = _callable.tensor_leaves(func(*inputs))
    except Exception as e:  # noqa: BLE001 -- the function's own error is the report
        report, cause = _forward_error_report(name, e), e
    else:
        if not probe:
            raise ValueError(f"customop.gradcheck.gradcheck({name}): the function returned no "
                             f"tensor")
        with _callable.callable_op(func, inputs, len(probe), top_names) as op:
            opts.setdefault("name", name)
            opts["arg_names"] = op.arg_names
            if len(probe) > 1:
                opts["return_names"] = [f"output {k}" for k in range(len(probe))]
            report = _run(op.name, list(op.tensors), opts)
    if want_report:
        return report["passed"], report
    return _verdict(report, raise_exception, cause)


def _check_callable(entry: Callable, func: Callable, inputs, *args, **kwargs) -> tuple[bool, dict]:
    """`entry` (gradcheck or gradgradcheck) with its verdict and report, raising nothing for a
    failed check: for the pytest plugin."""
    kwargs.pop("raise_exception", None)
    return entry(func, inputs, *args, raise_exception=False, _want_report=True, **kwargs)


def gradgradcheck(func: Callable, inputs, grad_outputs=None, *, eps: float = 1e-6,
                  atol: float | None = None, rtol: float | None = None,
                  gen_non_contig_grad_outputs: bool = False, raise_exception: bool = True,
                  nondet_tol: float = 0.0, check_undefined_grad: bool = True,
                  check_rev_over_rev: bool = True, check_fwd_over_rev: bool = False,
                  fast_mode: bool = False, seed: int = 0, **options) -> bool:
    """torch.autograd.gradgradcheck for any callable: gradcheck of
    (inputs, grad_outputs) -> the grads of func's differentiable outputs with create_graph
    (reverse over reverse).

    - grad_outputs: one tensor per differentiable output of func; default: uniform in [-1, 1]
      (seeded by `seed`, a private generator), requiring grad, as torch does.
    - gen_non_contig_grad_outputs: accepted; every input and grad_output is checked in
      non-contiguous layouts anyway (layout variants).
    - check_fwd_over_rev=True: NotImplementedError (no forward-mode AD here);
      check_rev_over_rev=False: NotImplementedError (nothing left to check).
    - everything else: as gradcheck().
    Returns, raises: as gradcheck(); failures name "grad of x" and "grad_output k".
    """
    if check_fwd_over_rev:
        raise NotImplementedError("customop.gradcheck.gradgradcheck: check_fwd_over_rev=True is "
                                  "not supported: this harness does not check forward-mode AD")
    if not check_rev_over_rev:
        raise NotImplementedError("customop.gradcheck.gradgradcheck: check_rev_over_rev=False "
                                  "leaves nothing this harness checks")
    del gen_non_contig_grad_outputs
    inputs = _callable.as_tuple(inputs)
    count = len(inputs)
    flat_in, _ = pytree.tree_flatten(inputs)
    diff_pos = [k for k, v in enumerate(flat_in) if isinstance(v, torch.Tensor) and v.requires_grad]
    with torch.enable_grad():
        outs = [o for o in _callable.tensor_leaves(func(*inputs)) if o.requires_grad]
    if grad_outputs is None:
        gen = torch.Generator().manual_seed(seed)
        grad_outputs = tuple(
            (torch.rand(o.shape, generator=gen, dtype=torch.float64) * 2 - 1)
            .to(o.dtype).to(o.device).requires_grad_(True) for o in outs)
    grad_outputs = _callable.as_tuple(grad_outputs)

    def first_order(*args):
        flat, spec = pytree.tree_flatten(args[:count])
        with torch.enable_grad():
            for k in diff_pos:  # the harness's perturbed copies come without grad
                if not flat[k].requires_grad:
                    flat[k] = flat[k].detach().requires_grad_(True)
            ys = [o for o in _callable.tensor_leaves(func(*pytree.tree_unflatten(flat, spec)))
                  if o.requires_grad]
            leaves = [flat[k] for k in diff_pos]
            grads = torch.autograd.grad(ys, leaves, args[count:count + len(ys)],
                                        create_graph=True, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads))

    first_order.__qualname__ = f"grads of {_callable.function_name(func)}"
    names = _callable.parameter_names(func, count) + \
        [f"grad_output {k}" for k in range(len(grad_outputs))]
    return gradcheck(first_order, inputs + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad, fast_mode=fast_mode, seed=seed,
                     _top_names=names, **options)


def format_failure(report: dict) -> str:
    """The failures of one report as text: each failure's headline and detail (which output,
    which named argument, which element, numerical vs analytical)."""
    if report.get("passed"):
        return "gradcheck passed"
    label = f" ({report['label']})" if report.get("label") else ""
    lines = [f"gradcheck of {report.get('op')} failed{label}:"]
    for f in report.get("failures", []):
        lines.append(f.get("headline", ""))
        if f.get("detail"):
            lines.append(f["detail"])
    return "\n".join(lines)


def assert_gradcheck(op, samples: Sequence[Sequence[Any]], **options) -> None:
    """check(), raising AssertionError with format_failure's text for the first failed sample:
    for pytest."""
    for report in check(op, samples, **options):
        if not report["passed"]:
            raise AssertionError(format_failure(report))
