"""The check that an op library meets the torch it was built against."""

from __future__ import annotations

import struct

import torch

_SECTION = b".customop_torch"


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


def recorded_torch_version(path) -> str | None:
    """The torch version recorded in the ELF file `path` (the .customop_torch section that every
    library linking customop::customop carries, see plugin/src/torch_version_stamp.cpp), or
    None when it has none. Raises OSError when the file cannot be read."""
    with open(path, "rb") as f:
        data = f.read(64)
        # ELF magic, 64-bit, little-endian (System V gABI, "ELF Header").
        if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return None
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if shentsize < 0x28 or shstrndx >= shnum:
            return None

        def header(i):
            f.seek(shoff + i * shentsize)
            h = f.read(0x28)
            if len(h) < 0x28:
                return None
            (name,) = struct.unpack_from("<I", h, 0)
            offset, size = struct.unpack_from("<QQ", h, 0x18)
            return name, offset, size

        names = header(shstrndx)
        if names is None:
            return None
        for i in range(shnum):
            h = header(i)
            if h is None:
                return None
            f.seek(names[1] + h[0])
            if f.read(len(_SECTION) + 1) != _SECTION + b"\0":
                continue
            f.seek(h[1])
            stamp = f.read(min(h[2], 64)).split(b"\0", 1)[0].decode("ascii", "replace")
            return stamp[len("torch "):] if stamp.startswith("torch ") else None
    return None


def load_library(path) -> None:
    """torch.ops.load_library(path) for an op library built with customop, after checking the
    torch version it recorded: one built against another torch raises ImportError naming the
    library, both versions and how to rebuild, without loading it (instead of the loader's
    "undefined symbol")."""
    path = str(path)
    built = recorded_torch_version(path)
    if built is not None:
        message = mismatch_message(f"the op library {path}", built, torch.version.cuda or "",
                                   torch.__version__, torch.version.cuda)
        if message is not None:
            raise ImportError(message)
    try:
        torch.ops.load_library(path)
    except OSError as e:
        recorded = f"built against torch {built}" if built else "no torch version recorded"
        raise ImportError(f"cannot load the op library {path} ({recorded}; this Python runs "
                          f"torch {torch.__version__}): {e}") from e
