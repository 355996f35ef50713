"""Calling a dispatcher op on a harness sample: the sample's values are in schema order, and
keyword-only arguments must be passed by keyword (aten::add.Tensor's alpha)."""

from __future__ import annotations

import torch


def is_tensor_list(value) -> bool:
    """A non-empty list or tuple whose elements are all tensors (a Tensor[] argument)."""
    return (isinstance(value, (list, tuple)) and bool(value)
            and all(isinstance(v, torch.Tensor) for v in value))


def map_tensors(values: list, fn) -> list:
    """`values` with fn applied to each tensor, also inside Tensor[] arguments."""
    return [fn(v) if isinstance(v, torch.Tensor) else
            [fn(t) for t in v] if is_tensor_list(v) else v for v in values]


def split_call(op, values: list) -> tuple[list, dict]:
    """(positional, keywords) for calling `op` (an OpOverload) with `values` in schema order."""
    params = op._schema.arguments
    positional = [v for v, p in zip(values, params) if not p.kwarg_only]
    keywords = {p.name: v for v, p in zip(values, params) if p.kwarg_only}
    return positional, keywords


def written_positions(op) -> list[int]:
    """Schema positions of the arguments `op` declares it writes (Tensor(a!))."""
    return [i for i, p in enumerate(op._schema.arguments)
            if p.alias_info is not None and p.alias_info.is_write]


def randn_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Standard normal values of t's shape, dtype and device, from `generator` (a CPU one: drawn
    on the CPU in float64, then moved, so a seed gives the same values on every device)."""
    return torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.device, t.dtype)
