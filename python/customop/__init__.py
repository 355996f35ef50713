"""customop for Python: the built-in ops of customop as Python functions with named arguments.

`import customop` checks that the torch it runs with is the torch this package was built
against (libtorch has no stable C++ ABI), loads the op library (`libcustomop_ops.so`, which
registers `torch.ops.customop.*` with the dispatcher), and exposes each op as a function whose
signature and docstring come from its schema:

    import torch, customop
    y = customop.rms_norm(torch.randn(4, 8), eps=1e-5)   # == torch.ops.customop.rms_norm(...)

Raises ImportError when the running torch differs from the build's (naming both versions and
how to rebuild), or when the op library cannot be loaded.

Your own op library (built with customop's CMake package): `customop.load_library(path)` is
torch.ops.load_library with the same check, from the torch version the library recorded, and
registers the DTensor sharding rules its ops declare (`op.sharding` in C++).
"""

from __future__ import annotations

import pathlib

import torch

from . import _build_info
from . import _sharding, _torch_check
from ._torch_check import check_torch, recorded_torch_version

__version__ = _build_info.VERSION
LIBRARY_DIR = pathlib.Path(__file__).resolve().parent / "lib"
OPS_LIBRARY = LIBRARY_DIR / "libcustomop_ops.so"

check_torch(_build_info.TORCH_VERSION, _build_info.TORCH_CUDA, what="customop " + __version__)
_torch_check.load_library(OPS_LIBRARY)  # ImportError naming the library if it cannot load
_sharding.install()  # the ops' sharding rules, with DTensor once torch.distributed.tensor loads


def load_library(path) -> None:
    """Loads an op library built with customop's CMake package (torch.ops.load_library) and
    registers the sharding rules its ops declare with DTensor.

    Raises ImportError, without loading it, when the library recorded another torch version
    than this Python runs (naming the library, both versions and how to rebuild), or when the
    loader fails (its message kept)."""
    _torch_check.load_library(path)
    _sharding.loaded_libraries.append(str(path))
    _sharding.register_declared_rules()


from . import cpu_cache, gradcheck  # noqa: E402
from .ops import (  # noqa: E402  (after the library is loaded)
    BUILT_IN_OPS,
    bias_gelu,
    bias_gelu_,
    bias_gelu_backward,
    clamp_count,
    clamp_count_backward,
    fused_add_rms_norm_,
    masked_softmax,
    masked_softmax_backward,
    max_along,
    max_along_backward,
    paged_kv_write,
    rms_norm,
    rms_norm_,
    rms_norm_backward,
    weighted_sum,
    weighted_sum_backward,
)

__all__ = [
    "BUILT_IN_OPS",
    "cpu_cache",
    "gradcheck",
    "load_library",
    "recorded_torch_version",
    "bias_gelu",
    "bias_gelu_",
    "bias_gelu_backward",
    "clamp_count",
    "clamp_count_backward",
    "fused_add_rms_norm_",
    "masked_softmax",
    "masked_softmax_backward",
    "max_along",
    "max_along_backward",
    "paged_kv_write",
    "rms_norm",
    "rms_norm_",
    "rms_norm_backward",
    "weighted_sum",
    "weighted_sum_backward",
]
