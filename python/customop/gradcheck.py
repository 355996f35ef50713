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

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError

from ._dropin import UnreliableDifferencesWarning, check_callable, gradcheck, gradgradcheck
from ._harness import checked_options, ensure_loaded, format_failure, run
from ._op_names import op_name as _op_name
from ._py_checks import add_results, pop_options
from ._sharding_check import check_sharding, format_sharding_failure

__all__ = ["GradcheckError", "Sample", "UnreliableDifferencesWarning", "assert_gradcheck",
           "check", "check_callable", "check_sharding", "format_failure",
           "format_sharding_failure", "gradcheck", "gradgradcheck"]


class Sample:
    """One sample for check(): positional and keyword arguments, as the op is called.

        Sample(x, weight, eps=1e-5)   # == op(x, weight, eps=1e-5); the rest from defaults
        Sample(self=x, other=y)       # ATen's first argument is often named self
    """

    def __init__(*args, **kwargs):
        sample, *rest = args  # positional-only, so that a keyword argument may be named self
        sample.args = tuple(rest)
        sample.kwargs = kwargs


def _overload_of(name: str):
    qualified, _, overload = name.partition(".")
    namespace, _, opname = qualified.partition("::")
    packet = getattr(getattr(torch.ops, namespace), opname)
    return getattr(packet, overload or "default")


def _schema_of(name: str):
    return _overload_of(name)._schema


def _split(name: str, sample):
    if isinstance(sample, Sample):
        return list(sample.args), dict(sample.kwargs)
    if isinstance(sample, Mapping):
        return [], dict(sample)
    if isinstance(sample, (tuple, list)):
        return list(sample), {}
    raise TypeError(f"customop.gradcheck.check({name}): each sample is a tuple of positional "
                    f"arguments, a dict of keyword arguments or a Sample, got a "
                    f"{type(sample).__name__} (is the list around a single sample missing?)")


def _bind(name: str, sample) -> tuple[list, list[str] | None]:
    """One value per schema argument (positional values, then keyword ones, then the schema's
    defaults) and the arguments' names. Raises ValueError naming the op and the argument that
    has none, or a keyword the schema lacks."""
    args, kwargs = _split(name, sample)
    try:
        schema = _schema_of(name)
    except (AttributeError, RuntimeError):
        if kwargs:
            raise ValueError(f"customop.gradcheck.check({name}): keyword arguments need the op's "
                             f"schema, and no op '{name}' is registered") from None
        return args, None  # the C++ side names the missing op
    params = schema.arguments
    # NB: a schema's keyword-only arguments (after its "*") all follow the positional ones.
    positional = sum(1 for p in params if not p.kwarg_only)
    if len(args) > positional:
        keyword_only = [p.name for p in params if p.kwarg_only]
        hint = (f"; {', '.join(repr(k) for k in keyword_only)} "
                f"{'is' if len(keyword_only) == 1 else 'are'} keyword-only: pass "
                f"{'it' if len(keyword_only) == 1 else 'them'} by name" if keyword_only else "")
        raise ValueError(f"customop.gradcheck.check({name}): expected at most {positional} "
                         f"positional arguments ({schema}), got {len(args)}{hint}")
    unknown = sorted(set(kwargs) - {p.name for p in params})
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
    return bound, [p.name for p in params]


_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _cast(value, dtype):
    """Floating tensors (also in lists) cast to dtype, requires_grad kept; the rest as is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _overlaps_itself(t: torch.Tensor) -> bool:
    """True when two elements of `t` share memory (as_strided((2, 2), (1, 1)) does; an
    expanded dim does; torch's own overlap test answers "too hard" for the first)."""
    status = torch._debug_has_internal_overlap(t)  # 0 no, 1 yes, 2 too hard to tell
    if status != 2 or t.numel() == 0:
        return status == 1
    span = t.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    where = torch.arange(span).as_strided(t.shape, t.stride(), t.storage_offset())
    return where.unique().numel() < t.numel()


def _cast_sample(name: str, i: int, args: list, names, dtype) -> list:
    """The sample's floating tensors cast to dtype (_cast). ValueError naming the op, sample,
    argument and element where the cast would change what is checked: a finite value that is
    not finite in dtype (1e6 in float16: inf, then every check blames the backward), and an
    input that requires grad with a stride-0 dimension or overlapping memory (the cast copies it
    into one of its own per element, so the layout the float64 run refuses would go
    unchecked)."""
    def arg_name(k: int, element: int | None) -> str:
        base = names[k] if names is not None and k < len(names) else f"argument {k}"
        return base if element is None else f"{base}[{element}]"

    def refuse(t: torch.Tensor, where: str) -> None:
        if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            return
        if t.requires_grad and any(st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape)):
            raise ValueError(
                f"customop.gradcheck.check({name}): sample {i}, argument '{where}' has a dimension with stride 0 (sizes "
                f"{list(t.shape)}, strides {list(t.stride())}, e.g. from expand()); gradcheck "
                f"perturbs one element at a time and needs inputs whose elements do not share "
                f"memory: pass {where}.contiguous() (or .clone()) instead")
        if t.requires_grad and _overlaps_itself(t):
            raise ValueError(
                f"customop.gradcheck.check({name}): sample {i}, argument '{where}' has "
                f"overlapping memory (sizes {list(t.shape)}, strides {list(t.stride())}); pass "
                f"{where}.contiguous() instead")
        if t.device.type == "meta" or t.numel() == 0:
            return
        cast = t.detach().to(dtype)
        lost = torch.isfinite(t.detach()) & ~torch.isfinite(cast)
        if bool(lost.any()):
            index = [int(v) for v in torch.nonzero(lost)[0]]
            value = float(t.detach()[tuple(index)])
            raise ValueError(
                f"customop.gradcheck.check({name}): sample {i}, argument '{where}' element {index} = {value:g} is outside "
                f"{dtype}'s range (largest finite value {torch.finfo(dtype).max:g}): the cast "
                f"for dtype={dtype} would make it infinite; choose sample values inside the "
                f"dtype's range")

    for k, a in enumerate(args):
        if isinstance(a, (list, tuple)):
            for e, t in enumerate(a):
                refuse(t, arg_name(k, e))
        else:
            refuse(a, arg_name(k, None))
    return [_cast(a, dtype) for a in args]


def check(op, samples: Sequence[Any], **options) -> list[dict]:
    """Gradchecks `op` on each sample and returns one report (a dict, as the CLI's JSON) per
    sample, in order; report["passed"] is the verdict. Never raises for a failed check, nor for
    an error the op raises (forward or backward): that is a failed check ("forward_error",
    "backward_error") with the op's message (KeyboardInterrupt and SystemExit propagate).

    - op: torch.ops.ns.name (its default overload), an OpOverload, a torch.library.custom_op,
      one of customop's op functions (customop.rms_norm: torch.ops.customop.rms_norm), or
      "ns::name[.overload]".
    - samples: a list; each sample a tuple of positional arguments, a dict of keyword
      arguments, or a Sample(*args, **kwargs); arguments not given take the schema's defaults.
      As in torch.autograd.gradcheck, the tensors that require grad (also inside lists) are the
      differentiable inputs; their dtype and device are the run's (float64 for tight
      tolerances). Values: tensors, lists of tensors, None, bool, int, finite float, str.
    - options: GradcheckOptions fields, e.g. mode="fast", eps=1e-6, atol=1e-5, rtol=1e-3,
      seed=0, check_second_order=True, check_fake_kernel=False, check_mutation=False,
      check_out_variant=False, input_subsets="singles",
      label="my case"; and
      - check_shape_lock=False: skip the shape-lock check (on by default; Python only). It
        runs the op's fake kernel once with every input dim of size >= 2 symbolic and fails
        the report ("shape_lock") when the kernel fixed one of them to its sample value, naming
        the argument, the dim and the guard; report["shape_lock"] holds what it saw
        (customop/_shape_lock.py);
      - check_compiled=False: skip the eager-vs-compiled check (on by default; Python only;
        not for built-in ATen ops). It runs the op on clones of the sample eagerly and under
        torch.compile(fullgraph=True) with Inductor's out= lowering active for the op, and
        fails the report ("compiled") when an output or a written argument differs, naming
        it and the greatest difference; report["compiled"] holds what it saw
        (customop/_compiled_check.py). Its cost, measured on a 2-core CPU machine: 24-34 s the
        first time in a process (Inductor's start-up), then 0.1-0.4 s per sample;
      - check_transforms=False: skip the torch.func check (on by default; Python only): vjp,
        jvp, jacrev vs jacfwd, hessian both ways, vmap over each differentiable input and
        all of them (dims 0 and -1) and vmap(vjp)/vmap(jvp), against references without the
        transform, with torch's vmap fallback off; fails the report ("transforms") naming the
        transform and the first difference (customop/_transforms_check.py);
      - dtype=torch.bfloat16 (or float16, float32, float64): every floating tensor of each
        sample is cast to it first (requires_grad kept). float16/bfloat16 are judged by the
        low-precision rule (a precise float64 run on the same rounded values; README
        "Low precision"), each report's "low_precision" list holds its comparisons;
      - reference="ns::name": an op with the same arguments and returns whose float64 run is
        that precise run (a customop op's declared op.reference is used without it);
      - sharding=True: also checks the op's declared DTensor sharding rule on each sample (in
        float64) on a 2-rank mesh (check_sharding); each report gets a "sharding" entry, and a
        wrong rule fails the report with a "sharding" failure naming the placements.
    Raises ValueError naming the op and the argument when a sample does not fit the schema, holds
    a meta tensor, has a value the cast to `dtype` would make infinite or a stride-0 input (with
    `dtype`), or an option is unknown or out of range (eps <= 0, atol < 0, an unknown mode);
    TypeError for a sample, value or option value of a kind the harness does not take
    (atol="x"), naming the option. Under torch.inference_mode() the checks run with it off, on
    normal copies of the sample's inference tensors.
    """
    ensure_loaded()
    name = _op_name(op)
    if isinstance(samples, (torch.Tensor, str, Sample, Mapping)):
        raise TypeError(f"customop.gradcheck.check({name}): samples is a list of samples, got a "
                        f"{type(samples).__name__}")
    dtype = options.pop("dtype", None)
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"customop.gradcheck.check({name}): dtype must be one of "
                         f"{', '.join(str(d) for d in _DTYPES)}, got {dtype!r}")
    if "reference" in options and not isinstance(options["reference"], str):
        options["reference"] = _op_name(options["reference"])
    sharding = bool(options.pop("sharding", False))
    py_checks = pop_options(name, options)
    options = checked_options(f"customop.gradcheck.check({name})", options)
    # Under torch.inference_mode() no graph is recorded: the checks need one, so they run
    # with it off, on normal copies of inference tensors (requires_grad kept).
    with torch.inference_mode(False):
        return _check_samples(name, samples, options, dtype, sharding, py_checks)


def _normal_tensor(value):
    if isinstance(value, torch.Tensor) and value.is_inference():
        return value.clone().requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_normal_tensor(v) for v in value)
    return value


def _refuse_meta(name: str, index: int, args: list, names) -> None:
    for k, a in enumerate(args):
        for t in a if isinstance(a, (list, tuple)) else [a]:
            # NB: a plain meta tensor only: a tensor subclass may report the meta device and
            # hold values (tests/python/test_harness_devices.py's simulated device).
            if type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_meta:
                arg = names[k] if names is not None and k < len(names) else f"#{k}"
                raise ValueError(f"customop.gradcheck.check({name}): sample {index}, argument "
                                 f"'{arg}' is a meta tensor: it holds no values, and the checks "
                                 f"compare values; give a CPU or CUDA tensor (the fake-kernel "
                                 f"check runs the op on meta copies itself)")


def _check_samples(name, samples, options, dtype, sharding, py_checks) -> list[dict]:
    reports, bound = [], []
    for i, sample in enumerate(samples):
        opts = dict(options)
        opts.setdefault("label", f"sample {i}")
        args, names = _bind(name, sample)
        _refuse_meta(name, i, args, names)
        args = [_normal_tensor(a) for a in args]
        if sharding:
            bound.append((opts["label"], args))  # run_cases casts to float64
        if dtype is not None:
            args = _cast_sample(name, i, args, names, dtype)
        report = run(name, args, opts, names)
        report.pop("_raised", None)
        if py_checks and names is not None:
            add_results(report, py_checks, name, _overload_of(name), args, names)
        reports.append(report)
    if sharding:
        for report, rule_report in zip(reports, check_sharding(name, bound)):
            report["sharding"] = rule_report
            if not rule_report["passed"]:
                report["passed"] = False
                headline = (f"sharding check of {name} could not run: the op failed on whole "
                            f"tensors" if rule_report.get("not_run") else
                            f"sharding rule of {name} is wrong")
                report.setdefault("failures", []).append(
                    {"check": "sharding", "headline": headline,
                     "detail": format_sharding_failure(rule_report)})
    return reports


def assert_gradcheck(op, samples: Sequence[Any], **options) -> None:
    """check(), raising AssertionError with format_failure's text for the first failed sample:
    for pytest."""
    for report in check(op, samples, **options):
        if not report["passed"]:
            raise AssertionError(format_failure(report))
