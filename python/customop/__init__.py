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
torch.ops.load_library with the same check, from the torch version the library recorded.
"""

from __future__ import annotations

import pathlib

import torch

from . import _build_info
from ._torch_check import check_torch, load_library, recorded_torch_version

__version__ = _build_info.VERSION
LIBRARY_DIR = pathlib.Path(__file__).resolve().parent / "lib"
OPS_LIBRARY = LIBRARY_DIR / "libcustomop_ops.so"

check_torch(_build_info.TORCH_VERSION, _build_info.TORCH_CUDA, what="customop " + __version__)
load_library(OPS_LIBRARY)  # ImportError naming the library if it cannot load

from . import gradcheck  # noqa: E402
from .ops import (  # noqa: E402  (after the library is loaded)
    BUILT_IN_OPS,
    bias_gelu,
    clamp_count,
    masked_softmax,
    max_along,
    rms_norm,
    weighted_sum,
)

__all__ = [
    "BUILT_IN_OPS",
    "gradcheck",
    "load_library",
    "recorded_torch_version",
    "bias_gelu",
    "clamp_count",
    "masked_softmax",
    "max_along",
    "rms_norm",
    "weighted_sum",
]
