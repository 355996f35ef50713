"""pytest plugin of customop (registered through the pytest11 entry point when customop is
installed; nothing is imported from torch or customop until it is used):

- fixture `customop_gradcheck`: customop's gradient check in one line of a test,
      def test_my_op(customop_gradcheck):
          customop_gradcheck(MyFunction.apply, (x, w))           # any callable, as gradcheck()
          customop_gradcheck.op(torch.ops.mylib.op, [(x, w)])    # dispatcher op samples, check()
  each raises AssertionError with the report when a check fails.
- `pytest --customop-gradcheck`: every torch.autograd.gradcheck / gradgradcheck call of the
  suite (also those imported with `from torch.autograd import gradcheck` in test modules) runs
  customop's check instead, whose verdict the test gets; torch's own check runs beside it on
  the same call, and the calls where the two verdicts differ are listed at the end of the run
  (file, test, function, both verdicts, customop's first failure). Calls with keywords that
  customop refuses (check_batched_grad=True, check_batched_forward_grad=True, ...) go to torch alone and
  are counted.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import pytest


class _Routing:
    """The state of --customop-gradcheck: torch's originals and what the calls found."""

    def __init__(self):
        self.calls = 0
        self.torch_only = 0
        self.disagreements: list[dict[str, Any]] = []
        self.current_test = "?"
        self.originals: dict[str, Any] = {}

    def route(self, name: str, ours, theirs):
        def routed(func, inputs, *args, **kwargs):
            from customop import gradcheck as gc

            self.calls += 1
            raise_exception = kwargs.pop("raise_exception", True)
            try:
                ok, report = gc.check_callable(ours, func, inputs, *args, **kwargs)
            except NotImplementedError:
                self.torch_only += 1
                with self.torch_itself():
                    return theirs(func, inputs, *args, raise_exception=raise_exception, **kwargs)
            try:
                with self.torch_itself():
                    torch_ok = theirs(func, inputs, *args, raise_exception=False, **kwargs)
            except Exception as e:  # noqa: BLE001 -- torch raises for errors of func
                torch_ok = f"raised {type(e).__name__}"
            if torch_ok is not ok:
                first = (report.get("failures") or [{}])[0].get("headline", "")
                self.disagreements.append({
                    "test": self.current_test, "call": name, "function": _function_name(func),
                    "customop": "pass" if ok else "fail",
                    "torch": {True: "pass", False: "fail"}.get(torch_ok, torch_ok),
                    "first_failure": first})
            if not ok and raise_exception:
                raised = report.get("_raised") or []
                if raised and report["failures"][0]["check"] in ("forward_error",
                                                                 "backward_error"):
                    raise raised[0]  # as torch: the function's own exception, unchanged
                raise gc.GradcheckError(gc.format_failure(report))
            return ok

        routed.__name__ = name
        routed.__doc__ = f"customop.gradcheck.{name}, routed by pytest --customop-gradcheck"
        return routed

    @contextlib.contextmanager
    def torch_itself(self):
        """torch's originals in place while torch's own check runs (its gradgradcheck calls
        the module's gradcheck)."""
        module = sys.modules["torch.autograd.gradcheck"]
        routed = {name: getattr(module, name) for name in self.originals}
        _install(self.originals)
        try:
            yield
        finally:
            _install(routed)


def _install(functions: dict[str, Any]) -> None:
    import torch.autograd

    module = sys.modules["torch.autograd.gradcheck"]
    for name, fn in functions.items():
        setattr(torch.autograd, name, fn)
        setattr(module, name, fn)


_routing: _Routing | None = None


def _function_name(func) -> str:
    from customop._callable import function_name

    return function_name(func)


def pytest_addoption(parser):
    group = parser.getgroup("customop")
    group.addoption("--customop-gradcheck", action="store_true", default=False,
                    help="run torch.autograd.gradcheck/gradgradcheck calls through customop's "
                         "gradient check (torch's beside it), listing where the verdicts differ")


def pytest_configure(config):
    global _routing
    if not config.getoption("--customop-gradcheck"):
        return
    import torch
    import torch.autograd

    from customop import gradcheck as gc

    module = sys.modules["torch.autograd.gradcheck"]
    _routing = _Routing()
    routed = {}
    for name, ours in (("gradcheck", gc.gradcheck), ("gradgradcheck", gc.gradgradcheck)):
        theirs = getattr(module, name)
        _routing.originals[name] = theirs
        routed[name] = _routing.route(name, ours, theirs)
    _install(routed)
    del torch


def pytest_unconfigure(config):
    global _routing
    if _routing is None:
        return
    _install(_routing.originals)
    _routing = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if _routing is not None:
        _routing.current_test = item.nodeid
    yield


def pytest_terminal_summary(terminalreporter):
    if _routing is None:
        return
    tr = terminalreporter
    tr.section("customop gradcheck")
    tr.write_line(f"{_routing.calls} gradcheck calls routed to customop; "
                  f"{_routing.torch_only} went to torch alone (keywords customop refuses); "
                  f"{len(_routing.disagreements)} verdicts differ from torch.autograd.gradcheck")
    for d in _routing.disagreements:
        tr.write_line(f"  {d['test']}: {d['call']}({d['function']}): customop {d['customop']}, "
                      f"torch {d['torch']}" + (f"; {d['first_failure']}" if d["first_failure"]
                                               else ""))


class _Fixture:
    """The customop_gradcheck fixture's value."""

    def __call__(self, func, inputs, **options) -> None:
        from customop import gradcheck as gc

        ok, report = gc.check_callable(gc.gradcheck, func, inputs, **options)
        if not ok:
            raise AssertionError(gc.format_failure(report))

    def op(self, op, samples, **options) -> None:
        from customop import gradcheck as gc

        gc.assert_gradcheck(op, samples, **options)


@pytest.fixture
def customop_gradcheck():
    """customop's gradient check as an assertion: customop_gradcheck(func, inputs, **options)
    for any callable (customop.gradcheck.gradcheck's arguments), customop_gradcheck.op(op,
    samples, **options) for a dispatcher op (customop.gradcheck.check's); AssertionError with
    the report when a check fails."""
    return _Fixture()
