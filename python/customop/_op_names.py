"""The op spellings customop.gradcheck accepts, in one place: check() and check_sharding() both
turn what a user passes into the dispatcher's name. (Its own module so that _sharding_check
needs nothing from gradcheck.py, which imports it.)"""

from __future__ import annotations

import types

import torch


def op_name(op) -> str:
    """'ns::name' or 'ns::name.overload' for an OpOverload, an OpOverloadPacket (its default
    overload), a torch.library.custom_op object, one of customop's op functions
    (customop.rms_norm: its op's default overload), or a string."""
    if isinstance(op, str):
        return op
    if isinstance(op, types.FunctionType) and isinstance(
            getattr(op, "_overload_packet", None), torch._ops.OpOverloadPacket):
        op = op._overload_packet  # customop.ops's wrapper of torch.ops.customop.<name>
    if hasattr(op, "_opoverload"):  # torch.library.custom_op
        op = op._opoverload
    if isinstance(op, torch._ops.OpOverloadPacket):
        if "default" not in op.overloads():
            raise ValueError(f"customop.gradcheck.check: {op._qualified_op_name} has no default "
                             f"overload; pick one of: "
                             f"{', '.join(op._qualified_op_name + '.' + o for o in op.overloads())}")
        op = op.default
    if isinstance(op, torch._ops.OpOverload):
        name = op._schema.name
        return name if op._overloadname == "default" else f"{name}.{op._overloadname}"
    hint = (f"; to check the Python function {getattr(op, '__qualname__', op)!r} itself, use "
            f"customop.gradcheck.gradcheck(func, inputs) (or check_callable)"
            if callable(op) else "")
    raise TypeError(f"customop.gradcheck.check: expected an op (torch.ops.ns.name, an overload, "
                    f"a torch.library.custom_op, customop.<op>) or 'ns::name', got "
                    f"{type(op).__name__}{hint}")
