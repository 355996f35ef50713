"""The check that an op library meets the torch it was built against."""

from __future__ import annotations

import torch


def _release(version: str) -> str:
    """'2.15.0+cu132' -> '2.15.0' (the local part names the wheel's CUDA build)."""
    return version.split("+", 1)[0]


def mismatch_message(what: str, built_torch: str, built_cuda: str, running_torch: str,
                     running_cuda: str | None) -> str | None:
    """The error for `what` built against (built_torch, built_cuda) loaded into (running_torch,
    running_cuda); None when they match. CUDA versions are torch.version.cuda ('' or None for a
    CPU-only torch); the torch versions compare without their local part (+cu132)."""
    built_cuda = built_cuda or ""
    running_cuda = running_cuda or ""
    if _release(built_torch) == _release(running_torch) and built_cuda == running_cuda:
        return None
    def spell(version: str, cuda: str) -> str:
        return f"torch {version} ({'CUDA ' + cuda if cuda else 'CPU-only'})"
    return (
        f"{what} was built against {spell(built_torch, built_cuda)}, but this Python runs "
        f"{spell(running_torch, running_cuda)}. libtorch has no stable C++ ABI, so the library "
        f"cannot load into another torch. Rebuild it against this torch, e.g. "
        f"`pip install --no-build-isolation --force-reinstall --no-deps <customop source folder>`, "
        f"or install torch {_release(built_torch)}.")


def check_torch(built_torch: str, built_cuda: str, what: str) -> None:
    """Raises ImportError (see mismatch_message) unless the running torch is the built one."""
    message = mismatch_message(what, built_torch, built_cuda, torch.__version__, torch.version.cuda)
    if message is not None:
        raise ImportError(message)
