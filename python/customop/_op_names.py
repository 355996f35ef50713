"""The op spellings customop.gradcheck accepts, in one place: check() and check_sharding() both
turn what a user passes into the dispatcher's name. (Its own module so that _sharding_check
needs nothing from gradcheck.py, which imports it.)"""

from __future__ import annotations

import torch


def op_name(op) -> str:
    """'ns::name' or 'ns::name.overload' for an OpOverload, an OpOverloadPacket (its default
    overload), a torch.library.custom_op object, or a string."""
    if isinstance(op, str):
        return op
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
    raise TypeError(f"customop.gradcheck.check: expected an op (torch.ops.ns.name, an overload, "
                    f"a torch.library.custom_op) or 'ns::name', got {type(op).__name__}")
