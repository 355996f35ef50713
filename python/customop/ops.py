"""The built-in ops as Python functions: named arguments, defaults and docstrings from each
op's schema; a call goes straight to torch.ops.customop.<name> (autograd, torch.compile and
torch.export see the dispatcher op). With its outputs as keywords (`out=` for one output, else
the .out overload's names: `values=`, `indices=`) a call goes to the .out overload and returns
those buffers. Import through `import customop`, which loads the op
library first."""

from __future__ import annotations

import torch

from . import _schema_py

# NB: rms_norm_ and bias_gelu_ are the in-place variants of rms_norm and bias_gelu
# (op.inplace_variant(): the result written into the first argument).
BUILT_IN_OPS = ("bias_gelu", "bias_gelu_", "bias_gelu_backward", "clamp_count",
                "clamp_count_backward", "fused_add_rms_norm_", "masked_softmax",
                "masked_softmax_backward", "max_along", "max_along_backward",
                "paged_kv_write", "rms_norm", "rms_norm_", "rms_norm_backward", "weighted_sum",
                "weighted_sum_backward")


def _out_names(packet) -> tuple[str, ...]:
    """The keyword-only output arguments of an op's .out overload, in schema order (() when it
    has none)."""
    if "out" not in packet.overloads():
        return ()
    return tuple(a.name for a in packet.out._schema.arguments
                 if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)


def _call_out(name: str, packet, out_names: tuple[str, ...], args, kwargs):
    """The out= form of a wrapped op: packet.out with the caller's buffers; returns them (one
    tensor, or a tuple in schema order). TypeError naming the op when it has no .out overload
    or a buffer is missing or misnamed."""
    if not out_names:
        raise TypeError(
            f"customop.{name}: this op has no out= form (no .out overload: in-place ops, ops "
            "returning Tensor[] and ops without a shape function have none), but got out=; "
            "call it without out=")
    given = [k for k in kwargs if k in out_names or k == "out"]
    missing = [n for n in out_names if n not in kwargs]
    if missing:
        raise TypeError(
            f"customop.{name}: the out= form takes every output by name "
            f"({', '.join(n + '=' for n in out_names)}), but got {', '.join(k + '=' for k in given)}"
            f"; missing {', '.join(missing)}")
    packet.out(*args, **kwargs)
    outs = tuple(kwargs[n] for n in out_names)
    return outs[0] if len(outs) == 1 else outs


def _wrap(name: str):
    packet = getattr(torch.ops.customop, name)
    overload = packet.default
    out_names = _out_names(packet)
    out_keys = frozenset(out_names) | {"out"}

    def op(*args, **kwargs):
        # NB: a call without keywords (the common one) costs one truth test more than
        # torch.ops; the out= form goes to the .out overload.
        if kwargs and not out_keys.isdisjoint(kwargs):
            return _call_out(name, packet, out_names, args, kwargs)
        return overload(*args, **kwargs)

    schema = overload._schema
    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__signature__ = _schema_py.signature(schema)
    op.__doc__ = _schema_py.docstring(name, schema)
    op._overload_packet = packet  # customop.gradcheck.check(customop.rms_norm) checks the op
    return op


bias_gelu = _wrap("bias_gelu")
bias_gelu_ = _wrap("bias_gelu_")
bias_gelu_backward = _wrap("bias_gelu_backward")
clamp_count = _wrap("clamp_count")
clamp_count_backward = _wrap("clamp_count_backward")
fused_add_rms_norm_ = _wrap("fused_add_rms_norm_")
masked_softmax = _wrap("masked_softmax")
masked_softmax_backward = _wrap("masked_softmax_backward")
max_along = _wrap("max_along")
max_along_backward = _wrap("max_along_backward")
paged_kv_write = _wrap("paged_kv_write")
rms_norm = _wrap("rms_norm")
rms_norm_ = _wrap("rms_norm_")
rms_norm_backward = _wrap("rms_norm_backward")
weighted_sum = _wrap("weighted_sum")
weighted_sum_backward = _wrap("weighted_sum_backward")
