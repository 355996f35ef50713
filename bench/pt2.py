#!/usr/bin/env python3
"""bench/pt2.py: the digits model in the PyTorch 2 stack, side by side in ONE run.

1. Training step (Python, forward + backward + Adam step, batch 64, the demo's DigitsNet built
   from the customop ops): eager vs torch.compile(backend="inductor", fullgraph=True,
   dynamic=True). Compile time is reported apart; steps are timed after warm-up, in randomly
   interleaved rounds (median over rounds of the mean per step), one ATen thread.
2. Inference from C++ (bench/digits_infer.cpp): the TorchScript model (torch::jit::load) vs the
   torch.export + AOTInductor package (AOTIModelPackageLoader), batch 1 and 64.

Needs build/release with the examples and bench (targets customop_ops, digits_infer) and the
demo's artifacts (digits_model.pt, digits_model.pt2), which it makes with train.py when absent.
Usage: bench/pt2.py [--build build/release] [--rounds 15] [--no-write]
Writes its table into bench/RESULTS.md between the bench/pt2 markers (unless --no-write).
"""

import argparse
import datetime
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN, END = "<!-- bench/pt2: begin -->", "<!-- bench/pt2: end -->"


def log(msg):
    print(f"bench/pt2: {msg}", file=sys.stderr, flush=True)


def training_step(ops_lib, rounds, steps_per_round=20):
    import torch
    torch.ops.load_library(ops_lib)
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "examples" / "digits_demo"))
    from train import DigitsNet
    import torch.nn.functional as F

    torch.manual_seed(0)
    models = {"eager": DigitsNet(), "compiled": DigitsNet()}
    models["compiled"].load_state_dict(models["eager"].state_dict())
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in models.items()}

    def make_step(model):
        def loss_fn(x, y):
            return F.nll_loss(torch.log(model(x, None).clamp_min(1e-12)), y)
        return loss_fn

    fns = {"eager": make_step(models["eager"]),
           "compiled": torch.compile(make_step(models["compiled"]), backend="inductor",
                                     fullgraph=True, dynamic=True)}
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(64, 64, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)

    def step(kind):
        opts[kind].zero_grad()
        fns[kind](x, y).backward()
        opts[kind].step()

    t0 = time.perf_counter()
    step("compiled")
    compile_s = time.perf_counter() - t0
    for _ in range(3):
        step("eager")
        step("compiled")
    times = {"eager": [], "compiled": []}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(times)
        rng.shuffle(order)
        for kind in order:
            t0 = time.perf_counter()
            for _ in range(steps_per_round):
                step(kind)
            times[kind].append((time.perf_counter() - t0) / steps_per_round * 1e6)
    return {"eager_us": statistics.median(times["eager"]),
            "compiled_us": statistics.median(times["compiled"]),
            "compile_s": compile_s}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(ROOT / "build" / "release"))
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    build = pathlib.Path(args.build)
    ops_lib = build / "plugin" / "ops" / "libcustomop_ops.so"
    infer = build / "bench" / "digits_infer"
    demo = build / "digits_demo"
    for f in (ops_lib, infer):
        if not f.exists():
            sys.exit(f"bench/pt2: {f} missing; build {build} with the examples and the bench")
    if not (demo / "digits_model.pt2").exists() or not (demo / "digits_model.pt").exists():
        log("training the digits model (train.py) for its artifacts")
        subprocess.run([sys.executable, str(ROOT / "examples" / "digits_demo" / "train.py"),
                        "--ops-library", str(ops_lib), "--out", str(demo)], check=True)
    log("C++ inference: TorchScript vs AOTI")
    cpp = json.loads(subprocess.run(
        [str(infer), "--torchscript", str(demo / "digits_model.pt"), "--aoti",
         str(demo / "digits_model.pt2"), "--ops-library", str(ops_lib), "--rounds", str(args.rounds)],
        check=True, capture_output=True, text=True).stdout)
    log("Python training step: eager vs torch.compile (inductor)")
    train = training_step(str(ops_lib), args.rounds)

    import torch
    rows = [
        "| what | baseline | customop ops in the PyTorch 2 stack | ratio (baseline / PT2) |",
        "|---|---|---|---|",
        f"| training step, batch 64 (Python) | eager {train['eager_us']:.0f} us | "
        f"torch.compile inductor {train['compiled_us']:.0f} us (compile {train['compile_s']:.0f} s) | "
        f"{train['eager_us'] / train['compiled_us']:.2f}x |",
    ]
    for b in ("batch_1", "batch_64"):
        r = cpp[b]
        rows.append(f"| inference from C++, {b.replace('_', ' ')} | TorchScript {r['torchscript_us']:.1f} us | "
                    f"AOTInductor {r['aoti_us']:.1f} us (max |diff| {r['max_abs_diff']:.1e}) | "
                    f"{r['torchscript_us'] / r['aoti_us']:.2f}x |")
    header = (f"bench/pt2.py, {datetime.date.today()}, torch {torch.__version__}, one ATen thread, "
              f"median of {args.rounds} interleaved rounds:")
    table = header + "\n\n" + "\n".join(rows)
    print(table)
    if not args.no_write:
        path = HERE / "RESULTS.md"
        text = path.read_text()
        block = f"{BEGIN}\n{table}\n{END}"
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        else:
            text += "\n## The PyTorch 2 stack (bench/pt2.py)\n\n" + block + "\n"
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
