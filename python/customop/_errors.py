"""What the C++ harness appends to the message of a Python error it caught (called from
libcustomop_gradcheck_ops.so, see gradcheck/src/python_op.cpp): the exception's type and the
line that raised it. The exception itself is kept for the Python caller (_harness.record)."""

from __future__ import annotations

import os
import sys
import traceback


def describe(error: BaseException) -> str:
    """"ValueError, raised at /path/ops.py:42 in backward" (the innermost frame), or
    "ValueError" where no frame is the user's. The C++ side (one_line_error in
    gradcheck/src/detail/function.cpp) splits it at the first ", " and writes
    "ValueError: <message> (raised at ...)"."""
    from . import _harness

    _harness.record(error)
    where = raised_at(error)
    return f"{type(error).__name__}{', ' + where if where else ''}"


def text(error: BaseException) -> str:
    """str(error), or, where the exception's own __str__ raises, a line saying so: an error
    from user code must come back as a report, not as a second error from formatting it."""
    try:
        return str(error)
    except Exception as inner:  # noqa: BLE001 -- any failure of user code's __str__
        try:
            inner_text = str(inner)
        except Exception:  # noqa: BLE001
            inner_text = "?"
        return f"<its str() raised {type(inner).__name__}: {inner_text}>"


def raised_at(error: BaseException) -> str:
    """"raised at /path/ops.py:42 in backward": the innermost frame of `error`'s traceback
    outside torch and customop (an op called through torch.ops raises in torch/_ops.py: the
    user's line is the caller's); "" when it has none."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    import torch

    libraries = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                      for m in (torch, sys.modules[__package__]))
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(libraries)]
    if not user:
        return ""  # raised by C++ code under torch's own frames: its message says where
    frame = user[-1]
    return f"raised at {frame.filename}:{frame.lineno} in {frame.name}"
