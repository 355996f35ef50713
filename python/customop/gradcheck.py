"""customop's gradcheck from Python, for any dispatcher op: customop's own, ops defined in C++
with TORCH_LIBRARY, and ops defined in Python with torch.library.custom_op.

    import customop.gradcheck as gc
    report = gc.check(torch.ops.mylib.cube, [(torch.randn(5, dtype=torch.float64),)])
    assert report["passed"], gc.format_failure(report)

The checks are those of the C++ library and `customop-gradcheck` (Jacobian by central finite
differences against the backward's VJPs, reentrancy, undefined grads, grad_output scaling,
grad metadata, forward in grad mode, the fake kernel; second order on request), and the reports
are the same JSON objects the CLI writes with --json (see customop/gradcheck/report.h).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import torch

from ._torch_check import load_library

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


def check(op, samples: Sequence[Sequence[Any]], **options) -> list[dict]:
    """Gradchecks `op` on each sample and returns one report (a dict, as the CLI's JSON) per
    sample, in order; report["passed"] is the verdict. Never raises for a failed check.

    - op: torch.ops.ns.name (its default overload), an OpOverload, a torch.library.custom_op,
      or "ns::name[.overload]".
    - samples: a list of positional argument tuples, one value per schema argument (defaults are
      not filled in). As in torch.autograd.gradcheck, the tensors that require grad (also inside
      lists) are the differentiable inputs; their dtype and device are the run's (float64 for
      tight tolerances).
    - options: GradcheckOptions fields, e.g. mode="fast", eps=1e-6, atol=1e-5, rtol=1e-3,
      seed=0, check_second_order=True, check_fake_kernel=False, label="my case".
    Raises ValueError naming the op and the argument when a sample does not fit the schema or an
    option is unknown.
    """
    global _loaded
    if not _loaded:
        load_library(_LIBRARY)
        _loaded = True
    name = _op_name(op)
    reports = []
    for i, sample in enumerate(samples):
        tensors: list = []
        args = [_encode(v, tensors) for v in sample]
        opts = dict(options)
        opts.setdefault("label", f"sample {i}")
        text = torch.ops.customop_gradcheck.check(name, tensors, json.dumps(args), json.dumps(opts))
        reports.append(json.loads(text))
    return reports


def format_failure(report: dict) -> str:
    """The failures of one report as text: each failure's headline and detail (which output,
    which named argument, which element, numerical vs analytical)."""
    if report.get("passed"):
        return "gradcheck passed"
    lines = [f"gradcheck of {report.get('op')} failed ({report.get('label')}):"]
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
