"""The built-in ops as Python functions: named arguments, defaults and docstrings from each
op's schema; a call goes straight to torch.ops.customop.<name> (autograd, torch.compile and
torch.export see the dispatcher op). Import through `import customop`, which loads the op
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


def _wrap(name: str):
    overload = getattr(torch.ops.customop, name).default

    def op(*args, **kwargs):
        return overload(*args, **kwargs)

    schema = overload._schema
    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__signature__ = _schema_py.signature(schema)
    op.__doc__ = _schema_py.docstring(name, schema)
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
