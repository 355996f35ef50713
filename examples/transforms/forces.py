"""Forces from an energy model built from customop's ops, trained on a force loss, with
torch.func: the scientific-ML pattern where double backward runs under the transforms.

The energy of a configuration R [atoms, 3]: per-atom radial features
f_i = sum_{j != i} exp(-g_k |r_i - r_j|^2) (k = 1..8 widths), then Linear(8, 32) ->
customop.bias_gelu -> customop.rms_norm -> Linear(32, 1), summed over atoms. Forces are
F = -dE/dR, by torch.func.grad; vmap over a batch of configurations gives them all in one call.
The model is trained to match the forces of a reference pair potential
E_ref = sum_{i<j} exp(-|r_i - r_j|^2) by minimizing mean |F - F_ref|^2: the gradient of that
loss with respect to the parameters is torch.func.grad of a function that itself calls
torch.func.grad, so every op's backward is differentiated again (its double backward), batched.
torch's per-example vmap fallback is off: the ops' batching rules serve.

Checked before training: the forces against central finite differences of the energy, and the
force loss's parameter gradient against the same model written with ATen ops (F.gelu,
x * rsqrt(mean(x^2) + eps) * w). Checked after: the loss fell.

Run:  PYTHONPATH=<build>/python_dev python examples/transforms/forces.py [--steps 60]
Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse

import torch
from torch.func import functional_call, grad, vmap

import customop  # noqa: F401  (loads the op library: torch.ops.customop.*)

ops = torch.ops.customop
WIDTHS = torch.tensor([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def radial_features(r: torch.Tensor) -> torch.Tensor:
    """[atoms, 3] -> [atoms, 8]: sum over the other atoms of exp(-g_k d_ij^2)."""
    d2 = (r.unsqueeze(0) - r.unsqueeze(1)).square().sum(-1)            # [atoms, atoms]
    off = 1 - torch.eye(r.shape[0], dtype=r.dtype)
    return (torch.exp(-d2.unsqueeze(-1) * WIDTHS) * off.unsqueeze(-1)).sum(1)


class Energy(torch.nn.Module):
    def __init__(self, generator: torch.Generator, aten: bool = False):
        super().__init__()
        self.aten = aten
        self.fc1 = torch.nn.Linear(8, 32, bias=False)
        self.bias = torch.nn.Parameter(0.1 * torch.randn(32, generator=generator))
        self.norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(32, generator=generator))
        self.fc2 = torch.nn.Linear(32, 1)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        h = self.fc1(radial_features(r))
        if self.aten:  # the same model in ATen ops: the reference
            h = torch.nn.functional.gelu(h + self.bias)
            h = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        else:
            h = ops.bias_gelu(h, self.bias)
            h = ops.rms_norm(h, self.norm_weight, 1e-6)
        return self.fc2(h).sum()


def reference_energy(r: torch.Tensor) -> torch.Tensor:
    d2 = (r.unsqueeze(0) - r.unsqueeze(1)).square().sum(-1)
    return torch.triu(torch.exp(-d2), diagonal=1).sum()


def force_loss_fn(model: torch.nn.Module):
    """loss(params, R [configs, atoms, 3], F_ref) = mean |F(R) - F_ref|^2, F = -grad E."""
    def energy(p, r):
        return functional_call(model, p, (r,))

    def loss(p, rs, f_ref):
        forces = vmap(lambda r: -grad(energy, argnums=1)(p, r))(rs)
        return (forces - f_ref).square().mean()

    return loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--atoms", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    model = Energy(g)
    rs = 1.2 * torch.randn(args.configs, args.atoms, 3, generator=g)
    f_ref = vmap(lambda r: -grad(reference_energy)(r))(rs)
    ok = True

    # Forces against central finite differences of the energy (one configuration).
    r0 = rs[0].clone()
    forces = -grad(lambda r: model(r))(r0).detach()
    h, fd = 1e-6, torch.empty_like(r0)
    with torch.no_grad():
        for idx in range(r0.numel()):
            e = torch.zeros(r0.numel())
            e[idx] = h
            e = e.view_as(r0)
            fd.view(-1)[idx] = -(model(r0 + e) - model(r0 - e)) / (2 * h)
    err = float((forces - fd).abs().max())
    print(f"forces vs central differences of the energy: max abs difference {err:.2e}")
    ok &= err <= 1e-6

    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        loss = force_loss_fn(model)
        params = {k: v.detach().clone() for k, v in model.named_parameters()}
        # The parameter gradient of the force loss (double backward under vmap) against the
        # ATen model's.
        reference = Energy(torch.Generator().manual_seed(args.seed), aten=True)
        got = grad(loss)(params, rs, f_ref)
        want = grad(force_loss_fn(reference))(params, rs, f_ref)
        rel = max(float((got[k] - want[k]).abs().max() / want[k].abs().max()) for k in want)
        print(f"force-loss gradient vs the ATen model: max relative difference {rel:.2e}")
        ok &= rel <= 1e-9

        opt = torch.optim.Adam(params.values(), lr=1e-2)
        first = float(loss(params, rs, f_ref))
        for _ in range(args.steps):
            gs = grad(loss)(params, rs, f_ref)
            for k, p in params.items():
                p.grad = gs[k]
            opt.step()
        last = float(loss(params, rs, f_ref))
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    print(f"force loss: {first:.4e} -> {last:.4e} after {args.steps} Adam steps")
    ok &= last < 0.5 * first
    print("all checks passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
