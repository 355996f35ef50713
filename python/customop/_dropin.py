"""customop.gradcheck.gradcheck / gradgradcheck: torch.autograd.gradcheck's signature and
meaning for any callable, judged by the C++ harness (through _callable's generated op)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from torch.autograd.gradcheck import GradcheckError

from . import _batched_grad_check, _callable, _errors, _forward_ad_check, _harness


class UnreliableDifferencesWarning(UserWarning):
    """A check passed, but some of its Jacobian entries have a numerical error estimate above
    1 % of their row: finite differences could not judge them (outputs rounded to low
    precision, inputs far larger than eps). The report's notes list them."""


# torch.autograd.gradcheck's keywords that this harness has no check for: refused when set
# (a check silently skipped would be a false pass).
_REFUSED = {
    "masked": "sparse inputs",
}
# customop's own options gradcheck() passes to the harness (GradcheckOptions fields).
_OWN = {"seed", "label", "input_subsets", "max_jacobian_entries", "check_grad_output_scaling",
        "check_grad_metadata", "check_forward_grad_mode", "detect_nondifferentiable",
        "check_cuda_against_cpu", "check_layout_variants", "check_backward_precision",
        "backward_roundoff"}


def _finite(caller: str, key: str, value, positive: bool = False) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (
        value > 0 if positive else value >= 0)
    if not ok:
        raise ValueError(f"customop.gradcheck.{caller}: {key} must be a finite number "
                         f"{'> 0' if positive else '>= 0'}, got {value!r}")


def _options(caller: str, eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode,
             extra: dict) -> dict:
    for key, what in _REFUSED.items():
        if extra.pop(key, None):
            raise NotImplementedError(f"customop.gradcheck.{caller}: {key}={True} is not "
                                      f"supported: this harness does not check {what}")
    extra.pop("check_grad_dtypes", None)  # always checked here (grad metadata)
    if not extra.pop("check_backward_ad", True):
        raise NotImplementedError(f"customop.gradcheck.{caller}: check_backward_ad must be True: "
                                  f"this harness checks backward-mode AD only")
    unknown = sorted(set(extra) - _OWN)
    if unknown:
        raise TypeError(f"customop.gradcheck.{caller}() got an unexpected keyword argument "
                        f"'{unknown[0]}'")
    _finite(caller, "eps", eps, positive=True)
    _finite(caller, "nondet_tol", nondet_tol)
    opts = {"eps": float(eps), "nondet_tol": float(nondet_tol),
            "check_undefined_grad": bool(check_undefined_grad),
            "mode": "fast" if fast_mode else "slow"}
    for key, value in (("atol", atol), ("rtol", rtol)):
        if value is not None:
            _finite(caller, key, value)
            opts[key] = float(value)
    opts.update(_harness.checked_options(f"customop.gradcheck.{caller}", extra))
    return opts


def _refuse_unjudgeable(caller: str, name: str, inputs, outputs) -> None:
    """NotImplementedError for what the harness cannot judge: complex inputs or outputs
    (Wirtinger derivatives), and float16/bfloat16 outputs of a function whose inputs are not
    float16/bfloat16 (the low-precision rule compares low-precision inputs' runs; finite
    differences cannot judge such outputs). float16/bfloat16 inputs are judged by the
    low-precision rule (README "Low precision"), against the function's own float64 run."""
    low = (torch.float16, torch.bfloat16)
    low_inputs = False
    for t in _callable.tensor_leaves(inputs):
        if t.requires_grad and t.is_complex():
            raise NotImplementedError(
                f"customop.gradcheck.{caller}({name}): an input of dtype {t.dtype} requires grad; "
                f"complex derivatives are not judged here (use float64 or float32, or "
                f"torch.autograd.gradcheck)")
        low_inputs = low_inputs or (t.requires_grad and t.dtype in low)
    for t in outputs:
        if t.requires_grad and (t.is_complex() or (t.dtype in low and not low_inputs)):
            raise NotImplementedError(
                f"customop.gradcheck.{caller}({name}): an output of dtype {t.dtype} requires "
                f"grad; {'complex outputs' if t.is_complex() else 'low-precision outputs of higher-precision inputs'} are "
                f"not judged here")


def _forward_error_report(name: str, error: BaseException) -> dict:
    where = _errors.raised_at(error)
    return {"op": name, "label": "", "passed": False, "_raised": [error], "failures": [{
        "check": "forward_error", "second_order": False, "output": -1, "input": -1,
        "headline": "the function raised an error",
        "detail": f"  {name} raised: {type(error).__name__}: {_errors.text(error)}"
                  f"{' (' + where + ')' if where else ''}"}]}


def _written_input_report(name: str, arg: str, where: str, before: str, after: str) -> dict:
    return {"op": name, "label": "", "passed": False, "failures": [{
        "check": "mutation", "second_order": False, "output": -1, "input": -1,
        "headline": f"the function wrote into its input '{arg}', which requires grad",
        "detail": f"  {name} changed '{arg}' in place: {where} was {before}, is {after} after "
                  f"one call (on a copy; the caller's tensor is untouched). Finite differences "
                  f"call the function many times on the same perturbed input, and autograd's "
                  f"saved tensors see the write, so no gradient of it can be judged: write "
                  f"into a clone ({arg} = {arg}.clone() first), or return the new value."}]}


def _warn_unreliable(report: dict) -> None:
    for note in report.get("notes", []):
        if "may pass" in note:
            warnings.warn(f"customop.gradcheck: {report.get('op')}: {note}",
                          UnreliableDifferencesWarning, stacklevel=4)


def _verdict(report: dict, raise_exception: bool) -> bool:
    if report["passed"]:
        _warn_unreliable(report)
        return True
    if raise_exception:
        raised = report.get("_raised") or [None]
        raise GradcheckError(_harness.format_failure(report)) from raised[0]
    return False


def gradcheck(func: Callable, inputs, *, eps: float = 1e-6, atol: float | None = None,
              rtol: float | None = None, raise_exception: bool = True, nondet_tol: float = 0.0,
              check_undefined_grad: bool = True, fast_mode: bool = False, **options) -> bool:
    """torch.autograd.gradcheck for any callable, judged by customop's checks.

    - func: a callable taking `inputs` positionally (a function, MyFunction.apply, a
      torch.library.custom_op, a module) and returning a tensor or a (nested) sequence of
      tensors; non-tensor outputs are ignored, as torch does.
    - inputs: a tensor, or a sequence of inputs: tensors (any shape; float64 for the tightest
      verdict, float32 judged against a float64 run of func), nested sequences of tensors, or
      other values passed through. The floating tensors that require grad are differentiated.
      They are never modified (every call gets copies). A function that writes into an input
      that requires grad fails the check ("mutation", naming the input and an element it
      changed): finite differences cannot judge it. Writes into other inputs (a buffer of
      running statistics) are the function's business.
    - eps: central-difference step (input units, finite, > 0), torch's default 1e-6.
    - atol, rtol: None (default) judges each Jacobian entry by error estimates (options.h,
      Tolerances); a number switches to torch's fixed rule |a - n| <= atol + rtol |n|.
    - raise_exception: on failure raise torch.autograd.gradcheck.GradcheckError (a
      RuntimeError, as torch) with the report: check, output, input (by the callable's
      parameter name, "xs[1]" inside a sequence; inputs count those that require grad, as in
      torch's messages), worst element, numerical vs analytical; else return False.
    - nondet_tol, check_undefined_grad, fast_mode: as torch (fast mode: customop's random
      projections, whose guarantee is stated in options.h).
    - check_grad_dtypes: accepted; grad dtype, device and shape are always checked here.
    - check_forward_ad: the forward-mode derivative (torch.autograd.forward_ad) against the
      reverse-mode one this call verifies (customop/_forward_ad_check.py: the whole Jacobian
      both ways in slow mode, naming output, input and element; random projections in fast
      mode); a function whose forward-mode AD raises fails it with the message.
    - check_batched_grad, check_batched_forward_grad: the VJP (JVP) with the function itself
      under torch.func.vmap, forward included, against the same derivative per example
      (customop/_batched_grad_check.py; torch's check vmaps the backward only, so a wrong
      batching rule of an op inside passes it); NotImplementedError when torch.func cannot run
      the function (an autograd.Function without setup_context).
    - masked (set to True), check_backward_ad (False): NotImplementedError naming the keyword
      (no such check here).
    - options: customop's own: seed, label, input_subsets ("none", "singles",
      "singles-and-complements"), check_layout_variants, check_grad_output_scaling,
      backward_roundoff (a float >= 0: the backward's relative precision where it is coarser
      than its dtype's by design, a series or table approximation), ...;
      another keyword is a TypeError, as for any Python function.
    Returns True when every check passed (with an UnreliableDifferencesWarning when some
    entries could not be judged). An error func raises (forward or backward) is a failed check
    with its message and the line that raised it: GradcheckError raised from the original
    exception, or False. KeyboardInterrupt and SystemExit propagate.
    Raises ValueError when no tensor input requires grad, when an input that does overlaps in
    memory or has a stride-0 dim, or for a bad eps/atol/rtol/nondet_tol;
    NotImplementedError for complex inputs or outputs that require grad, and float16/bfloat16
    outputs of float32/float64 inputs. float16/bfloat16 inputs are judged by the low-precision
    rule against func's own float64 run (README "Low precision"; second order: the float64
    run only).
    Example:
        gradcheck(torch.sin, (torch.randn(4, dtype=torch.float64, requires_grad=True),))
    """
    top_names = options.pop("_top_names", None)  # gradgradcheck's names for its function
    want_report = options.pop("_want_report", False)  # check_callable's (verdict, report)
    caller = options.pop("_caller", "gradcheck")
    check_forward_ad = bool(options.pop("check_forward_ad", False))
    check_batched = [kind for kind, key in ((False, "check_batched_grad"),
                                            (True, "check_batched_forward_grad"))
                     if options.pop(key, False)]
    opts = _options(caller, eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode, options)
    _harness.ensure_loaded()
    inputs = _callable.as_tuple(inputs)
    name = _callable.function_name(func)
    copies = _callable.fresh_copies(inputs)
    copy_leaves = _callable.tensor_leaves(copies)  # before the call: it may reorder a list
    report = None
    try:
        with torch.enable_grad():
            probe_value = func(*copies)
            probe = _callable.tensor_leaves(probe_value)
    except Exception as e:  # noqa: BLE001 -- the function's own error is the report
        report = _forward_error_report(name, e)
    else:
        written = _callable.written_input(inputs, copy_leaves,
                                          _callable.tensor_names(func, inputs, top_names))
        if written is not None:
            report = _written_input_report(name, *written)
    if report is None:
        if not probe:
            raise ValueError(f"customop.gradcheck.{caller}({name}): the function returned no "
                             f"tensor")
        _refuse_unjudgeable(caller, name, inputs, probe)
        with _callable.callable_op(func, inputs, len(probe), top_names) as op:
            opts.setdefault("name", name)
            # NB: the op is a wrapper generated around a Python function, with a schema made
            # up here: a function may return a view of its input (transpose), as
            # torch.autograd.gradcheck allows, so the schema audit is off; a write into an
            # input that requires grad is found by the probe call above (written_input).
            opts["check_mutation"] = False
            opts["arg_names"] = op.arg_names
            if len(probe) > 1:
                opts["return_names"] = _callable.output_names(probe_value)
            report = _harness.run(op.name, list(op.tensors), opts)
            report["notes"] = [
                "mutation: the inputs that require grad checked for writes (one call on copies); "
                "the schema audit is off (a generated schema)" if n.startswith("mutation: not")
                else n for n in report.get("notes", [])]
        if check_forward_ad:
            failures = _forward_ad_check.check(func, inputs, top_names, fast_mode,
                                               int(opts.get("seed", 0)))
            report.setdefault("checks_run", []).append("forward_ad")
            if failures:
                report["passed"] = False
                report.setdefault("failures", []).extend(failures)
        for forward in check_batched:
            failures = _batched_grad_check.check(func, inputs, top_names,
                                                 int(opts.get("seed", 0)), forward)
            report.setdefault("checks_run", []).append(
                "batched_forward_grad" if forward else "batched_grad")
            if failures:
                report["passed"] = False
                report.setdefault("failures", []).extend(failures)
    if want_report:
        return report["passed"], report
    return _verdict(report, raise_exception)


def check_callable(entry: Callable, func: Callable, inputs, *args, **kwargs) -> tuple[bool, dict]:
    """`entry` (gradcheck or gradgradcheck) with its verdict and report, raising nothing for a
    failed check: for the pytest plugin and tests."""
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
    Returns, raises: as gradcheck(); failures name the inputs as func does and the
    grad_outputs "grad_output k".
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
    name = _callable.function_name(func)
    flat_in, _ = pytree.tree_flatten(inputs)
    diff_pos = [k for k, v in enumerate(flat_in) if isinstance(v, torch.Tensor) and v.requires_grad]
    if grad_outputs is None:
        with torch.enable_grad():
            outs = [o for o in _callable.tensor_leaves(func(*_callable.fresh_copies(inputs)))
                    if o.requires_grad]
        if not outs:
            raise ValueError(f"customop.gradcheck.gradgradcheck({name}): the function returned "
                             f"no tensor that requires grad")
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

    first_order.__qualname__ = f"grads of {name}"
    names = _callable.parameter_names(func, count) + \
        [f"grad_output {k}" for k in range(len(grad_outputs))]
    return gradcheck(first_order, inputs + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad, fast_mode=fast_mode, seed=seed,
                     _top_names=names, _caller="gradgradcheck", **options)
