"""torch.func transforms on the built-in ops, through customop's generated autograd kernel (a
backward Node per call, no torch::autograd::Function) and each op's JVP (impl_jvp).

Every transform is compared with a reference that does not use it on the op: grad and vjp with
torch.autograd.grad; jacrev and jacfwd with each other and with the Jacobian built row by row
from torch.autograd.grad; jvp with that Jacobian times the tangent; hessian through
jacfwd(jacrev) and jacrev(jacrev); vmap (every in_dims combination), vmap(grad), vmap(vjp)
and vmap(jvp) with a loop over the batch. float64 (float32 against it), eager and under
torch.compile. Every test runs with torch's vmap fallback switched off, so a transform that
reaches an op without its batching rule (op.vmap) fails instead of looping silently. Compiled
autograd runs the backward formulas opaquely in its graph.

Environment: CUSTOMOP_OPS_LIB (libcustomop_ops.so).
"""

import os
import pathlib

import pytest
import torch
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS_LIB = os.environ.get("CUSTOMOP_OPS_LIB") or str(
    ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so")
if not os.path.exists(OPS_LIB):
    if "CUSTOMOP_OPS_LIB" in os.environ:
        raise FileNotFoundError(f"CUSTOMOP_OPS_LIB={OPS_LIB} does not exist")
    pytest.skip(f"op library not built ({OPS_LIB}); set CUSTOMOP_OPS_LIB", allow_module_level=True)
torch.ops.load_library(OPS_LIB)
ops = torch.ops.customop
D = torch.float64


@pytest.fixture(autouse=True)
def _no_vmap_fallback():
    """torch's per-example vmap fallback off: the ops' own batching rules must serve."""
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=_gen(seed), dtype=D)


def _distinct(*shape, seed):
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=_gen(seed)).to(D) * 0.37 - 0.2 * n).reshape(shape)


def _away_from_bounds(*shape, seed):
    x = _randn(*shape, seed=seed)
    x = torch.where((x + 0.5).abs() < 0.1, x + 0.2, x)
    return torch.where((x - 0.7).abs() < 0.1, x + 0.2, x)


_MASK = torch.tensor([[True, True, False, True, True],
                      [True, False, True, True, False],
                      [True, True, True, True, True]])

# name -> (f taking the differentiable tensors and returning one tensor, the primals)
CASES = {
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6), (_randn(3, 5, seed=1), _randn(5, seed=2))),
    "bias_gelu": (lambda x, b: ops.bias_gelu(x, b), (_randn(3, 5, seed=3), _randn(5, seed=4))),
    "bias_gelu_tanh": (lambda x, b: ops.bias_gelu(x, b, "tanh"),
                       (_randn(3, 5, seed=5), _randn(5, seed=6))),
    "weighted_sum": (lambda a, b: ops.weighted_sum([a, b], [0.5, -1.25]),
                     (_randn(3, 5, seed=7), _randn(3, 5, seed=8))),
    "max_along": (lambda x: ops.max_along(x, 1)[0], (_distinct(3, 5, seed=9),)),
    "masked_softmax": (lambda x: ops.masked_softmax(x, _MASK, -1), (_randn(3, 5, seed=10),)),
    "softmax_no_mask": (lambda x: ops.masked_softmax(x, None, 0), (_randn(3, 5, seed=11),)),
    "clamp_count": (lambda x: ops.clamp_count(x, -0.5, 0.7)[0], (_away_from_bounds(3, 5, seed=12),)),
}
NAMES = list(CASES)


def _jacobian_rows(f, primals):
    """The Jacobian of f at primals, one reverse-mode row per output element (autograd.grad,
    no transform): a tuple with one [out.numel(), p.numel()] matrix per primal."""
    leaves = [p.detach().clone().requires_grad_() for p in primals]
    out = f(*leaves).reshape(-1)
    rows = [[] for _ in leaves]
    for k in range(out.numel()):
        gs = torch.autograd.grad(out[k], leaves, retain_graph=True, allow_unused=True)
        for i, g in enumerate(gs):
            rows[i].append(torch.zeros_like(leaves[i]).reshape(-1) if g is None else g.reshape(-1))
    return tuple(torch.stack(r) for r in rows)


def _flat(jac, out_numel, primal):
    return jac.reshape(out_numel, primal.numel())


@pytest.mark.parametrize("name", NAMES)
def test_grad_and_vjp_match_autograd(name):
    f, primals = CASES[name]
    cot = _randn(*f(*primals).shape, seed=99)
    leaves = [p.clone().requires_grad_() for p in primals]
    want = torch.autograd.grad((f(*leaves) * cot).sum(), leaves, allow_unused=True)
    got = grad(lambda *p: (f(*p) * cot).sum(), argnums=tuple(range(len(primals))))(*primals)
    _, pullback = vjp(f, *primals)
    for g, v, w in zip(got, pullback(cot), want):
        w = torch.zeros_like(g) if w is None else w
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(v, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_jacrev_jacfwd_and_jvp_match_the_reverse_mode_jacobian(name):
    f, primals = CASES[name]
    n_out = f(*primals).numel()
    want = _jacobian_rows(f, primals)
    argnums = tuple(range(len(primals)))
    for transform in (jacrev, jacfwd):
        got = transform(f, argnums=argnums)(*primals)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(_flat(g, n_out, primals[i]), w, rtol=1e-10, atol=1e-12,
                                       msg=lambda m: f"{transform.__name__} argument {i}: {m}")
    tangents = tuple(_randn(*p.shape, seed=50 + i) for i, p in enumerate(primals))
    _, out_tangent = jvp(f, primals, tangents)
    expect = sum(w @ t.reshape(-1) for w, t in zip(want, tangents))
    torch.testing.assert_close(out_tangent.reshape(-1), expect, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_hessian_forward_over_reverse_matches_reverse_over_reverse(name):
    f, primals = CASES[name]
    w = _randn(*f(*primals).shape, seed=77)
    loss = lambda x: (f(x, *primals[1:]) * w).sin().sum()
    torch.testing.assert_close(hessian(loss)(primals[0]), jacrev(jacrev(loss))(primals[0]),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_per_sample_grads_match_a_loop(name):
    """vmap(grad) over a batch of 3 perturbed copies of the first input (the others shared)."""
    f, primals = CASES[name]
    rest = primals[1:]
    batch = torch.stack([primals[0] + 0.01 * k * _randn(*primals[0].shape, seed=110 + k)
                         for k in range(3)])
    got = vmap(grad(lambda x: f(x, *rest).sin().sum()))(batch)
    for r in range(batch.shape[0]):
        leaf = batch[r].clone().requires_grad_()
        want = torch.autograd.grad(f(leaf, *rest).sin().sum(), leaf)[0]
        torch.testing.assert_close(got[r], want, rtol=1e-12, atol=1e-12)


def test_forward_ad_dual_tensor_gives_the_jvp():
    import torch.autograd.forward_ad as fwAD
    f, (x, w) = CASES["rms_norm"]
    t = _randn(3, 5, seed=5)
    with fwAD.dual_level():
        out = f(fwAD.make_dual(x, t), w)
        tangent = fwAD.unpack_dual(out).tangent
    want = _jacobian_rows(f, (x, w))[0] @ t.reshape(-1)
    torch.testing.assert_close(tangent.reshape(-1), want, rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore")
def test_compiled_autograd_matches_eager_and_reads_each_backwards_own_state():
    """torch._dynamo.compiled_autograd over customop's backward Nodes: the formula runs as an
    opaque call in the compiled graph (as a C++ autograd Function not marked traceable does),
    fed each backward's own saved tensors and Node. The second and third backwards hit the
    cached graph with other values and another eps (a non-tensor saved field), and must still
    give eager's grads. fullgraph=True is refused by dynamo at that call (a graph break), as
    for torch's own opaque C++ Functions."""
    import torch._dynamo
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    cases = [(lambda x, w, eps: ops.rms_norm(x, w, eps), CASES["rms_norm"][1]),
             (lambda x, eps: ops.masked_softmax(x * eps, _MASK, -1), CASES["masked_softmax"][1]),
             (lambda a, b, eps: ops.weighted_sum([a, b], [eps, -1.25]), CASES["weighted_sum"][1])]
    for fn, primals in cases:
        for k, eps in enumerate([1e-6, 0.5, 2.0]):
            got = []
            for compiled in (False, True):
                leaves = [(p + k).clone().requires_grad_() for p in primals]
                y = fn(*leaves, eps)
                assert y.grad_fn.name().startswith("customop::OpBackward<customop::")
                loss = (y.sin() * y).sum()
                if compiled:
                    compiler = torch.compile(backend="aot_eager")
                    with compiled_autograd._enable(compiler):
                        loss.backward()
                else:
                    loss.backward()
                got.append([leaf.grad for leaf in leaves])
            for e, c in zip(*got):
                torch.testing.assert_close(c, e, rtol=1e-12, atol=1e-12)
    # One capture per op: the later backwards reuse the cached graph.
    assert counters["compiled_autograd"]["captures"] == len(cases)
    torch._dynamo.reset()
    x = CASES["rms_norm"][1][0].clone().requires_grad_()
    y = ops.rms_norm(x, CASES["rms_norm"][1][1], 1e-6)
    with pytest.raises(Exception, match="run_non_traceable_cpp_in_eager"):
        with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
            y.sum().backward()


# The same functions in ATen ops, for the nested transforms (a wrong nested grad of the op would
# agree with itself across paths; it cannot agree with these).
REFERENCES = {
    "rms_norm": lambda x, w: x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * w,
    "bias_gelu": lambda x, b: torch.nn.functional.gelu(x + b),
    "bias_gelu_tanh": lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh"),
    "masked_softmax": lambda x: torch.softmax(x.masked_fill(~_MASK, float("-inf")), -1),
    "softmax_no_mask": lambda x: torch.softmax(x, 0),
    "weighted_sum": lambda a, b: 0.5 * a - 1.25 * b,
    "max_along": lambda x: x.max(1)[0],
    "clamp_count": lambda x: x.clamp(-0.5, 0.7),
}


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize("nesting", ["grad(grad)", "jacfwd(jacrev)", "jacrev(jacrev)"])
def test_nested_transforms_match_the_aten_composite(name, nesting):
    f, primals = CASES[name]
    ref = REFERENCES[name]
    w = _randn(*f(*primals).shape, seed=88)
    def scalar(fn):
        return lambda x: (fn(x, *primals[1:]) * w).sin().sum()
    if nesting == "grad(grad)":
        t = lambda fn: grad(lambda x: grad(scalar(fn))(x).pow(2).sum())
    elif nesting == "jacfwd(jacrev)":
        t = lambda fn: jacfwd(jacrev(scalar(fn)))
    else:
        t = lambda fn: jacrev(jacrev(scalar(fn)))
    torch.testing.assert_close(t(f)(primals[0]), t(ref)(primals[0]), rtol=1e-9, atol=1e-11)


def _loop(f, in_dims, args):
    """vmap's meaning, spelled out: f on each example, outputs stacked along dim 0."""
    size = next(a.shape[d] for a, d in zip(args, in_dims) if d is not None)
    outs = [f(*[a if d is None else a.select(d, b) for a, d in zip(args, in_dims)])
            for b in range(size)]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs))
    return torch.stack(outs)


def _batched(primals, in_dims, batch=4, seed=200):
    """Per-example primals with a batch dim of `batch` inserted at each in_dim."""
    out = []
    for k, (p, d) in enumerate(zip(primals, in_dims)):
        if d is None:
            out.append(p)
            continue
        stacked = torch.stack([p + 0.01 * b * _randn(*p.shape, seed=seed + k) for b in range(batch)])
        out.append(stacked.movedim(0, d))
    return out


def _in_dims_cases(primals):
    cases = []
    for combo in __import__("itertools").product(*[(None, 0, -1) if p.dim() else (None, 0)
                                                  for p in primals]):
        if any(d is not None for d in combo):
            cases.append(combo)
    return cases


@pytest.mark.parametrize("name", NAMES)
def test_vmap_matches_a_loop_over_every_in_dims(name):
    f, primals = CASES[name]
    full = lambda *a: f(*a)
    if name in ("max_along", "clamp_count"):  # both outputs: values and indices / count
        full = {"max_along": lambda x: ops.max_along(x, 1),
                "clamp_count": lambda x: ops.clamp_count(x, -0.5, 0.7)}[name]
    for in_dims in _in_dims_cases(primals):
        args = _batched(primals, in_dims)
        got = vmap(full, in_dims=in_dims)(*args)
        want = _loop(full, in_dims, args)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12,
                                       msg=lambda m: f"in_dims={in_dims}: {m}")


def test_vmap_masked_softmax_with_a_batched_mask_only():
    x = _randn(3, 5, seed=21)
    masks = torch.stack([_MASK, _MASK.flip(1), torch.ones_like(_MASK)])
    got = vmap(lambda m: ops.masked_softmax(x, m, -1))(masks)
    want = torch.stack([ops.masked_softmax(x, m, -1) for m in masks])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_vjp_and_jvp_match_a_loop(name):
    f, primals = CASES[name]
    batch = 3
    cots = torch.stack([_randn(*f(*primals).shape, seed=300 + b) for b in range(batch)])
    tans = [torch.stack([_randn(*p.shape, seed=400 + 10 * k + b) for b in range(batch)])
            for k, p in enumerate(primals)]
    got_vjp = vmap(lambda c: vjp(f, *primals)[1](c))(cots)
    got_jvp = vmap(lambda *t: jvp(f, primals, t)[1])(*tans)
    for b in range(batch):
        want_vjp = vjp(f, *primals)[1](cots[b])
        want_jvp = jvp(f, primals, tuple(t[b] for t in tans))[1]
        for g, w in zip(got_vjp, want_vjp):
            torch.testing.assert_close(g[b], w, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_jvp[b], want_jvp, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_forward_over_reverse_with_autograd_and_dual_tensors(name):
    """fwAD dual inputs that also require grad, then autograd.grad(create_graph=True): the
    grad's tangent reads the saved tensors' tangents (masked_softmax saves its output: the
    output's tangent must be set before it is saved)."""
    import torch.autograd.forward_ad as fwAD
    f, primals = CASES[name]
    ref = REFERENCES[name]
    tangent = _randn(*primals[0].shape, seed=61)
    got = []
    for fn in (f, ref):
        with fwAD.dual_level():
            x = fwAD.make_dual(primals[0].clone(), tangent).requires_grad_()
            y = fn(x, *primals[1:])
            (g,) = torch.autograd.grad(y.sin().sum(), x, create_graph=True)
            got.append(fwAD.unpack_dual(g).tangent.clone())
    torch.testing.assert_close(got[0], got[1], rtol=1e-10, atol=1e-12)


def test_inplace_variants_under_forward_ad():
    """rms_norm_ (differentiable through rms_norm) gives rms_norm's tangent; bias_gelu_ (not
    differentiable) refuses a tangent and writes nothing."""
    import torch.autograd.forward_ad as fwAD
    x, w = CASES["rms_norm"][1]
    tx, tw = _randn(3, 5, seed=71), _randn(5, seed=72)
    with fwAD.dual_level():
        want = fwAD.unpack_dual(ops.rms_norm(fwAD.make_dual(x, tx), fwAD.make_dual(w, tw), 1e-6))
        dual_x = fwAD.make_dual(x.clone(), tx)
        got = fwAD.unpack_dual(ops.rms_norm_(dual_x, fwAD.make_dual(w, tw), 1e-6))
        torch.testing.assert_close(got.primal, want.primal, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.tangent, want.tangent, rtol=1e-12, atol=1e-12)
        b = _randn(5, seed=73)
        target = fwAD.make_dual(x.clone(), tx)
        before = fwAD.unpack_dual(target).primal.clone()
        with pytest.raises(RuntimeError, match=r"customop::bias_gelu_: .* carries a forward-mode tangent"):
            ops.bias_gelu_(target, b)
        torch.testing.assert_close(fwAD.unpack_dual(target).primal, before, rtol=0, atol=0)
    out_t = jvp(lambda a: ops.rms_norm_(a.clone(), w, 1e-6), (x,), (tx,))[1]
    torch.testing.assert_close(out_t, jvp(lambda a: ops.rms_norm(a, w, 1e-6), (x,), (tx,))[1],
                               rtol=1e-12, atol=1e-12)


def test_inplace_variants_under_vmap_use_the_functional_rule():
    """rms_norm_ / bias_gelu_ under vmap (fallback off): the functional op's rule, then copy_
    into x; each example's x gets its own result. An unbatched x with a batched other argument
    is refused before anything is written."""
    xs = _randn(4, 3, 5, seed=81)
    w, b = _randn(5, seed=82), _randn(5, seed=83)
    for in_dims, args, variant, functional in [
            ((0, None), (xs, w), lambda a, v: ops.rms_norm_(a, v, 1e-6),
             lambda a, v: ops.rms_norm(a, v, 1e-6)),
            ((-1, None), (xs.movedim(0, -1), w), lambda a, v: ops.rms_norm_(a, v, 1e-6),
             lambda a, v: ops.rms_norm(a, v, 1e-6)),
            ((0, None), (xs, b), ops.bias_gelu_, ops.bias_gelu),
            ((0, 0), (xs, torch.stack([b, 2 * b, -b, b])), ops.bias_gelu_, ops.bias_gelu)]:
        target = args[0].clone()
        got = vmap(variant, in_dims=in_dims)(target, args[1])
        want = _loop(functional, in_dims, args)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        # written in place: the batched x itself holds the result
        torch.testing.assert_close(target.movedim(in_dims[0], 0), want, rtol=1e-12, atol=1e-12)
    x = _randn(3, 5, seed=84)
    before = x.clone()
    with pytest.raises(RuntimeError, match=r"customop::bias_gelu_: vmap: argument 'input' is "
                                           r"not batched.*nothing was written"):
        vmap(lambda bb: ops.bias_gelu_(x, bb))(torch.stack([b, b]))
    torch.testing.assert_close(x, before, rtol=0, atol=0)


F32 = CASES


@pytest.mark.parametrize("name", list(F32))
def test_float32_transforms_match_float64(name):
    """The same transforms in float32 agree with the float64 run to float32's rounding."""
    f, primals = F32[name]
    p32 = tuple(p.float() for p in primals)
    w = _randn(*f(*primals).shape, seed=91)
    s64 = lambda *p: (f(*p) * w).sin().sum()
    s32 = lambda *p: (f(*p) * w.float()).sin().sum()
    argnums = tuple(range(len(primals)))
    for got, want in zip(grad(s32, argnums=argnums)(*p32), grad(s64, argnums=argnums)(*primals)):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)
    for got, want in zip(jacfwd(s32, argnums=argnums)(*p32), jacfwd(s64, argnums=argnums)(*primals)):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)
    batch = torch.stack([primals[0] + 0.1 * k for k in range(3)])
    got = vmap(grad(lambda x: s32(x, *p32[1:])))(batch.float())
    want = vmap(grad(lambda x: s64(x, *primals[1:])))(batch)
    torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", NAMES)
def test_transforms_under_torch_compile_match_eager(name):
    """torch.compile of vmap(grad), jacrev and jvp (fullgraph, aot_eager) against eager."""
    import torch._dynamo
    torch._dynamo.reset()
    f, primals = CASES[name]
    w = _randn(*f(*primals).shape, seed=92)
    s = lambda x: (f(x, *primals[1:]) * w).sin().sum()
    batch = torch.stack([primals[0] + 0.1 * k for k in range(3)])
    tangent = _randn(*primals[0].shape, seed=93)
    for label, fn, args in [("vmap(grad)", vmap(grad(s)), (batch,)),
                            ("jacrev", jacrev(s), (primals[0],)),
                            ("jvp", lambda x, t: jvp(s, (x,), (t,))[1], (primals[0], tangent))]:
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-12, atol=1e-12,
                                   msg=lambda m: f"{label}: {m}")


def _run_example(name, *args):
    """Runs examples/transforms/<name>.py as a user would (its own process: it imports the
    customop package, which loads the op library itself); PYTHONPATH must hold customop."""
    import subprocess
    import sys
    path = ROOT / "examples" / "transforms" / f"{name}.py"
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_example_per_sample_grads():
    """examples/transforms/per_sample_grads.py: vmap(grad) through functional_call of a model
    built from the ops, against a loop of autograd.grad."""
    assert "per-sample gradients match the loop" in _run_example("per_sample_grads", "--batch", "16")


def test_example_forces():
    """examples/transforms/forces.py: forces = -grad(energy), trained on a force loss (double
    backward under vmap and grad), against the ATen model and finite differences."""
    assert "all checks passed" in _run_example("forces", "--steps", "30")


def test_ops_that_write_their_arguments_under_vmap():
    """fused_add_rms_norm_ and paged_kv_write (BatchRule::loop, fallback off): each example
    writes its own slice of the batched written arguments, as a loop of calls would. A written
    argument shared by the batch (a cache, a residual) is refused, and nothing is written."""
    g = torch.Generator().manual_seed(5)
    h, res, w = (torch.randn(3, 4, 16, generator=g), torch.randn(3, 4, 16, generator=g),
                 torch.randn(16, generator=g))
    got_h, got_res = h.clone(), res.clone()
    vmap(lambda a, b: (ops.fused_add_rms_norm_(a, b, w, 1e-6), a, b)[1:])(got_h, got_res)
    k, v = torch.randn(3, 5, 2, 8, generator=g), torch.randn(3, 5, 2, 8, generator=g)
    kc, vc = torch.zeros(3, 4, 4, 2, 8), torch.zeros(3, 4, 4, 2, 8)
    slots = torch.stack([torch.randperm(16, generator=g)[:5] for _ in range(3)])
    vmap(lambda *a: (ops.paged_kv_write(*a), a[2], a[3])[1:])(k, v, kc, vc, slots)
    for b in range(3):
        want_h, want_res = h[b].clone(), res[b].clone()
        ops.fused_add_rms_norm_(want_h, want_res, w, 1e-6)
        torch.testing.assert_close(got_h[b], want_h, rtol=0, atol=0)
        torch.testing.assert_close(got_res[b], want_res, rtol=0, atol=0)
        want_kc, want_vc = torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)
        ops.paged_kv_write(k[b], v[b], want_kc, want_vc, slots[b])
        torch.testing.assert_close(kc[b], want_kc, rtol=0, atol=0)
        torch.testing.assert_close(vc[b], want_vc, rtol=0, atol=0)
    shared_res, shared_kc = res[0].clone(), torch.zeros(4, 4, 2, 8)
    before_h = h.clone()
    with pytest.raises(RuntimeError, match=r"customop::fused_add_rms_norm_: vmap: argument "
                                           r"'residual' is written in place but not batched, "
                                           r"while argument 'input' is.*nothing was written"):
        vmap(lambda a: (ops.fused_add_rms_norm_(a, shared_res, w, 1e-6), a)[1])(h)
    torch.testing.assert_close(h, before_h, rtol=0, atol=0)
    torch.testing.assert_close(shared_res, res[0], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"customop::paged_kv_write: vmap: argument "
                                           r"'key_cache' is written in place but not batched"):
        vmap(lambda kk, vv, s: (ops.paged_kv_write(kk, vv, shared_kc, vc[0], s), kk)[1])(
            k, v, slots)
    assert shared_kc.abs().sum() == 0


def test_rows_rules_loop_where_one_call_would_mix_the_examples():
    """A dim argument outside the example's range (it would name the batch dim) and 0-d
    examples (the batch would become one row) run one call per example, so each gets the op's
    own error naming the user's values, never an answer computed across the batch."""
    x = _randn(4, 3, 5, seed=101)
    for call, message in [
            (lambda t: ops.max_along(t, -3, False), r"max_along: dim must be in \[-2, 1\] for a "
                                                    r"2-d input, but got -3"),
            (lambda t: ops.masked_softmax(t, None, -3), r"masked_softmax: dim must be in \[-2, 1\]"),
            (lambda t: ops.max_along(t, 2, False), r"but got 2")]:
        with pytest.raises((RuntimeError, ValueError), match=message):
            vmap(call)(x)
    xs, w = _randn(3, seed=102), torch.ones(3, dtype=D)
    for call in (lambda t: ops.rms_norm(t, w, 0.0), lambda t: ops.bias_gelu(t, w, "none")):
        with pytest.raises((RuntimeError, ValueError),
                           match=r"at least 1 dim\), but got a 0-d tensor"):
            vmap(call)(xs)
    # In range, negative dims still take the one-call path and agree with the loop.
    got = vmap(lambda t: ops.max_along(t, -1, False))(x)[0]
    torch.testing.assert_close(got, x.max(-1).values, rtol=0, atol=0)


def test_writing_ops_under_vmap_refuse_a_batch_that_shares_memory_and_name_partial_writes():
    w = torch.ones(5, dtype=D)
    base, res = _randn(1, 5, seed=103), _randn(3, 5, seed=104)
    before = res.clone()
    with pytest.raises(RuntimeError, match=r"argument 'input' is written in place, but several of "
                                           r"its elements share one memory location across the "
                                           r"batch.*nothing was written"):
        vmap(lambda i, r: (ops.fused_add_rms_norm_(i, r, w, 1e-6), r)[1])(base.expand(3, 5), res)
    torch.testing.assert_close(res, before, rtol=0, atol=0)
    key, val = _randn(2, 3, 2, 4, seed=105), _randn(2, 3, 2, 4, seed=106)
    kc, vc = torch.zeros(2, 3, 2, 2, 4, dtype=D), torch.zeros(2, 3, 2, 2, 4, dtype=D)
    slots = torch.tensor([[0, 1, 2], [999, 1, 2]])
    with pytest.raises(RuntimeError, match=r"this error is example 1's of 2, and example 0 had "
                                           r"already written its slices"):
        vmap(lambda *a: (ops.paged_kv_write(*a), a[2])[1])(key, val, kc, vc, slots)


# vmap over a batch of size 0: jacrev of a function whose output has no elements vmaps the VJP
# over those 0 elements, so the backward ops (BatchRule::loop) see a batch of size 0, where no
# example exists to call them on. They answer with empty batches of the right shapes (the op run
# once on the Meta device), so jacrev and hessian of an empty input give the empty Jacobian
# ATen's composites give. tests/core/batching_test.cpp covers the refusals (no shape function;
# a non-tensor return).

def _rms_norm_composite(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_jacrev_of_bias_gelu_on_an_empty_input(argnums):
    x, b = torch.empty(0, 3, dtype=D), torch.randn(3, dtype=D)
    ours = jacrev(lambda a, c: ops.bias_gelu(a, c), argnums=argnums)(x, b)
    theirs = jacrev(lambda a, c: torch.nn.functional.gelu(a + c), argnums=argnums)(x, b)
    for o, t in zip(*(v if isinstance(v, tuple) else (v,) for v in (ours, theirs))):
        assert o.shape == t.shape and o.dtype == t.dtype and o.device == t.device


def test_jacrev_and_hessian_of_rms_norm_on_an_empty_input():
    x, w = torch.empty(0, 4, dtype=D), torch.randn(4, dtype=D)
    ours = jacrev(lambda a, c: ops.rms_norm(a, c, 1e-6), argnums=(0, 1))(x, w)
    theirs = jacrev(_rms_norm_composite, argnums=(0, 1))(x, w)
    assert [o.shape for o in ours] == [t.shape for t in theirs] == [(0, 4, 0, 4), (0, 4, 4)]
    h = hessian(lambda a: ops.rms_norm(a, w, 1e-6).sum())(x)
    assert h.shape == (0, 4, 0, 4)


def test_vmap_of_a_backward_op_over_zero_examples():
    # bias_gelu_backward (BatchRule::loop: grad_bias sums the rows) over a batch of 0 grads.
    g, x, b = torch.empty(0, 2, 3, dtype=D), torch.randn(2, 3, dtype=D), torch.randn(3, dtype=D)
    out = vmap(lambda gg: ops.bias_gelu_backward(gg, x, b), in_dims=0)(g)
    # Each example's returns (grad_input [2, 3], grad_bias [3], as one call shows), batched by 0.
    one = ops.bias_gelu_backward(torch.randn(2, 3, dtype=D), x, b)
    assert [t.shape for t in out] == [(0, *t.shape) for t in one]
    assert all(t.dtype == D for t in out)


def test_a_written_argument_comes_back_unwritten_over_zero_examples():
    # fused_add_rms_norm_ (BatchRule::loop, writes input and residual, returns ()) over 0
    # examples.
    h, r = torch.empty(0, 2, 4, dtype=D), torch.empty(0, 2, 4, dtype=D)
    w = torch.randn(4, dtype=D)

    def step(a, c):
        ops.fused_add_rms_norm_(a, c, w, 1e-6)
        return a, c

    out = vmap(step)(h, r)
    assert [t.shape for t in out] == [(0, 2, 4), (0, 2, 4)]


def test_clamp_count_over_zero_examples_gives_each_return_batched_empty():
    # clamp_count (BatchRule::loop: its count is a total over one example's input).
    x = torch.empty(0, 5, dtype=D)
    out = vmap(lambda a: ops.clamp_count(a, -0.5, 0.5))(x)
    one = ops.clamp_count(torch.randn(5, dtype=D), -0.5, 0.5)
    assert [(t.shape, t.dtype) for t in out] == [((0, *t.shape), t.dtype) for t in one]
