"""The fused bias + leaky ReLU (customop registration) under torch.func, torch's vmap fallback
off: its JVPs and general batching rules (fused_leaky_relu_transforms.cpp) on the forward op
and on its backward op, against the same function in ATen ops. The by-hand registration (a
torch::autograd::Function) has no forward-mode formula at all: shown refused.

Environment: FLRELU_OPS_LIB (libflrelu_ops.so).
"""

import os

import pytest
import torch
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

LIB = os.environ.get("FLRELU_OPS_LIB", "")
if not os.path.exists(LIB):
    pytest.skip(f"FLRELU_OPS_LIB={LIB!r} does not exist", allow_module_level=True)
torch.ops.load_library(LIB)
op = torch.ops.flrelu.fused_bias_leaky_relu.default
SLOPE, SCALE = 0.2, 2.0 ** 0.5
D = torch.float64


def reference(x, bias):
    b = bias.view(1, -1, *([1] * (x.dim() - 2)))
    return torch.nn.functional.leaky_relu(x + b, SLOPE) * SCALE


def fused(x, bias):
    return op(x, bias, SLOPE, SCALE)


@pytest.fixture(autouse=True)
def _no_vmap_fallback():
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


def _inputs(shape=(2, 3, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=D)
    x = x + 0.2 * x.sign()  # away from the kink at x + bias = 0
    return x, 0.05 * torch.randn(shape[1], generator=g, dtype=D)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_jvp_jacfwd_and_jacrev_match_aten():
    x, b = _inputs()
    tx, tb = _inputs(seed=1)
    _close(jvp(fused, (x, b), (tx, tb))[1], jvp(reference, (x, b), (tx, tb))[1])
    for t in (jacfwd, jacrev):
        for got, want in zip(t(fused, argnums=(0, 1))(x, b), t(reference, argnums=(0, 1))(x, b)):
            _close(got, want)


def test_hessian_differentiates_the_backward_op_forward():
    """jacfwd(jacrev): the backward op runs under forward AD (its JVP) and vmap (its rule)."""
    x, b = _inputs()
    w = _inputs(seed=2)[0]
    s = lambda f: (lambda x_, b_: (f(x_, b_) * w).sin().sum())
    got = hessian(s(fused), argnums=(0, 1))(x, b)
    want = hessian(s(reference), argnums=(0, 1))(x, b)
    for gr, wr in zip(got, want):
        for g_, w_ in zip(gr, wr):
            _close(g_, w_)


@pytest.mark.parametrize("in_dims", [(0, None), (None, 0), (0, 0), (-1, None), (1, 0)])
def test_vmap_matches_a_loop(in_dims):
    xs = torch.stack([_inputs(seed=10 + k)[0] for k in range(3)])
    bs = torch.stack([_inputs(seed=20 + k)[1] for k in range(3)])
    x0, b0 = _inputs()
    args = [xs.movedim(0, in_dims[0]) if in_dims[0] is not None else x0,
            bs if in_dims[1] is not None else b0]
    got = vmap(fused, in_dims=in_dims)(*args)
    want = torch.stack([fused(xs[k] if in_dims[0] is not None else x0,
                              bs[k] if in_dims[1] is not None else b0) for k in range(3)])
    _close(got, want)


def test_per_sample_grads_batch_the_backward_op():
    """vmap(grad): the backward op runs batched through its own rule (grad_bias per example)."""
    xs = torch.stack([_inputs(seed=30 + k)[0] for k in range(4)])
    _, b = _inputs()
    got = vmap(grad(lambda x_, b_: fused(x_, b_).square().sum(), argnums=(0, 1)),
               in_dims=(0, None))(xs, b)
    want = vmap(grad(lambda x_, b_: reference(x_, b_).square().sum(), argnums=(0, 1)),
                in_dims=(0, None))(xs, b)
    for g_, w_ in zip(got, want):
        _close(g_, w_)
    # vjp with batched cotangents (jacrev's path) too.
    x, _ = _inputs()
    cots = torch.stack([_inputs(seed=40 + k)[0] for k in range(3)])
    _close(vmap(vjp(fused, x, b)[1])(cots)[1], vmap(vjp(reference, x, b)[1])(cots)[1])


def test_the_by_hand_function_refuses_forward_ad():
    by_hand = torch.ops.flrelu_by_hand.fused_bias_leaky_relu.default
    x, b = _inputs()
    with pytest.raises(Exception):
        jvp(lambda x_: by_hand(x_, b, SLOPE, SCALE), (x,), (x,))


@pytest.mark.filterwarnings("ignore")
def test_compiled_autograd_double_backward_through_the_backward_op():
    """Compiled autograd, double backward: the backward op's own formula gives no grad for
    `out`; the compiled graph gets zeros there and the eager grads come out."""
    from torch._dynamo import compiled_autograd
    torch._dynamo.reset()

    def run(compiled):
        x = torch.linspace(-1, 1, 12, dtype=D).reshape(3, 4, 1).requires_grad_()
        b = torch.linspace(-0.3, 0.3, 4, dtype=D).requires_grad_()

        def body():
            loss = (fused(x, b) ** 2).sum()
            gx, gb = torch.autograd.grad(loss, (x, b), create_graph=True)
            return torch.autograd.grad((gx ** 2).sum() + (gb ** 2).sum(), (x, b))

        if not compiled:
            return body()
        with compiled_autograd._enable(torch.compile(backend="aot_eager")):
            return body()

    for got, want in zip(run(True), run(False)):
        _close(got, want)
