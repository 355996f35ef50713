"""customop's ops in a model trained with torch.distributed: 2 CPU processes over gloo end with
the parameters one process gets on the full batch.

The model (float64 unless said): 2 blocks on a batch [B, S, D] = [4, 8, 16], each
    x = x + mix(norm1(x))                  # norm: customop.rms_norm with a weight [D]
    x = x + fc2(act(fc1(norm2(x))))        # act: customop.bias_gelu with a bias [H], H = 32
where mix is attention-like mixing over the sequence dim without projections,
bias_gelu(masked_softmax(h h^T / sqrt(D), causal mask, dim=-1) h, bias [D]), then a final
rms_norm; 2,256 parameters. Loss: mean squared error against a random target. Every rank
builds the model from the same seed (DDP broadcasts rank 0's parameters anyway; FSDP2 and
tp keep each rank's own) and generates the same batches; each mode runs --steps
SGD steps (lr 0.1), gathers the final parameters as full tensors (every rank's copy of a
replicated one), and rank 0 compares them with a single-process run of the same steps,
printing max |difference| per parameter.

--mode takes one mode, several separated by commas, or `all`: they run one after another in
the same processes and process group (torch's import, not the training, is what a launch
costs). Each mode builds its own model from the seed, wraps it (DDP, fully_shard,
parallelize_module) and drops it when done, so it computes what a launch of its own would.
--json writes one file with a section per mode ("modes": {mode: figures}) and the list of
those that mismatched ("failed"). Exit 1 (every rank) if any mode mismatched, naming them on
the last line; 0 otherwise.

Modes:
  ddp         DistributedDataParallel; each rank takes half the batch (dim 0), gloo averages
              the grads. Reference: one process, full batch.
  fsdp2       torch.distributed.fsdp.fully_shard (FSDP2) on each block and on the root; the
              parameters are sharded on dim 0 over the 2 ranks, gathered for the forward and
              the backward, grads reduce-scattered (averaged). Batch split as ddp; same reference.
  fsdp2-bf16  fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16,
              reduce_dtype=float32): float32 master parameters, the ops run in bfloat16.
              Reference: the same step in one process: the float32 parameters cast to
              bfloat16, forward + backward on each rank's half batch in turn, the two grads
              cast to float32 and averaged, the update in float32. Also reported (not checked):
              a one-process bfloat16 run on the full batch and the float64 run, which differ
              from this mode by bfloat16 rounding (the batch's grad rounded once, not per half).
  tp          tensor + sequence parallelism (parallelize_module of
              torch.distributed.tensor.parallel) on a 1-D mesh of 2: rms_norm and the mixing (masked_softmax,
              bias_gelu) run under SequenceParallel on activations sharded along the sequence
              dim (Shard(1)); fc1 is ColwiseParallel (all-gathers the sequence), bias_gelu runs
              on its output sharded along the hidden dim with its bias sharded alike, fc2 is
              RowwiseParallel back to Shard(1) (reduce-scatter). Every rank feeds the whole
              batch. The ops see DTensors, so this needs their sharding rules, registered by
              `import customop` (once torch.distributed.tensor is imported); without them
              DTensor raises "... does not have a sharding strategy registered". The script
              also checks where each op's output lies (TP_PLACEMENTS): sharded, not gathered.

Tolerances (relative to max |reference parameter|, per parameter):
  float64 modes: 1e-10. The runs differ only in summation order (a grad summed over two
  halves of the batch, or over two halves of the hidden dim for fc2 under tp), each rounding
  2^-53 = 1.1e-16 relative; 1e-10 leaves room for ~10^6 of them, far more than 5 steps of a
  2-block model make. Measured: max |diff| 2.8e-17 (ddp, fsdp2), 2.2e-16 (tp), against
  parameter updates of 1e-3 to 1e-1; rank 1 on lr * 1.001 (--plant-bug) is off by 1e-6 to
  1e-4, each parameter 10^4 times its bound or more.
  fsdp2-bf16: 1e-6 (float32 rounding is 2^-24 = 6e-8 relative). The reference does the same
  bfloat16 arithmetic on the same halves, so only the float32 reduction of the two grads and
  the float32 update may round differently. Measured: 0 (bitwise equal). Why not compare with
  one bfloat16 process on the full batch: that run rounds the batch's grad once instead of
  each half's, and differs by 1.5e-4 (0.035 bfloat16 rounding steps 2^-8 * |parameter|; the
  float64 run: 3.4e-4), more than --plant-bug's lr * 1.001 moves the parameters (1e-6 to
  1e-4), so a tolerance wide enough for it would not see that bug.

--plant-bug: rank 1 steps with lr * 1.001 (a rank with another optimizer setting) in every
mode of the launch; each comparison must then fail and the script exit 1
(test_distributed.py checks it).

Run (from the repository root, with customop importable; a launch takes ~20 s on a loaded
2-core machine, nearly all of it 3 Pythons importing torch; the four modes together train and
check in ~6 s of it, 4 of which the first mode spends on start-up):
  GLOO_SOCKET_IFNAME=lo python -m torch.distributed.run --standalone --nproc-per-node 2 \\
      examples/distributed/train.py --mode ddp --steps 5 --json ddp.json
(--standalone: a local rendezvous on a free port; GLOO_SOCKET_IFNAME=lo keeps gloo on the
loopback device.) `--mode all` (or ddp,fsdp2,fsdp2-bf16,tp) runs every mode in that launch;
test_distributed.py runs all of them once, and once with --plant-bug.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, ParallelStyle, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

import customop

BATCH, SEQ, DIM, HIDDEN, BLOCKS = 4, 8, 16, 32, 2
SEED = 0
LR = 0.1
BUG_LR_SCALE = 1.001  # --plant-bug: rank 1's lr factor
MODES = ("ddp", "fsdp2", "fsdp2-bf16", "tp")  # --mode all runs them in this order
RTOL = {"ddp": 1e-10, "fsdp2": 1e-10, "fsdp2-bf16": 1e-6, "tp": 1e-10}
# tp: where each op's output lies on the mesh (a Replicate here would mean DTensor gathered
# the activations and every rank ran the whole op).
TP_PLACEMENTS = {
    "rms_norm": "(Shard(dim=1),)",          # the sequence dim
    "masked_softmax": "(Shard(dim=1),)",    # query rows
    "bias_gelu (mix)": "(Shard(dim=1),)",
    "bias_gelu (mlp)": "(Shard(dim=2),)",   # the hidden dim, after ColwiseParallel fc1
}


# ---- the model ------------------------------------------------------------------------------

# Under tp: op label (as in TP_PLACEMENTS) -> the placements of its output on the first call.
PLACEMENTS: dict[str, str] = {}


def noted(where: str, out):
    """Records where `out` (an op's output) is placed when it is a DTensor; returns it."""
    if isinstance(out, DTensor):
        PLACEMENTS.setdefault(where, str(tuple(out.placements)))
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Not all ones, so that a grad reaching the wrong element shows.
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return noted("rms_norm", customop.rms_norm(x, self.weight, eps=1e-6))


class BiasGelu(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        return noted("bias_gelu (mlp)", customop.bias_gelu(x, self.bias, approximate="none"))


class SequenceMix(nn.Module):
    """Attention-like mixing over the sequence dim, no projections: softmax(h h^T / sqrt(D))
    under a causal mask, applied to h, then bias_gelu. Each query row needs every key (the
    whole sequence) but only its own row of scores, so it runs on query rows sharded along
    the sequence dim."""

    def __init__(self, dim: int):
        super().__init__()
        # NB: a parameter of this module, not of a child BiasGelu: SequenceParallel re-registers
        # module.named_parameters(), children's included, under their dotted names, which
        # nn.Module refuses (KeyError: parameter name can't contain ".").
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, h):
        scores = (h @ h.transpose(-1, -2)) * (1.0 / math.sqrt(h.shape[-1]))
        seq = h.shape[-2]
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()  # [S, S], broadcast over B
        if isinstance(scores, DTensor):
            mask = DTensor.from_local(mask, scores.device_mesh, [Replicate()], run_check=False)
        p = noted("masked_softmax", customop.masked_softmax(scores, mask, dim=-1))
        return noted("bias_gelu (mix)", customop.bias_gelu(p @ h, self.bias, approximate="none"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = RMSNorm(DIM)
        self.mix = SequenceMix(DIM)
        self.norm2 = RMSNorm(DIM)
        self.fc1 = nn.Linear(DIM, HIDDEN, bias=False)  # the bias is bias_gelu's
        self.act = BiasGelu(HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        x = x + self.mix(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = RMSNorm(DIM)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def build_model(dtype: torch.dtype) -> Model:
    """The same parameters on every rank and in the reference: one seed, one init order."""
    torch.manual_seed(SEED)
    return Model().to(dtype)


def batch(step: int, dtype: torch.dtype):
    """Step `step`'s full batch (input, target), each [B, S, D]; the same on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, SEQ, DIM, generator=g, dtype=torch.float64)
    target = torch.randn(BATCH, SEQ, DIM, generator=g, dtype=torch.float64)
    return x.to(dtype), target.to(dtype)


def loss_fn(out, target):
    return F.mse_loss(out.to(target.dtype), target)


# ---- the single-process references ----------------------------------------------------------

def reference(steps: int, param_dtype: torch.dtype, compute_dtype: torch.dtype, parts: int):
    """`steps` SGD steps in this process on parameters of `param_dtype`; each step's grad is
    the mean over `parts` equal slices of the batch (dim 0) of the grad computed in
    `compute_dtype` (parameters and input cast to it), cast back to `param_dtype`.
    Returns ({name: final parameter}, [loss per step])."""
    model = build_model(param_dtype)
    low = build_model(compute_dtype) if compute_dtype != param_dtype else None
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        x, target = batch(step, param_dtype)
        opt.zero_grad()
        total = 0.0
        for xs, ts in zip(x.chunk(parts), target.chunk(parts)):
            if low is None:
                loss = loss_fn(model(xs), ts)
                (loss / parts).backward()
            else:
                low.zero_grad()
                low.load_state_dict({k: v.to(compute_dtype) for k, v in model.state_dict().items()})
                loss = loss_fn(low(xs.to(compute_dtype)), ts)
                loss.backward()
                for p, q in zip(model.parameters(), low.parameters()):
                    g = q.grad.to(param_dtype)
                    p.grad = g if p.grad is None else p.grad + g
            total += loss.item()
        if low is not None:
            for p in model.parameters():
                p.grad /= parts
        opt.step()
        losses.append(total / parts)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses


# ---- the distributed modes ------------------------------------------------------------------

class ShardedBias(ParallelStyle):
    """bias_gelu after a ColwiseParallel linear: its bias [H] sharded as that linear's output
    features (Shard(0)), as ColwiseParallel shards a Linear's own bias."""

    def _apply(self, module, device_mesh):
        def shard_bias(_name, mod, mesh):
            for name, p in list(mod.named_parameters(recurse=False)):
                mod.register_parameter(name, nn.Parameter(distribute_tensor(p, mesh, [Shard(0)])))
        return distribute_module(module, device_mesh, shard_bias)


def parallelize(mode: str, mesh):
    """The model of `mode`, wrapped or sharded, and the dtype its parameters are kept in."""
    if mode == "ddp":
        model = build_model(torch.float64)
        return torch.nn.parallel.DistributedDataParallel(model), torch.float64
    if mode in ("fsdp2", "fsdp2-bf16"):
        dtype = torch.float64 if mode == "fsdp2" else torch.float32
        mp = MixedPrecisionPolicy() if mode == "fsdp2" else MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        model = build_model(dtype)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model, dtype
    if mode == "tp":
        model = build_model(torch.float64)
        plan = {
            "norm1": SequenceParallel(),
            "mix": SequenceParallel(),
            "norm2": SequenceParallel(),
            "fc1": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
            "act": ShardedBias(),
            "fc2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
        for block in model.blocks:
            parallelize_module(block, mesh, plan)
        parallelize_module(model, mesh, {"norm": SequenceParallel()})
        return model, torch.float64
    raise ValueError(f"unknown mode {mode!r}")


def local_step_inputs(mode: str, x, target, mesh):
    """What this rank feeds the model: half the batch (data parallel), or the whole batch as
    a DTensor sharded along the sequence dim (tp)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "tp":
        return DTensor.from_local(x.chunk(world, dim=1)[rank], mesh, [Shard(1)]), target
    return x.chunk(world)[rank], target.chunk(world)[rank]


def full_copies(p) -> list[torch.Tensor]:
    """Parameter p as full tensors, gathered on every rank: one for a sharded DTensor, one per
    rank for a replicated tensor (so a rank that drifted from the others shows)."""
    if isinstance(p, DTensor):
        if all(isinstance(pl, Shard) for pl in p.placements):
            return [p.full_tensor().detach()]
        local = p.to_local().detach()
    else:
        local = p.detach()
    copies = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, local.contiguous())
    return copies


def compare(params: dict, ref: dict, initial: dict, rtol: float):
    """Per parameter: max |difference| over its copies, the bound rtol * max |reference|, and
    max |reference - initial| (the size of what training changed)."""
    rows = {}
    for name, copies in params.items():
        r = ref[name]
        diff = max((c.to(r.dtype) - r).abs().max().item() for c in copies)
        rows[name] = {
            "max_abs_diff": diff,
            "bound": rtol * r.abs().max().item(),
            "max_abs_ref": r.abs().max().item(),
            "max_abs_update": (r - initial[name]).abs().max().item(),
            "copies": len(copies),
        }
    return rows


def check(args, mode: str, params: dict, losses: list, param_dtype, train_s: float,
          t0: float) -> tuple[bool, dict]:
    """Rank 0: runs `mode`'s reference and prints the comparison; returns (True on a match,
    the mode's figures for the JSON)."""
    world = dist.get_world_size()
    t_ref = time.perf_counter()
    initial = {n: p.detach() for n, p in build_model(param_dtype).named_parameters()}
    if mode == "fsdp2-bf16":
        ref, ref_losses = reference(args.steps, torch.float32, torch.bfloat16, parts=world)
        context = {"bf16_full_batch": reference(args.steps, torch.float32, torch.bfloat16, 1)[0],
                   "float64": reference(args.steps, torch.float64, torch.float64, 1)[0]}
    else:
        ref, ref_losses = reference(args.steps, torch.float64, torch.float64, parts=1)
        context = {}
    ref_s = time.perf_counter() - t_ref
    rtol = RTOL[mode]
    rows = compare(params, ref, initial, rtol)
    passed = all(r["max_abs_diff"] <= r["bound"] for r in rows.values())
    bug = f" [planted bug: rank 1 lr x {BUG_LR_SCALE}]" if args.plant_bug else ""
    print(f"{mode}: {args.steps} SGD steps on {world} ranks vs one process "
          f"({sum(p.numel() for p in ref.values())} parameters, {param_dtype}, "
          f"bound {rtol:g} * max|ref|){bug}")
    print(f"  {'parameter':<24}{'max|diff|':>12}{'bound':>12}{'max|update|':>13}  copies")
    for name, r in rows.items():
        flag = "" if r["max_abs_diff"] <= r["bound"] else "  MISMATCH"
        print(f"  {name:<24}{r['max_abs_diff']:12.3e}{r['bound']:12.3e}"
              f"{r['max_abs_update']:13.3e}  {r['copies']}{flag}")
    print(f"  loss per step: distributed {['%.12g' % v for v in losses]}")
    print(f"                 reference   {['%.12g' % v for v in ref_losses]}")
    # Context (bf16): the runs this mode is not the same computation as, in bfloat16 rounding
    # steps of each parameter (2^-8 * max|parameter|).
    context_rows = {}
    for what, other in context.items():
        diff = max((c.double() - other[n].double()).abs().max().item()
                   for n, cs in params.items() for c in cs)
        steps = max((c.double() - other[n].double()).abs().max().item()
                    / (2.0**-8 * other[n].abs().max().item())
                    for n, cs in params.items() for c in cs)
        context_rows[what] = {"max_abs_diff": diff, "max_bf16_steps": steps}
        print(f"  (not checked) against the {what} run: max|diff| {diff:.3e}, "
              f"{steps:.3f} bfloat16 rounding steps of a parameter")
    if mode == "tp":
        print(f"  op outputs under tp: {PLACEMENTS}")
        if PLACEMENTS != TP_PLACEMENTS:
            print(f"  MISMATCH: expected the op outputs placed as {TP_PLACEMENTS}")
            passed = False
    max_diff = max(r["max_abs_diff"] for r in rows.values())
    total_s = time.perf_counter() - t0
    print(f"  {'PASS' if passed else 'FAIL'}: max|diff| {max_diff:.3e}; train {train_s:.2f} s, "
          f"reference {ref_s:.2f} s, total {total_s:.2f} s (after imports)")
    return passed, {
        "passed": passed, "param_dtype": str(param_dtype), "rtol": rtol, "max_abs_diff": max_diff,
        "parameters": rows, "losses": losses, "reference_losses": ref_losses,
        "context": context_rows, "op_placements": dict(PLACEMENTS),
        "seconds": {"train": train_s, "reference": ref_s, "total": total_s},
    }


def run_mode(args, mode: str, mesh) -> tuple[bool, dict | None]:
    """Trains `mode` on this rank and compares on rank 0; returns (the verdict, broadcast to
    every rank; rank 0's figures, None elsewhere). Everything the mode builds (its model, the
    FSDP2 or DTensor wrapping, the optimizer) is local and dropped on return, so the next mode
    starts from the same seed and parameters as a launch of its own."""
    t0 = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(SEED)
    PLACEMENTS.clear()
    model, param_dtype = parallelize(mode, mesh)
    lr = LR * (BUG_LR_SCALE if args.plant_bug and rank == 1 else 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    t_train = time.perf_counter()
    for step in range(args.steps):
        x, target = batch(step, param_dtype)
        xs, ts = local_step_inputs(mode, x, target, mesh)
        opt.zero_grad()
        out = model(xs)
        if isinstance(out, DTensor):
            out = out.full_tensor()  # backward: each rank keeps its sequence shard's grad
        loss = loss_fn(out, ts)
        loss.backward()
        opt.step()
        mean = loss.detach().to(torch.float64).clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    train_s = time.perf_counter() - t_train

    prefix = "module."  # DDP's
    params = {n.removeprefix(prefix): full_copies(p) for n, p in model.named_parameters()}

    passed, section = True, None
    if rank == 0:
        passed, section = check(args, mode, params, losses, param_dtype, train_s, t0)
    verdict = torch.tensor([int(passed)])
    dist.broadcast(verdict, src=0)
    return bool(verdict.item()), section


def parse_modes(text: str) -> list[str]:
    """--mode: one mode, several separated by commas (run in that order), or `all`."""
    modes = list(MODES) if text == "all" else [m.strip() for m in text.split(",")]
    for m in modes:
        if m not in MODES:
            raise argparse.ArgumentTypeError(
                f"unknown mode {m!r}: choose from {', '.join(MODES)}, a comma-separated "
                "list, or all")
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"a mode given twice in {text!r}")
    return modes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", type=parse_modes, required=True, metavar="MODE[,MODE...]|all",
                        help=f"{', '.join(MODES)}; several run one after another in these "
                             "processes")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", help="write the figures here (rank 0), one section per mode")
    parser.add_argument("--plant-bug", action="store_true",
                        help=f"rank 1 steps with lr * {BUG_LR_SCALE} in every mode: each "
                             "comparison must fail")
    args = parser.parse_args()

    t0 = time.perf_counter()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit(f"train.py: run with 2 processes (torchrun --nproc-per-node 2), got {world}")
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,))
    assert BATCH % world == 0 and SEQ % world == 0 and DIM % world == 0 and HIDDEN % world == 0

    verdicts, sections = {}, {}
    for mode in args.mode:
        verdicts[mode], sections[mode] = run_mode(args, mode, mesh)
        gc.collect()  # the mode's modules, hooks and process-group users go before the next's
    failed = [m for m, ok in verdicts.items() if not ok]
    total_s = time.perf_counter() - t0
    if rank == 0:
        many = len(verdicts) > 1
        print(f"{'FAIL' if failed else 'PASS'}: {len(verdicts) - len(failed)} of {len(verdicts)} "
              f"mode{'s' if many else ''} match{'' if many else 'es'} the one-process run"
              + (f"; mismatched: {', '.join(failed)}" if failed else "")
              + f" ({total_s:.2f} s after imports)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({
                    "modes": sections, "failed": failed, "passed": not failed,
                    "steps": args.steps, "world_size": world, "lr": LR,
                    "plant_bug": args.plant_bug, "seconds": total_s,
                }, f, indent=1)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
