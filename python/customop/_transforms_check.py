"""The torch.func transforms check of customop.gradcheck.check (check_transforms, on by
default; Python only: torch.func has no C++ API). It runs on the sample's differentiable
inputs (the floating tensors that require grad), with torch's per-example vmap fallback
switched off, so an op without a batching rule (or with a wrong one) cannot hide behind it:

- vjp: torch.func.vjp against torch.autograd.grad (the VJP the C++ checks verify against
  finite differences), for a random cotangent;
- jvp: torch.func.jvp along a random tangent against that VJP: v . (J u) = (v J) . u;
- jacrev against jacfwd (the whole Jacobian, reverse and forward mode; up to 2^20 entries);
- hessian: jacfwd(jacrev(s)) against jacrev(jacrev(s)) for s = sum(sin(out) * w), w random, with
  respect to the first differentiable input;
- vmap: a batch of 3 perturbed copies, batched along dim 0 and along the last dim, each
  differentiable input alone and all together (the others unbatched), against a loop over the
  batch; vmap(vjp) and vmap(jvp) against a loop.

Tolerance: both sides are analytical, so they differ by rounding only: relative to the largest
entry compared, 1e-7 in float64 and 1e-3 in float32 (a wrong formula or rule is off by O(1));
vmap against the loop: the same kernel on the same values, 1e-10 (float64) / 1e-5 (float32)
relative, since a batched kernel may sum in another order. float16/bfloat16 samples and ops
that write their arguments are not checked (not_run says why). What the op does not support is
a note, not a failure: no JVP (forward-mode AD raises that it has none: jvp, jacfwd, hessian
and vmap(jvp) are skipped) and no batching rule ("Batching rule not implemented": the vmap
steps are skipped); report["transforms"]["unsupported"] lists them. Any other error a
transform raises fails the check with its message.
"""

from __future__ import annotations

import torch
from torch.func import hessian, jacfwd, jacrev, jvp, vjp, vmap

from . import _errors
from ._op_call import map_tensors, randn_like, split_call, written_positions
from ._quiet import preload_forward_ad

_RTOL = {torch.float64: 1e-7, torch.float32: 1e-3}
_SAME_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}
# Jacobians (and the Hessian of the first input) up to this many entries are built whole.
_MAX_JACOBIAN = 1 << 20


class _Mismatch(Exception):
    pass


def _no_jvp(e: Exception) -> bool:
    m = _errors.text(e)
    return isinstance(e, (NotImplementedError, RuntimeError)) and (
        "has no JVP formula" in m or "does not support forward" in m
        or "forward AD" in m and "not implemented" in m.lower())


def _no_func_support(e: Exception) -> bool:
    """The op's autograd cannot run under torch.func at all (an autograd.Function without
    setup_context, a C++ torch::autograd::Function)."""
    m = _errors.text(e)
    return "functorch transforms" in m or "torch.func transforms" in m or (
        "setup_context" in m) or "checkSupportsCppAutogradFunction" in m


def _no_batch_rule(e: Exception) -> bool:
    m = _errors.text(e)
    return isinstance(e, RuntimeError) and ("Batching rule not implemented" in m
                                            or "hit the vmap fallback" in m)


def _close(what: str, got, want, rtol: float) -> None:
    got_l = got if isinstance(got, (tuple, list)) else (got,)
    want_l = want if isinstance(want, (tuple, list)) else (want,)
    if len(got_l) != len(want_l):
        raise _Mismatch(f"{what}: {len(got_l)} results, expected {len(want_l)}")
    for k, (g, w) in enumerate(zip(got_l, want_l)):
        if isinstance(g, (tuple, list)):
            _close(f"{what}[{k}]", g, w, rtol)
            continue
        if g.shape != w.shape:
            raise _Mismatch(f"{what}[{k}]: shape {tuple(g.shape)}, expected {tuple(w.shape)}")
        if g.numel() == 0:
            continue
        gd, wd = g.double(), w.double()
        scale = float(wd.abs().max())
        err = (gd - wd).abs()
        if float(err.max()) > rtol * scale + 1e-300:
            idx = tuple(int(i) for i in torch.nonzero(err == err.max())[0])
            raise _Mismatch(f"{what}[{k}]: element {list(idx)}: {float(gd[idx]):.10g}, expected "
                            f"{float(wd[idx]):.10g} (tolerance {rtol * scale:.3g})")


def check_transforms(op, args: list, arg_names: list[str]) -> dict:
    """Runs the transforms on `op` (an OpOverload) at `args` (one value per schema argument).
    Returns {"passed", "transforms": [names run]} and on failure "transform" and "error"; or
    {"passed": True, "not_run": reason}. Never raises for what the op does."""
    if written_positions(op):
        return {"passed": True, "not_run": "the op writes its arguments"}
    tensors = [t for t in map_tensors(args, lambda t: t) if isinstance(t, torch.Tensor)] + [
        t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
    if any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors):
        # NB: torch.func does not transform tensor subclasses (DTensor, __torch_dispatch__
        # wrappers): on torch 2.15 a hessian over one crashed the process.
        return {"passed": True, "not_run": "a tensor subclass among the inputs (torch.func "
                "transforms plain tensors)"}
    # Private copies: an op that writes an argument it does not declare (which the mutation
    # audit reports) must not change the caller's sample here either.
    args = map_tensors(args, lambda t: t.detach().clone().requires_grad_(t.requires_grad))
    # The differentiable inputs, as (argument, element of a Tensor[] or None).
    diff: list[tuple[int, int | None]] = []
    for k, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.requires_grad and a.is_floating_point():
                diff.append((k, None))
        elif isinstance(a, (list, tuple)):
            diff.extend((k, j) for j, t in enumerate(a) if isinstance(t, torch.Tensor)
                        and t.requires_grad and t.is_floating_point())
    if not diff:
        return {"passed": True, "not_run": "no input requires grad"}

    def at(k, j):
        return args[k] if j is None else args[k][j]

    dtype = at(*diff[0]).dtype
    if dtype not in _RTOL:
        return {"passed": True, "not_run": f"{dtype} (float64 and float32 only)"}
    rtol, same = _RTOL[dtype], _SAME_RTOL[dtype]
    primals = tuple(at(k, j).detach() for k, j in diff)
    names = [arg_names[k] if j is None else f"{arg_names[k]}[{j}]" for k, j in diff]

    def f(*xs):
        call = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
        for (k, j), x in zip(diff, xs):
            if j is None:
                call[k] = x
            else:
                call[k][j] = x
        positional, keywords = split_call(op, call)
        out = op(*positional, **keywords)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

    gen = torch.Generator().manual_seed(0)

    def rand_like(t):
        return randn_like(t, gen)

    ran: list[str] = []
    unsupported: list[str] = []
    step = "forward"
    preload_forward_ad()  # torch's FutureWarning on its first jvp is not the op's (_quiet.py)
    previous = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        outs = f(*primals)
        if not outs:
            return {"passed": True, "not_run": "no floating output"}
        cot = tuple(rand_like(o) for o in outs)
        tan = tuple(rand_like(p) for p in primals)

        step = "vjp"
        leaves = [p.clone().requires_grad_() for p in primals]
        want = torch.autograd.grad(f(*leaves), leaves, cot, allow_unused=True)
        want = tuple(torch.zeros_like(p) if g is None else g for p, g in zip(primals, want))
        try:
            got_vjp = vjp(f, *primals)[1](cot)
        except Exception as e:  # noqa: BLE001 -- classified here
            if not _no_func_support(e):
                raise
            return {"passed": True, "not_run": "the op's autograd does not run under torch.func "
                    f"({_errors.text(e).splitlines()[0][:200]})"}
        _close("vjp", got_vjp, want, rtol)
        ran.append(step)

        has_jvp = True
        try:
            jt = jvp(f, primals, tan)[1]
        except Exception as e:  # noqa: BLE001 -- classified below
            if not _no_jvp(e):
                step = "jvp"
                raise
            has_jvp = False
            unsupported.append("forward-mode AD: the op has no JVP (op.impl_jvp); jvp, "
                               "jacfwd, hessian and vmap(jvp) not checked")
        if has_jvp:
            step = "jvp"
            fwd = sum(float((t.double() * c.double()).sum()) for t, c in zip(jt, cot))
            rev = sum(float((g.double() * u.double()).sum()) for g, u in zip(want, tan))
            scale = sum(float((g.double().abs() * u.double().abs()).sum())
                        for g, u in zip(want, tan))
            if abs(fwd - rev) > rtol * scale + 1e-300:
                raise _Mismatch(f"jvp: v . (J u) = {fwd:.10g} but (v J) . u = {rev:.10g} "
                                f"(tolerance {rtol * scale:.3g})")
            ran.append(step)

        argnums = tuple(range(len(primals)))
        n_in = sum(p.numel() for p in primals)
        n_out = sum(o.numel() for o in outs)
        small = n_in * n_out <= _MAX_JACOBIAN and primals[0].numel() ** 2 <= _MAX_JACOBIAN
        if not small:
            unsupported.append(f"jacrev, jacfwd and hessian skipped: the Jacobian would have "
                               f"{n_in * n_out} entries (limit {_MAX_JACOBIAN})")
        step = "jacrev"
        jac_rev = jacrev(f, argnums=argnums)(*primals) if small else None
        if small:
            ran.append(step)
        if has_jvp and small:
            step = "jacrev vs jacfwd"
            _close("jacfwd", jacfwd(f, argnums=argnums)(*primals), jac_rev, rtol)
            ran.append(step)

            step = "hessian"
            w = tuple(rand_like(o) for o in outs)

            def s(x0):
                # NB: torch.stack(...).sum(), not Python's sum(): that starts from the int 0,
                # and 0 + tensor fails under jacfwd's vmap over an empty input's basis (batch
                # size 0: "select(): index 0 out of range").
                return torch.stack([(o.sin() * wk).sum()
                                    for o, wk in zip(f(x0, *primals[1:]), w)]).sum()

            _close("hessian (jacfwd(jacrev))", hessian(s)(primals[0]),
                   jacrev(jacrev(s))(primals[0]), rtol)
            ran.append(step)

        step = "vmap"
        batch = 3
        has_rule = True
        try:
            for pos in [*([k] for k in range(len(primals))), list(range(len(primals)))]:
                for dim in (0, -1):
                    if any(primals[k].dim() == 0 and dim == -1 for k in pos):
                        continue
                    stacked = [torch.stack([p + 0.01 * b * rand_like(p) for b in range(batch)],
                                           dim) if k in pos else p
                               for k, p in enumerate(primals)]
                    in_dims = tuple(dim if k in pos else None for k in range(len(primals)))
                    got = vmap(f, in_dims=in_dims)(*stacked)
                    loop = [f(*[x.select(d, b) if d is not None else x
                                for x, d in zip(stacked, in_dims)]) for b in range(batch)]
                    want_v = tuple(torch.stack(o) for o in zip(*loop))
                    which = ", ".join(f"'{names[k]}'" for k in pos)
                    _close(f"vmap over {which} (in_dim {dim})", got, want_v, same)
        except RuntimeError as e:
            if not _no_batch_rule(e):
                raise
            has_rule = False
            unsupported.append("vmap: the op has no batching rule (op.vmap); vmap, vmap(vjp) "
                               "and vmap(jvp) not checked")
        if has_rule:
            ran.append(step)
            step = "vmap(vjp)" + (", vmap(jvp)" if has_jvp else "")
            cots = tuple(torch.stack([rand_like(o) for _ in range(batch)]) for o in outs)
            tans = tuple(torch.stack([rand_like(p) for _ in range(batch)]) for p in primals)
            got_vjp = vmap(lambda *c: vjp(f, *primals)[1](c))(*cots)
            got_jvp = vmap(lambda *t: jvp(f, primals, t)[1])(*tans) if has_jvp else None
            for b in range(batch):
                _close(f"vmap(vjp) example {b}", tuple(g[b] for g in got_vjp),
                       vjp(f, *primals)[1](tuple(c[b] for c in cots)), rtol)
                if has_jvp:
                    _close(f"vmap(jvp) example {b}", tuple(g[b] for g in got_jvp),
                           jvp(f, primals, tuple(t[b] for t in tans))[1], rtol)
            ran.append(step)
    except _Mismatch as e:
        return {"passed": False, "transforms": ran, "unsupported": unsupported, "transform": step,
                "error": _errors.text(e)}
    except Exception as e:  # noqa: BLE001 -- the op's (or torch's) error is the report
        return {"passed": False, "transforms": ran, "unsupported": unsupported, "transform": step,
                "error": f"raised {type(e).__name__}: {_errors.text(e)}".split("\n")[0][:600]}
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(previous)
    return {"passed": True, "transforms": ran, "unsupported": unsupported}


def format_transforms(name: str, result: dict) -> tuple[str, str]:
    return (f"transforms: {name} fails torch.func's {result['transform']}",
            f"  {result['error']}\n  passed before it: {', '.join(result['transforms']) or 'none'}"
            f" (vmap fallback off: the op's batching rule, op.vmap, must serve)")

