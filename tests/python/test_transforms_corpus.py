"""The transforms corpus (tests/gradcheck/mutants/transform_bugs.cpp), side by side with
torch.autograd.gradcheck's batched and forward-AD checks.

Each planted bug leaves the forward and the backward right and breaks a torch.func transform:
a JVP that drops a term, a batching rule (BatchRule::rows) on an op whose examples interact
(center: x - mean(x) over all elements), a rows rule on an op whose output's batch dim is not
where the rule puts it (swap01: a transpose), and a backward that reads the cotangent's memory
(fails under vmap(vjp)). Each has a correct twin. customop.gradcheck.check (its "transforms"
check) must fail every bug and pass every twin. torch's verdict, with check_batched_grad=True
and check_forward_ad=True, is printed beside ours (pytest -s shows the table) and must be the
one the README states on the pinned torch.

Environment (set by ctest): CUSTOMOP_MUTANTS_LIB (the .so); PYTHONPATH holding customop.
"""

import os

import pytest
import torch

import customop.gradcheck as gc

LIB = os.environ.get("CUSTOMOP_MUTANTS_LIB")
pytestmark = pytest.mark.skipif(not LIB, reason="CUSTOMOP_MUTANTS_LIB must be set")

# op -> its correct twin (None for a twin)
CORPUS = {
    "xs_mul": None,
    "center": None,
    "swap01": None,
    "xs_mul_wrong_jvp": "xs_mul",
    "center_rows_rule": "center",
    "swap01_rows_rule": "swap01",
    "xs_mul_backward_reads_memory": "xs_mul",
    "swap01_general": None,
    "swap01_general_wrong_dims": "swap01_general",
}
# What torch.autograd.gradcheck(check_batched_grad=True, check_forward_ad=True) said on torch
# 2.15: True = passed (missed the bug).
TORCH_PASSES_ON_PINNED_TORCH = {
    "xs_mul_wrong_jvp": False,
    "center_rows_rule": True,
    "swap01_rows_rule": True,
    "xs_mul_backward_reads_memory": False,
    "swap01_general_wrong_dims": True,
}


@pytest.fixture(scope="module", autouse=True)
def _load():
    torch.ops.load_library(LIB)


def _sample(name: str):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, dtype=torch.float64, generator=g).requires_grad_()
    if name.startswith("xs_mul"):
        return (x, torch.randn(3, 4, dtype=torch.float64, generator=g).requires_grad_())
    return (x,)


def _ours(name: str):
    report = gc.check(getattr(torch.ops.customop_mutants, name), [_sample(name)],
                      check_compiled=False)[0]
    return report, sorted({f["check"] for f in report.get("failures", [])})


def _torch_passes(name: str) -> bool:
    op = getattr(torch.ops.customop_mutants, name)
    try:
        return torch.autograd.gradcheck(op, _sample(name), check_batched_grad=True,
                                        check_forward_ad=True, raise_exception=True)
    except Exception:  # noqa: BLE001 -- a failed check or an error: torch did not pass it
        return False


@pytest.mark.parametrize("name", list(CORPUS))
def test_each_bug_is_caught_and_each_twin_passes(name):
    report, failed = _ours(name)
    if CORPUS[name] is None:
        assert report["passed"], report.get("failures")
        assert report["transforms"]["passed"] and "not_run" not in report["transforms"]
    else:
        assert failed == ["transforms"], (failed, report.get("failures"))


def test_side_by_side_with_torch_gradcheck():
    rows = []
    for name, twin in CORPUS.items():
        if twin is None:
            continue
        _, failed = _ours(name)
        torch_ok = _torch_passes(name)
        rows.append((name, "caught" if failed else "missed", "missed" if torch_ok else "caught"))
        assert torch_ok == TORCH_PASSES_ON_PINNED_TORCH[name], (name, torch_ok)
    print("\n| planted bug | customop check (transforms) | torch gradcheck (batched + forward AD) |")
    print("|---|---|---|")
    for name, ours, theirs in rows:
        print(f"| {name} | {ours} | {theirs} |")
    assert all(ours == "caught" for _, ours, _ in rows)


@pytest.mark.parametrize("name", ["center_rows_rule", "swap01_rows_rule",
                                  "xs_mul_backward_reads_memory"])
def test_dropin_batched_grad_runs_the_rule_torchs_check_never_runs(name):
    """The drop-in's check_batched_grad vmaps the forward too, so a wrong batching rule fails
    it; torch's check_batched_grad vmaps the backward only (and passes the two wrong rules)."""
    op = getattr(torch.ops.customop_mutants, name)
    ok, report = gc.check_callable(gc.gradcheck, op, _sample(name), check_batched_grad=True)
    assert not ok
    assert [f["check"] for f in report["failures"]] == ["batched_grad"], report["failures"]
    twin = getattr(torch.ops.customop_mutants, CORPUS[name])
    ok, report = gc.check_callable(gc.gradcheck, twin, _sample(CORPUS[name]),
                                   check_batched_grad=True)
    assert ok, report.get("failures")
    torch_ok = _torch_passes_batched(name)
    assert torch_ok == (name != "xs_mul_backward_reads_memory")


def _torch_passes_batched(name: str) -> bool:
    try:
        return torch.autograd.gradcheck(getattr(torch.ops.customop_mutants, name), _sample(name),
                                        check_batched_grad=True)
    except Exception:  # noqa: BLE001 -- a failed check: torch caught it
        return False
