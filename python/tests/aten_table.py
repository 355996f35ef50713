"""A broad table of correct ATen ops, each a plain callable: the evidence that customop's
verdicts hold on ops far from its own (issue: no false alarm on correct ops). Each entry:
(name, function, inputs maker (dtype, generator) -> tuple, why it is in the table)."""

from __future__ import annotations

import torch


def _randn(gen, dtype, *shape, grad=True):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(grad)


def _spd(gen, dtype, n):
    a = torch.randn(n, n, generator=gen, dtype=torch.float64)
    return (a @ a.T + n * torch.eye(n, dtype=torch.float64)).to(dtype).requires_grad_(True)


def _positive(gen, dtype, *shape):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) + 0.5).to(dtype).requires_grad_(True)


def _away_from_zero(gen, dtype, *shape):
    # kinks at 0: elements at least 1e-2 away (eps 1e-6 never straddles them)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    x = torch.where(x.abs() < 1e-2, x.sign() * 1e-2 + x, x)
    return x.to(dtype).requires_grad_(True)


def _distinct(gen, dtype, *shape):
    # sort/topk/max: values at least 1e-2 apart (no ties within the step)
    n = 1
    for s in shape:
        n *= s
    x = (torch.randperm(n, generator=gen).to(torch.float64) * 0.1 - n * 0.05).reshape(shape)
    return x.to(dtype).requires_grad_(True)


def _inplace_add(x, y):
    out = x.clone()
    out.add_(y, alpha=2.0)
    return out


def _view_then_inplace(x):
    out = x.clone(memory_format=torch.contiguous_format)
    v = out.view(-1)[1:5]
    v.mul_(3.0)
    return out


R = _randn
ENTRIES = [
    # contractions and long inner sums
    ("bmm", torch.bmm, lambda d, g: (R(g, d, 10, 5, 10), R(g, d, 10, 10, 5)), "contraction, K=10"),
    ("baddbmm", torch.baddbmm,
     lambda d, g: (R(g, d, 10, 5, 5), R(g, d, 10, 5, 10), R(g, d, 10, 10, 5)), "contraction + add"),
    ("addbmm", torch.addbmm,
     lambda d, g: (R(g, d, 5, 5), R(g, d, 10, 5, 10), R(g, d, 10, 10, 5)), "sum over batch, K=100"),
    ("matmul chain", lambda a, b, c: a @ b @ c,
     lambda d, g: (R(g, d, 6, 20), R(g, d, 20, 20), R(g, d, 20, 6)), "two contractions"),
    ("mm K=256", torch.mm, lambda d, g: (R(g, d, 3, 256), R(g, d, 256, 2)), "long inner sum"),
    ("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b),
     lambda d, g: (R(g, d, 2, 4, 8), R(g, d, 2, 8, 3)), "contraction"),
    ("cumsum", lambda x: x.cumsum(0), lambda d, g: (R(g, d, 200),), "prefix sums"),
    ("cumprod", lambda x: x.cumprod(0), lambda d, g: (_positive(g, d, 30),), "prefix products"),
    ("sum 4096", lambda x: x.sum(), lambda d, g: (R(g, d, 4096),), "reduction"),
    ("mean", lambda x: x.mean(1), lambda d, g: (R(g, d, 4, 50),), "reduction"),
    ("var", lambda x: x.var(1), lambda d, g: (R(g, d, 4, 50),), "cancelling reduction"),
    ("std", lambda x: x.std(0), lambda d, g: (R(g, d, 50, 3),), "cancelling reduction"),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x), lambda d, g: (R(g, d, 100),), "norm"),
    ("vector_norm ord=3", lambda x: torch.linalg.vector_norm(x, ord=3, dim=1),
     lambda d, g: (R(g, d, 4, 30),), "norm"),
    ("logsumexp", lambda x: x.logsumexp(1), lambda d, g: (R(g, d, 4, 40),), "reduction"),
    ("softmax", lambda x: x.softmax(-1), lambda d, g: (R(g, d, 3, 20),), "normalization"),
    ("log_softmax", lambda x: x.log_softmax(-1), lambda d, g: (R(g, d, 3, 20),), "normalization"),
    ("layer_norm", lambda x, w, b: torch.nn.functional.layer_norm(x, (16,), w, b),
     lambda d, g: (R(g, d, 4, 16), R(g, d, 16), R(g, d, 16)), "normalization"),
    ("prod", lambda x: x.prod(1), lambda d, g: (_positive(g, d, 3, 12),), "product reduction"),
    # linear algebra
    ("det", torch.linalg.det, lambda d, g: (_spd(g, d, 4),), "determinant"),
    ("inv", torch.linalg.inv, lambda d, g: (_spd(g, d, 4),), "inverse"),
    ("solve", torch.linalg.solve, lambda d, g: (_spd(g, d, 5), R(g, d, 5, 2)), "solve"),
    # cholesky reads one triangle and returns a symmetric grad: checked on a symmetric input
    # made from a free one, as torch's own tests do
    ("cholesky", lambda a: torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, dtype=a.dtype)),
     lambda d, g: (R(g, d, 4, 4),), "factorization"),
    ("cross", lambda a, b: torch.linalg.cross(a, b), lambda d, g: (R(g, d, 5, 3), R(g, d, 5, 3)),
     "bilinear"),
    # elementwise
    ("sin", torch.sin, lambda d, g: (R(g, d, 20),), "smooth"),
    ("exp", torch.exp, lambda d, g: (R(g, d, 20),), "smooth"),
    ("tanh", torch.tanh, lambda d, g: (R(g, d, 20),), "smooth"),
    ("sigmoid", torch.sigmoid, lambda d, g: (R(g, d, 20),), "smooth"),
    ("erf", torch.erf, lambda d, g: (R(g, d, 20),), "smooth"),
    ("lgamma", torch.lgamma, lambda d, g: (_positive(g, d, 20),), "smooth"),
    ("log", torch.log, lambda d, g: (_positive(g, d, 20),), "smooth"),
    ("sqrt", torch.sqrt, lambda d, g: (_positive(g, d, 20),), "smooth"),
    ("pow", torch.pow, lambda d, g: (_positive(g, d, 10), R(g, d, 10)), "two inputs"),
    ("atan2", torch.atan2, lambda d, g: (R(g, d, 10), _away_from_zero(g, d, 10)), "two inputs"),
    ("div", torch.div, lambda d, g: (R(g, d, 10), _away_from_zero(g, d, 10)), "two inputs"),
    ("broadcast mul", torch.mul, lambda d, g: (R(g, d, 4, 5), R(g, d, 5)), "broadcast reduce"),
    # kinks and piecewise definitions
    ("relu", torch.relu, lambda d, g: (_away_from_zero(g, d, 30),), "kink at 0"),
    ("abs", torch.abs, lambda d, g: (_away_from_zero(g, d, 30),), "kink at 0"),
    ("clamp", lambda x: x.clamp(-0.5, 0.5), lambda d, g: (_away_from_zero(g, d, 30),), "piecewise"),
    ("hardtanh", torch.nn.functional.hardtanh, lambda d, g: (_away_from_zero(g, d, 30),), "piecewise"),
    ("leaky_relu", lambda x: torch.nn.functional.leaky_relu(x, 0.1),
     lambda d, g: (_away_from_zero(g, d, 30),), "kink at 0"),
    ("where", lambda x: torch.where(x > 0, x * x, -x), lambda d, g: (_away_from_zero(g, d, 30),),
     "piecewise"),
    ("smooth_l1", lambda x, y: torch.nn.functional.smooth_l1_loss(x, y, reduction="none"),
     lambda d, g: (R(g, d, 20), R(g, d, 20)), "piecewise"),
    ("maximum", torch.maximum, lambda d, g: (_distinct(g, d, 12), R(g, d, 12) * 0 + 0.05),
     "piecewise, two inputs"),
    # integer and boolean side outputs
    ("max(dim)", lambda x: torch.max(x, 1), lambda d, g: (_distinct(g, d, 4, 6),),
     "values + int64 indices"),
    ("sort", lambda x: torch.sort(x, 1), lambda d, g: (_distinct(g, d, 3, 7),),
     "values + int64 indices"),
    ("topk", lambda x: torch.topk(x, 3), lambda d, g: (_distinct(g, d, 4, 8),),
     "values + int64 indices"),
    ("exp + argmax", lambda x: (x.exp(), x.argmax()), lambda d, g: (R(g, d, 10),),
     "int64 side output"),
    ("sin + isfinite", lambda x: (x.sin(), torch.isfinite(x)), lambda d, g: (R(g, d, 10),),
     "bool side output"),
    # views and in-place results
    ("transpose", lambda x: x.t(), lambda d, g: (R(g, d, 4, 5),), "view"),
    ("narrow", lambda x: x.narrow(1, 1, 3), lambda d, g: (R(g, d, 4, 5),), "view"),
    ("expand", lambda x: x.expand(3, 4, 5), lambda d, g: (R(g, d, 4, 5),), "broadcast view"),
    ("diagonal", lambda x: x.diagonal(), lambda d, g: (R(g, d, 5, 5),), "view"),
    ("unfold", lambda x: x.unfold(0, 3, 2), lambda d, g: (R(g, d, 11),), "overlapping view"),
    ("gather", lambda x: x.gather(1, torch.tensor([[0, 2], [1, 1], [3, 0]])),
     lambda d, g: (R(g, d, 3, 4),), "index"),
    ("index_add", lambda x, y: x.index_add(0, torch.tensor([0, 2, 0]), y),
     lambda d, g: (R(g, d, 4, 3), R(g, d, 3, 3)), "scatter with repeats"),
    ("in-place add_", _inplace_add, lambda d, g: (R(g, d, 4, 3), R(g, d, 4, 3)), "in-place result"),
    ("view + mul_", _view_then_inplace, lambda d, g: (R(g, d, 3, 4),), "in-place on a view"),
]
