"""The C++ harness from Python: loading libcustomop_gradcheck_ops.so, one check of a dispatcher
op (arguments as JSON, tensors beside them), the text of a failed report, and the original
Python exceptions the checked function raised during a check."""

from __future__ import annotations

import json
import math
import numbers
import pathlib
import threading

import torch

from . import _saved_rounding
from ._torch_check import load_library

_LIBRARY = pathlib.Path(__file__).resolve().parent / "lib" / "libcustomop_gradcheck_ops.so"
_loaded = False
_raised = threading.local()


def ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        load_library(_LIBRARY)
        _saved_rounding.register()
        _loaded = True


def record(error: BaseException) -> None:
    """Keeps an exception the checked function raised (called where it is caught: the callable's
    kernel, and customop._errors.describe for errors the C++ side takes off the interpreter)."""
    if not hasattr(_raised, "errors"):
        _raised.errors = []
    _raised.errors.append(error)


def take_recorded() -> list[BaseException]:
    errors = getattr(_raised, "errors", [])
    _raised.errors = []
    return errors


def _encode(value, tensors: list, where: str):
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return {"tensors": [_encode(v, tensors, where)["tensor"] for v in value]}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors, where) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: a non-finite float ({value}) cannot be passed to the harness")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{where}: a {type(value).__name__} ({value!r}) cannot be passed to the "
                    f"harness (tensors, lists of tensors, None, bool, int, float and str can)")


# The GradcheckOptions fields the harness takes from Python, by kind (the C++ side reads them
# from JSON: gradcheck/src/python_op.cpp, options_from_json).
_FLAGS = frozenset({
    "check_undefined_grad", "check_grad_output_scaling", "check_grad_metadata",
    "check_forward_grad_mode", "detect_nondifferentiable", "check_cuda_against_cpu",
    "check_second_order", "check_fake_kernel", "check_mutation", "check_out_variant",
    "check_inplace_variant", "check_layout_variants", "check_backward_precision"})
_POSITIVE = frozenset({"eps"})  # the finite-difference step: > 0
_NON_NEGATIVE = frozenset({"atol", "rtol", "nondet_tol", "backward_roundoff"})
_COUNTS = {"seed": 1 << 64, "max_jacobian_entries": 1 << 63}  # integers in [0, limit)
_CHOICES = {"mode": ("slow", "fast"),
            "input_subsets": ("none", "singles", "singles-and-complements")}
_TEXTS = frozenset({"label", "reference", "name"})


def checked_options(where: str, options: dict) -> dict:
    """`options` with each GradcheckOptions value checked and as JSON takes it (a numpy number as
    int or float). Raises TypeError (a value of the wrong kind) or ValueError (out of range, not
    a choice), starting with `where` and naming the option, what it takes and what it got,
    before the C++ side's JSON reader would (its message names neither). Other keys pass as they
    are: the C++ side names an unknown option."""
    out = {}
    for key, value in options.items():
        def refuse(error, takes: str):
            given = options[key]
            raise error(f"{where}: option '{key}' must be {takes}, got {given!r} "
                        f"({type(given).__name__})")

        if key in _FLAGS and not isinstance(value, bool):
            refuse(TypeError, "a bool (True or False)")
        elif key in _POSITIVE or key in _NON_NEGATIVE:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                refuse(TypeError, "a number")
            value = float(value)
            if not math.isfinite(value) or (value <= 0 if key in _POSITIVE else value < 0):
                refuse(ValueError, "a finite number " + ("> 0" if key in _POSITIVE else ">= 0"))
        elif key in _COUNTS:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                refuse(TypeError, "an int")
            value = int(value)
            if not 0 <= value < _COUNTS[key]:
                refuse(ValueError, f"an int >= 0 and < 2^{_COUNTS[key].bit_length() - 1}")
        elif key in _CHOICES and value not in _CHOICES[key]:
            refuse(TypeError if not isinstance(value, str) else ValueError,
                   " or ".join(f'"{c}"' for c in _CHOICES[key]))
        elif key in _TEXTS and not isinstance(value, str):
            refuse(TypeError, "a str")
        out[key] = value
    return out


def run(name: str, args: list, options: dict, names: list[str] | None = None) -> dict:
    """The report (a dict, the CLI's JSON) of one check of the dispatcher op `name` at `args`,
    one value per schema argument. Raises the first recorded exception that is not an
    Exception (KeyboardInterrupt, SystemExit): the harness must not swallow them."""
    tensors: list = []
    encoded = []
    for k, v in enumerate(args):
        arg = names[k] if names and k < len(names) else str(k)
        encoded.append(_encode(v, tensors, f"customop.gradcheck.check({name}): argument '{arg}'"))
    for key, value in options.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"customop.gradcheck: option {key}={value} must be finite")
    take_recorded()
    # enable_grad: as torch.autograd.gradcheck needs; also under an outer no_grad.
    with torch.enable_grad(), _saved_rounding.nested_check():
        text = torch.ops.customop_gradcheck.check(name, tensors, json.dumps(encoded),
                                                  json.dumps(options))
    report = json.loads(text)
    raised = take_recorded()
    for error in raised:
        if not isinstance(error, Exception):
            raise error
    report["_raised"] = raised
    return report


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
