"""The batched-gradient checks of customop.gradcheck.gradcheck(check_batched_grad=True,
check_batched_forward_grad=True): does the function's derivative come out right when the
function itself runs under torch.func.vmap?

torch's own check_batched_grad vmaps only the backward (autograd.grad with is_grads_batched):
the function's forward runs unbatched, so a batching rule of an op inside it (FuncTorchBatched,
customop's op.vmap) never runs, and a wrong rule passes. Here the whole derivative is
vmapped, the forward included, over a batch of 3 perturbed copies of the differentiable
inputs and 3 random cotangents (tangents), and each example is compared with the same
derivative computed without vmap:

- batched grad: vmap(x, v -> vjp(f, x)(v)) against a loop of torch.autograd.grad;
- batched forward grad: vmap(x, u -> jvp(f, x, u)) against a loop of torch.func.jvp;
- in both, the vmapped outputs against f per example (a rule can give wrong values with right
  derivatives: a linear op whose batched call mixes the examples).

Tolerance: the same derivative on the same values, so rounding of a reordered computation only:
relative to the largest entry compared, 1e-10 in float64, 1e-5 in float32, 1e-2 in
float16/bfloat16. torch's vmap fallback stays on (a function whose ops have no batching rule
is still batched correctly, slowly). A transform that raises fails the check with the message.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import jvp, vjp, vmap

from . import _callable, _errors
from ._op_call import randn_like
from ._quiet import preload_forward_ad

_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}
_LOW_RTOL = 1e-2
_BATCH = 3


def _failure(kind: str, headline: str, detail: str, input_: int) -> dict:
    return {"check": kind, "second_order": False, "output": -1, "input": input_,
            "headline": headline, "detail": detail}


def _compare(kind: str, what: str, got, want, names, rtol_of) -> list[dict]:
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return [_failure(kind, f"{kind}: {what} {names[k]} has shape {tuple(g.shape)} under "
                             f"vmap, {tuple(w.shape)} without", "", k)]
        if w.numel() == 0:
            continue
        rtol = rtol_of(w.dtype)
        err = (g.double() - w.double()).abs()
        tol = rtol * float(w.double().abs().max())
        if float(err.max()) > tol:
            idx = [int(i) for i in torch.nonzero(err == err.max())[0]]
            return [_failure(kind, f"{kind}: {what} {names[k]} differs under vmap at element "
                             f"{idx} (example {idx[0]} of the batch)",
                             f"  vmapped {float(g[tuple(idx)]):.10g}, per example "
                             f"{float(w[tuple(idx)]):.10g} (tolerance {tol:.3g})", k)]
    return []


def check(func: Callable, inputs, top_names, seed: int, forward: bool) -> list[dict]:
    """The failures of the batched-grad (forward=False) or batched-forward-grad (forward=True)
    check of `func` at `inputs` (empty: passed)."""
    if forward:
        preload_forward_ad()  # torch's FutureWarning on its first jvp (_quiet.py)
    kind = "batched_forward_grad" if forward else "batched_grad"
    op = _callable.CallableOp(func, inputs, 0, top_names)
    primals = [t.detach().clone() for t in op.tensors]  # private copies: func may write them
    diff = [k for k, t in enumerate(op.tensors) if t.requires_grad and t.is_floating_point()]
    names = [f"'{op.arg_names[k]}'" for k in diff]
    gen = torch.Generator().manual_seed(seed)

    def rand_like(t):
        return randn_like(t, gen)

    def f(*xs):
        args = list(primals)
        for k, x in zip(diff, xs):
            args[k] = x
        return tuple(o for o in _callable.tensor_leaves(op.call(args)) if o.is_floating_point())

    def rtol_of(dtype):
        return _RTOL.get(dtype, _LOW_RTOL)

    xs = [torch.stack([primals[k] + 0.01 * b * rand_like(primals[k]) for b in range(_BATCH)])
          for k in diff]
    try:
        outs = f(*[x[0] for x in xs])
        out_names = [f"output {k}" for k in range(len(outs))]
        # The vmapped outputs too: a rule that gives wrong values with right derivatives (a
        # linear op whose batched call mixes the examples) is wrong all the same.
        want_out = [torch.stack(o) for o in zip(*[f(*[x[b] for x in xs])
                                                  for b in range(_BATCH)])]
        if forward:
            dirs = [torch.stack([rand_like(primals[k]) for _ in range(_BATCH)]) for k in diff]
            got_out, got = vmap(lambda x, u: jvp(f, tuple(x), tuple(u)))(xs, dirs)
            want = [torch.stack(o) for o in zip(*[
                jvp(f, tuple(x[b] for x in xs), tuple(u[b] for u in dirs))[1]
                for b in range(_BATCH)])]
            return (_compare(kind, "the value of", got_out, want_out, out_names, rtol_of)
                    or _compare(kind, "the tangent of", got, want, out_names, rtol_of))
        cots = [torch.stack([rand_like(o) for _ in range(_BATCH)]) for o in outs]

        def value_and_grad(x, v):
            value, pullback = vjp(f, *x)
            return value, pullback(tuple(v))

        got_out, got = vmap(value_and_grad)(xs, cots)
        per_example = []
        for b in range(_BATCH):
            leaves = [x[b].clone().requires_grad_() for x in xs]
            grads = torch.autograd.grad(f(*leaves), leaves, [c[b] for c in cots],
                                        allow_unused=True)
            per_example.append([torch.zeros_like(lv) if g is None else g
                                for lv, g in zip(leaves, grads)])
        want = [torch.stack(g) for g in zip(*per_example)]
        return (_compare(kind, "the value of", got_out, want_out, out_names, rtol_of)
                or _compare(kind, "the grad of", got, want, names, rtol_of))
    except Exception as e:  # noqa: BLE001 -- the function's (or a rule's) error is the report
        first_line = (_errors.text(e).splitlines() or [""])[0]
        if "setup_context" in _errors.text(e):
            raise NotImplementedError(
                f"customop.gradcheck.gradcheck({_callable.function_name(func)}): {kind} runs "
                f"torch.func.vmap over the function, which cannot run its autograd.Function "
                f"(it needs a setup_context staticmethod): {first_line}") from e
        return [_failure(kind, f"{kind}: the function raised under vmap",
                         f"  {type(e).__name__}: {first_line[:400]}", -1)]
