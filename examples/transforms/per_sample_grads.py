"""Per-sample gradients of a small model built from customop's ops, with torch.func.

The model: x [batch, 16] -> Linear(16, 32) -> customop.bias_gelu -> customop.rms_norm ->
Linear(32, 4) -> logits; the loss of one sample is its cross entropy. torch.func.vmap over
torch.func.grad of that loss (through torch.func.functional_call, so the parameters are inputs)
gives one gradient per sample and parameter in one batched call: what differential privacy
(per-sample clipping) and influence functions need. The ops' batching rules (op.vmap) serve
vmap: torch's per-example fallback is switched off, so the script fails if any op on the path
lacks one. The result is compared with a loop of torch.autograd.grad over the samples.

Run:  PYTHONPATH=<build>/python_dev python examples/transforms/per_sample_grads.py
Exit status 0 when every per-sample gradient matches the loop (float64, 1e-10 relative).
"""

from __future__ import annotations

import argparse

import torch
from torch.func import functional_call, grad, vmap

import customop  # noqa: F401  (loads the op library: torch.ops.customop.*)

ops = torch.ops.customop


class Model(torch.nn.Module):
    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32, bias=False)
        self.bias = torch.nn.Parameter(0.1 * torch.randn(32, generator=generator))
        self.norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(32, generator=generator))
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = ops.bias_gelu(self.fc1(x), self.bias)        # gelu(x W1^T + b), fused
        h = ops.rms_norm(h, self.norm_weight, 1e-6)      # h / rms(h) * w
        return self.fc2(h)


def per_sample_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """{parameter name: [batch, *parameter shape]}: each sample's gradient of its own loss."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        logits = functional_call(model, p, (xi.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, yi.unsqueeze(0))

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def loop_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The same, one torch.autograd.grad per sample (the reference)."""
    names, params = zip(*model.named_parameters())
    rows = []
    for i in range(x.shape[0]):
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1])
        rows.append(torch.autograd.grad(loss, params))
    return {n: torch.stack([r[k] for r in rows]) for k, n in enumerate(names)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = Model(g)
    x = torch.randn(args.batch, 16, generator=g)
    y = torch.randint(0, 4, (args.batch,), generator=g)
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        got = per_sample_grads(model, x, y)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    want = loop_grads(model, x, y)
    worst = 0.0
    for name, w in want.items():
        err = float((got[name] - w).abs().max() / w.abs().max().clamp_min(1e-300))
        worst = max(worst, err)
        print(f"{name:12s} per-sample grads {tuple(got[name].shape)}: max relative difference "
              f"from the loop {err:.2e}")
    ok = worst <= 1e-10
    print("per-sample gradients match the loop" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
