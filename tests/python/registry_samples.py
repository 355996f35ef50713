"""The samples each built-in op registers (OpCore::samples, the gradcheck CLI's cases), read in
Python through the dispatcher op customop_registry::samples (plugin/src/registry_ops.cpp), and
what the CUDA tests need around them. Import after the op library is loaded (`import customop`).
"""

from __future__ import annotations

import json

import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def samples(op: str, device: str, dtype: torch.dtype) -> list[tuple[str, list]]:
    """[(label, args)] of customop::<op> on `device` in `dtype`, the args positional as the
    schema orders them (tensors, tensor lists, None, bool, int, float, str)."""
    text, tensors = torch.ops.customop_registry.samples(f"customop::{op}", device, dtype)

    def decode(v):
        if isinstance(v, dict) and "tensor" in v:
            return tensors[v["tensor"]]
        if isinstance(v, dict) and "tensors" in v:
            return [tensors[k] for k in v["tensors"]]
        if isinstance(v, list):
            return [decode(x) for x in v]
        return v

    return [(s["label"], [decode(a) for a in s["args"]]) for s in json.loads(text)]


def tensors_in(value) -> list[Tensor]:
    """The tensors of an argument or a result (a tensor, a list or tuple of them, or neither)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def leaves(args: list) -> list:
    """args with every floating tensor (also inside lists) replaced by a detached leaf that
    requires grad; sizes, strides and device kept (the kernels see the same layout)."""
    def leaf(v):
        if isinstance(v, Tensor) and v.is_floating_point():
            return v.detach().requires_grad_(True)
        if isinstance(v, list):
            return [leaf(x) for x in v]
        return v
    return [leaf(a) for a in args]


def to(args: list, device=None, dtype=None) -> list:
    """args with floating tensors moved and cast (other tensors only moved), strides kept."""
    def conv(v):
        if isinstance(v, Tensor):
            d = dtype if (dtype is not None and v.is_floating_point()) else v.dtype
            out = torch.empty_strided(v.size(), v.stride(), dtype=d,
                                      device=device if device is not None else v.device)
            return out.copy_(v.detach())
        if isinstance(v, list):
            return [conv(x) for x in v]
        return v
    return [conv(a) for a in args]
