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


def _depth() -> int:
    return getattr(_state, "depth", 0)


class nested_check:
    """Around one check from Python (customop._harness.run): a check nested in a function under
    an outer check's saved-rounded run runs at full precision (the outer hooks round only at
    their own depth)."""

    def __enter__(self):
        _state.depth = _depth() + 1

    def __exit__(self, *exc):
        _state.depth = _depth() - 1


def _pack(dtype: torch.dtype, depth: int):
    eps = torch.finfo(dtype).eps

    def pack(t: torch.Tensor) -> torch.Tensor:
        # Only dtypes finer than the target (float64, float32) are rounded; what is coarser,
        # integral or complex is saved as it is; nothing in a nested check.
        if _depth() == depth and t.is_floating_point() and torch.finfo(t.dtype).eps < eps:
            return t.detach().to(dtype).to(t.dtype)
        return t

    return pack


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _leave(pack) -> None:
    """Pops this harness's own hooks: hooks the checked function pushed above them and left
    installed are popped, then pushed back in order (never ours popped for theirs)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    pop = torch._C._autograd._pop_saved_tensors_default_hooks
    if top is None:  # an older torch: the top is ours unless the function leaked one
        pop()
        return
    foreign = []
    while (entry := top(True)) is not None:
        pop()
        if entry[0] is pack:
            break
        foreign.append(entry)
    for p, u in reversed(foreign):
        torch._C._autograd._push_saved_tensors_default_hooks(p, u)


def _saved_rounding_hooks(dtype: str) -> None:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    if dtype:
        pack = _pack(_DTYPES[dtype], _depth())
        torch._C._autograd._push_saved_tensors_default_hooks(pack, _unpack)
        stack.append(pack)
    elif stack:
        _leave(stack.pop())


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
