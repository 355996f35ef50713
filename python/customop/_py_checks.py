"""The checks customop.gradcheck.check runs in Python after the C++ report of a sample (they
need torch's symbolic shapes or torch.compile, which have no C++ API). Each is a unit: its
option, its run and its report fields; check() walks PY_CHECKS, so adding one touches no other.

A unit's run(op, args, names) -> dict never raises for what the op does; the dict has
"passed" and, when the check did not apply, "not_run" (a reason). Its format(name, result)
gives (headline, detail) of a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ._compiled_check import check_compiled, format_compiled
from ._shape_lock import check_shape_lock, format_shape_lock
from ._transforms_check import check_transforms, format_transforms


@dataclass(frozen=True)
class PyCheck:
    option: str  # check(..., <option>=False) turns it off; on by default
    key: str  # the report field holding its result, and the failure's "check" name
    run: Callable[[object, list, list], dict]
    format: Callable[[str, dict], tuple]
    passed_note: Callable[[dict], str]  # the report note when it passed


PY_CHECKS = (
    PyCheck("check_shape_lock", "shape_lock", check_shape_lock, format_shape_lock,
            lambda r: f"{r['symbols']} symbolic size(s), none fixed by the fake kernel"),
    PyCheck("check_compiled", "compiled", check_compiled, format_compiled,
            lambda r: (f"{r['compared']} tensor(s) equal eagerly and compiled; out= lowering: "
                       f"{r['out_lowering']}" + ("" if r["out_overload"] is None else
                                                 ", taken" if r["lowered"] else
                                                 ", not taken by Inductor"))),
    PyCheck("check_transforms", "transforms", check_transforms, format_transforms,
            lambda r: (f"torch.func {', '.join(r['transforms'])} agree (vmap fallback off)"
                       + "".join(f"; {u}" for u in r["unsupported"]))),
)


def pop_options(name: str, options: dict) -> list[PyCheck]:
    """The units `options` leaves on; pops their options. Raises ValueError naming the op and
    the option when a value is not a bool."""
    enabled = []
    for unit in PY_CHECKS:
        value = options.pop(unit.option, True)
        if not isinstance(value, bool):
            raise ValueError(f"customop.gradcheck.check({name}): option '{unit.option}' must be "
                             f"a bool, got {value!r}")
        if value:
            enabled.append(unit)
    return enabled


def add_results(report: dict, units: list[PyCheck], name: str, op, args: list,
                names: list[str]) -> None:
    """Runs each unit on one sample and folds its result into the sample's report: the result
    under its key, a note, and a failure (report["passed"] = False) when it failed."""
    notes = report.setdefault("notes", [])
    for unit in units:
        result = unit.run(op, args, names)
        report[unit.key] = result
        label = unit.key.replace("_", " ")
        # The C++ harness gets the option off (the check runs here) and notes so: this result
        # replaces that note.
        notes[:] = [n for n in notes if n != f"{label}: not checked ({unit.option} off)"]
        if "not_run" in result:
            notes.append(f"{label}: not checked ({result['not_run']})")
        elif result["passed"]:
            notes.append(f"{label}: {unit.passed_note(result)}")
        else:
            report["passed"] = False
            headline, detail = unit.format(name, result)
            report.setdefault("failures", []).append(
                {"check": unit.key, "headline": headline, "detail": detail})
