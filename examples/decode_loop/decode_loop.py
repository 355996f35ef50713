"""A decode loop with customop's in-place ops: each step adds the attention block's output to
the residual stream and normalizes it in place (customop.fused_add_rms_norm_), projects the
new token to keys and values, writes them into a paged KV cache (customop.paged_kv_write) and
attends over everything cached so far. The loop runs eagerly and under
torch.compile(fullgraph=True, dynamic=True); the caches and outputs of both must agree.

Shapes: batch of `--seqs` sequences decoded in lockstep; cache [blocks, block_size, heads,
head_size]; each sequence owns a block table of ceil(steps / block_size) blocks.

Run:  PYTHONPATH=<build>/python_dev python examples/decode_loop/decode_loop.py --steps 16
Exit status 0 when compiled and eager agree (and the compiled step copied no cache).
"""

from __future__ import annotations

import argparse
import math

import torch

import customop  # noqa: F401  (loads the op library: torch.ops.customop.*)


class Layer(torch.nn.Module):
    """One attention layer's decode step over a paged KV cache (no MLP, one layer)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_size = heads, dim // heads
        self.norm_weight = torch.nn.Parameter(torch.ones(dim), requires_grad=False)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False).requires_grad_(False)
        self.out = torch.nn.Linear(dim, dim, bias=False).requires_grad_(False)

    def forward(self, h, residual, key_cache, value_cache, slot, block_table, length: int):
        # residual += h; h = rms_norm(residual) * weight  (both in place)
        torch.ops.customop.fused_add_rms_norm_(h, residual, self.norm_weight, 1e-6)
        q, k, v = self.qkv(h).view(h.shape[0], 3, self.heads, self.head_size).unbind(1)
        torch.ops.customop.paged_kv_write(k, v, key_cache, value_cache, slot)
        # Attention over the `length` cached tokens of each sequence, gathered by block table.
        keys = key_cache[block_table].flatten(1, 2)[:, :length]      # [seqs, length, heads, hs]
        values = value_cache[block_table].flatten(1, 2)[:, :length]
        scores = torch.einsum("shd,slhd->shl", q, keys) / math.sqrt(self.head_size)
        attn = torch.einsum("shl,slhd->shd", scores.softmax(-1), values)
        return self.out(attn.flatten(1))


def run(layer, step, seqs: int, steps: int, dim: int, block_size: int, generator):
    heads, hs = layer.heads, layer.head_size
    blocks_per_seq = math.ceil(steps / block_size)
    key_cache = torch.zeros(seqs * blocks_per_seq, block_size, heads, hs)
    value_cache = torch.zeros_like(key_cache)
    block_table = torch.arange(seqs * blocks_per_seq).view(seqs, blocks_per_seq)
    h = torch.randn(seqs, dim, generator=generator)
    residual = torch.zeros(seqs, dim)
    outs = []
    for t in range(steps):
        slot = block_table[:, t // block_size] * block_size + t % block_size
        h = step(h, residual, key_cache, value_cache, slot, block_table, t + 1)
        outs.append(h.clone())
    return torch.stack(outs), key_cache, value_cache, residual


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seqs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=4)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    layer = Layer(a.dim, a.heads)
    eager = run(layer, layer, a.seqs, a.steps, a.dim, a.block_size, torch.Generator().manual_seed(1))
    compiled_step = torch.compile(layer, fullgraph=True, dynamic=True)
    compiled = run(layer, compiled_step, a.seqs, a.steps, a.dim, a.block_size,
                   torch.Generator().manual_seed(1))
    names = ("outputs", "key_cache", "value_cache", "residual")
    worst = {n: (e - c).abs().max().item() for n, e, c in zip(names, eager, compiled)}
    print(f"{a.steps} decode steps, {a.seqs} sequences, cache {tuple(eager[1].shape)}: "
          f"max |eager - compiled| " + ", ".join(f"{n} {w:.2e}" for n, w in worst.items()))
    ok = all(torch.allclose(e, c, rtol=1e-4, atol=1e-5) for e, c in zip(eager, compiled))
    print("eager and compiled agree" if ok else "MISMATCH between eager and compiled")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
