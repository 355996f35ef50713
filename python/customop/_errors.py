"""What the C++ harness appends to the message of a Python error it caught (called from
libcustomop_gradcheck_ops.so, see gradcheck/src/python_op.cpp): the exception's type and the
line that raised it. The exception itself is kept for the Python caller (_harness.record)."""

from __future__ import annotations

import traceback


def describe(error: BaseException) -> str:
    """"ValueError, raised at /path/ops.py:42 in backward" (the innermost frame)."""
    from . import _harness

    _harness.record(error)
    where = raised_at(error)
    return f"{type(error).__name__}{', ' + where if where else ''}"


def raised_at(error: BaseException) -> str:
    """"raised at /path/ops.py:42 in backward": the innermost frame of `error`'s traceback, or
    "" when it has none."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" \
        if frames else ""
