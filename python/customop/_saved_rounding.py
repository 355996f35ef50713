"""The low-precision rule's model run from Python: while the C++ harness runs an op's float64
run with its saved tensors rounded to the 16-bit dtype (customop/saved_rounding.h), every tensor
saved for backward on this thread (ATen's, an autograd.Function's, a torch.library.custom_op's,
customop's) is saved rounded, through torch.autograd.graph.saved_tensors_hooks: C++ alone
reaches only customop's own ops. The harness enters and leaves it through the dispatcher op

    customop_gradcheck_py::saved_rounding_hooks(str dtype) -> ()

("BFloat16", "Half", "Float": c10's names; "" leaves the innermost)."""

from __future__ import annotations

import threading

import torch

_DTYPES = {"BFloat16": torch.bfloat16, "Half": torch.float16, "Float": torch.float32}
_state = threading.local()
_lib: torch.library.Library | None = None


def _pack(dtype: torch.dtype):
    eps = torch.finfo(dtype).eps

    def pack(t: torch.Tensor) -> torch.Tensor:
        # Only dtypes finer than the target (float64, float32) are rounded; what is coarser,
        # integral or complex is saved as it is.
        if t.is_floating_point() and torch.finfo(t.dtype).eps < eps:
            return t.detach().to(dtype).to(t.dtype)
        return t

    return pack


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _saved_rounding_hooks(dtype: str) -> None:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    if dtype:
        hooks = torch.autograd.graph.saved_tensors_hooks(_pack(_DTYPES[dtype]), _unpack)
        hooks.__enter__()
        stack.append(hooks)
    elif stack:
        stack.pop().__exit__(None, None, None)


def register() -> None:
    """Defines the op once per process (the harness finds it by name; without it, the model
    run rounds customop's saved tensors only)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("customop_gradcheck_py", "DEF")
    lib.define("saved_rounding_hooks(str dtype) -> ()")
    lib.impl("saved_rounding_hooks", _saved_rounding_hooks, "CompositeImplicitAutograd")
    _lib = lib
