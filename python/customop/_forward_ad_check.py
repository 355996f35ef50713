"""The forward-mode AD check of customop.gradcheck.gradcheck(check_forward_ad=True): does the
function's forward-mode derivative (its JVP, through torch.autograd.forward_ad) equal its
reverse-mode one (its VJP, which the same gradcheck call judges against finite differences)?

Both are analytical, so they agree up to the rounding of two evaluations of the same
derivative; the tolerance is a relative one per (output, input) block of the Jacobian:
|J_fwd - J_rev| <= rtol * max |J_rev| of the block, rtol 1e-7 in float64, 1e-3 in float32 and
3e-2 in float16/bfloat16 (a few hundred to a few thousand units in the last place; a wrong JVP
is off by O(1) of the entry). The reverse-mode Jacobian is the reference because gradcheck has
verified it against finite differences in the same call: a JVP that matches a verified VJP is
verified too (J u = (u^T J^T)^T).

- slow mode: the whole Jacobian both ways: one JVP per input element (a basis tangent), one VJP
  per output element; a failure names the output, the input and the element [out, in].
- fast mode: for each (output, input) pair, one random tangent u and cotangent v (seeded):
  v . (J u) from the JVP against (v J) . u from the VJP; a failure names the output and the
  input (a random projection has no element to name).
A function whose forward-mode AD raises (an op without a JVP: customop's "forward-mode AD is
not supported ... op.impl_jvp", an autograd.Function without jvp) fails the check with that
message. Inputs that do not require grad get no tangent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD

from . import _callable, _errors
from ._op_call import randn_like as seeded_randn_like
from ._quiet import preload_forward_ad

_RTOL = {torch.float64: 1e-7, torch.float32: 1e-3}
_LOW_RTOL = 3e-2


def _rtol(dtype: torch.dtype) -> float:
    return _RTOL.get(dtype, _LOW_RTOL)


def _failure(headline: str, detail: str, output: int, input_: int) -> dict:
    return {"check": "forward_ad", "second_order": False, "output": output, "input": input_,
            "headline": headline, "detail": detail}


def _outputs(op: _callable.CallableOp, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return _callable.tensor_leaves(op.call(tensors))


def _jvp(op, primals, diff, tangents) -> list[torch.Tensor]:
    """The output tangents for `tangents` (one per differentiable input, by position)."""
    with fwAD.dual_level():
        args = list(primals)
        for i, t in zip(diff, tangents):
            args[i] = fwAD.make_dual(primals[i], t)
        outs = _outputs(op, args)
        result = []
        for o in outs:
            t = fwAD.unpack_dual(o).tangent
            result.append(torch.zeros_like(o) if t is None else t.detach().clone())
        return result


def _vjp(op, primals, diff, cotangents) -> list[torch.Tensor]:
    leaves = [p.detach().clone().requires_grad_(k in diff) for k, p in enumerate(primals)]
    outs = _outputs(op, leaves)
    total = sum((o * c).sum() for o, c in zip(outs, cotangents)
                if o.requires_grad and o.is_floating_point())
    if not isinstance(total, torch.Tensor) or not total.requires_grad:
        return [torch.zeros_like(primals[i]) for i in diff]
    grads = torch.autograd.grad(total, [leaves[i] for i in diff], allow_unused=True)
    return [torch.zeros_like(primals[i]) if g is None else g for i, g in zip(diff, grads)]


def check(func: Callable, inputs, top_names, fast_mode: bool, seed: int) -> list[dict]:
    """The failures of the forward-AD check of `func` at `inputs` (empty: passed)."""
    preload_forward_ad()  # torch's FutureWarning on its first make_dual (_quiet.py)
    op = _callable.CallableOp(func, inputs, 0, top_names)
    primals = [t.detach().clone() for t in op.tensors]  # private copies: func may write them
    diff = [k for k, t in enumerate(op.tensors)
            if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    names = op.arg_names
    try:
        outs = _outputs(op, primals)
        zero_tangents = [torch.zeros_like(primals[i]) for i in diff]
        _jvp(op, primals, diff, zero_tangents)
    except Exception as e:  # noqa: BLE001 -- the function's own error is the report
        return [_failure("forward-mode AD raised an error",
                         f"  {type(e).__name__}: {_errors.text(e)}", -1, -1)]
    gen = torch.Generator().manual_seed(seed)

    def randn_like(t):
        return seeded_randn_like(t, gen)

    failures = []
    for k, out in enumerate(outs):
        if not out.is_floating_point():
            continue  # an integer or boolean output has no derivative
        rtol = _rtol(out.dtype)
        for pos, i in enumerate(diff):
            zeros = [torch.zeros_like(primals[j]) for j in diff]
            if fast_mode:
                u = randn_like(primals[i])
                v = randn_like(out)
                tangents = list(zeros)
                tangents[pos] = u
                fwd = (_jvp(op, primals, diff, tangents)[k].double() * v.double()).sum()
                cot = [torch.zeros_like(o) for o in outs]
                cot[k] = v
                g = _vjp(op, primals, diff, cot)[pos]
                rev = (g.double() * u.double()).sum()
                scale = (g.double().abs() * u.double().abs()).sum()
                if not torch.isclose(fwd, rev, rtol=0, atol=rtol * float(scale) + 1e-300):
                    failures.append(_failure(
                        f"forward_ad: the JVP of output {k} along a random tangent of input "
                        f"'{names[i]}' differs from the reverse-mode derivative",
                        f"  v . (J u): forward mode {float(fwd):.10g}, reverse mode "
                        f"{float(rev):.10g} (tolerance {rtol * float(scale):.3g}; seed {seed})",
                        k, i))
                continue
            n_in, n_out = primals[i].numel(), out.numel()
            fwd = torch.empty(n_out, n_in, dtype=torch.float64)
            for j in range(n_in):
                e = torch.zeros(n_in, dtype=primals[i].dtype)
                e[j] = 1
                tangents = list(zeros)
                tangents[pos] = e.reshape(primals[i].shape).to(primals[i].device)
                fwd[:, j] = _jvp(op, primals, diff, tangents)[k].reshape(-1).double().cpu()
            rev = torch.empty(n_out, n_in, dtype=torch.float64)
            for m in range(n_out):
                c = torch.zeros(n_out, dtype=out.dtype)
                c[m] = 1
                cot = [torch.zeros_like(o) for o in outs]
                cot[k] = c.reshape(out.shape).to(out.device)
                rev[m] = _vjp(op, primals, diff, cot)[pos].reshape(-1).double().cpu()
            if n_out == 0 or n_in == 0:
                continue
            tol = rtol * float(rev.abs().max())
            bad = (fwd - rev).abs() > tol
            if bool(bad.any()):
                m, j = (int(v) for v in bad.nonzero()[0])
                failures.append(_failure(
                    f"forward_ad: the JVP of output {k} with respect to input '{names[i]}' "
                    f"differs from the reverse-mode derivative at element [{m}, {j}] "
                    f"({int(bad.sum())} of {bad.numel()} entries)",
                    f"  forward mode {float(fwd[m, j]):.10g}, reverse mode "
                    f"{float(rev[m, j]):.10g} (tolerance {tol:.3g}: rtol {rtol:g} of the "
                    f"block's largest entry)", k, i))
    return failures
