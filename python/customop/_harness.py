"""The C++ harness from Python: loading libcustomop_gradcheck_ops.so, one check of a dispatcher
op (arguments as JSON, tensors beside them), the text of a failed report, and the original
Python exceptions the checked function raised during a check."""

from __future__ import annotations

import json
import math
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
