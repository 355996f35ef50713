"""torch's own output inside the checks, kept out of the user's: a warning torch issues while it
loads its forward-mode AD machinery, and FakeTensor's log of a fake kernel's error (which the
check reports itself). What the checked op itself warns or logs is left alone."""

from __future__ import annotations

import contextlib
import logging
import warnings

import torch

from . import _errors

_forward_ad_loaded = False


def preload_forward_ad() -> None:
    """Loads what torch's forward-mode AD loads on its first use, with warnings ignored.

    NB: the first make_dual (torch.func.jvp, jacfwd, hessian, torch.autograd.forward_ad) imports
    torch._decomp.decompositions_for_jvp, which calls torch.jit.script, which warns
    FutureWarning (deprecated). Under `-W error` or pytest's filterwarnings = error that warning
    is the exception of the first jvp, and the check blamed the op for it. It is torch's, not
    the op's: it is loaded here, once, with warnings ignored. Warnings are not ignored around
    the checks themselves (a catch_warnings there would hide the op's own warnings too, and
    would change the process-wide filters while the op runs): those still meet the caller's
    filters."""
    global _forward_ad_loaded
    if _forward_ad_loaded:
        return
    load = getattr(torch.autograd.forward_ad, "_maybe_load_decompositions", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if load is not None:
                load()
        except Exception:  # noqa: BLE001 -- the transform that needs it raises it again
            return
    _forward_ad_loaded = True


@contextlib.contextmanager
def fake_tensor_log_off():
    """FakeTensor logs the traceback of a fake kernel that raises (log.exception, ~20 lines of
    stderr) and re-raises the error; the checks catch that error and report it (or note that
    the op has no fake kernel), so the log is switched off while they run the op on fakes."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def no_fake_kernel(error: BaseException) -> bool:
    """Whether `error`, raised by an op under FakeTensorMode, says that the op has no fake
    kernel: customop's "no fake (Meta) kernel" (op_dispatch.cpp), a torch.library.custom_op
    without register_fake ("no fake impl"), FakeTensor's UnsupportedOperatorException for an op
    with no Meta kernel at all, or NotImplementedError."""
    from torch._subclasses.fake_tensor import UnsupportedOperatorException

    text = _errors.text(error)
    return (isinstance(error, (NotImplementedError, UnsupportedOperatorException))
            or "no fake (Meta) kernel" in text or "no fake impl" in text.lower())
