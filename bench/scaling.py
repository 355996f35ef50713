#!/usr/bin/env python3
"""bench/scaling.py: how cost grows with work, plotted (bench/scaling.png) and tabled (between
the bench/scaling markers of bench/RESULTS.md).

1. CPU kernels: time per element of each built-in op's float32 forward (and copy_, the
   yardstick) from 4 KiB to 256 MiB of input, on one ATen thread and on two
   (bench/kernels_cpu with CUSTOMOP_BENCH_SIZES and CUSTOMOP_BENCH_THREADS).
2. The harness: customop-gradcheck's op evaluations (forward calls + VJPs) and seconds against
   the number of input elements (bias_gelu on [n/8, 8] with a bias of 8) and against the
   number of inputs (weighted_sum of K inputs of 16 elements), slow and fast mode, one case
   per run, one thread, float64 (the precision probe, the layout variants and the op checks
   off, as bench/gradcheck_cost.py runs it). Slow mode's forward calls are fitted as
   a * (input elements) + b: a is 2 (one central difference per element).

Builds nothing: expects the build tree of bench/run (kernels_cpu, customop-gradcheck).
Usage: bench/scaling.py [--build build/primary] [--quick] [--no-write]
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN, END = "<!-- bench/scaling: begin -->", "<!-- bench/scaling: end -->"
KIB, MIB = 1 << 10, 1 << 20
SIZES = [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
OPS = ("rms_norm", "bias_gelu", "clamp_count", "masked_softmax", "max_along", "weighted_sum")
ELEMENTS = [8, 32, 128, 512, 2048]  # harness sweep: input elements of bias_gelu's x
INPUTS = [1, 2, 4, 8]  # harness sweep: weighted_sum's K


def fmt_size(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def kernels(build, threads, sizes):
    """{(name, bytes): ns per float32 input element}, name "copy_" or an op."""
    filt = "^(copy/copy_|copy/clone|(" + "|".join(OPS) + ")/customop)/"
    env = dict(os.environ, CUSTOMOP_BENCH_THREADS=str(threads),
               CUSTOMOP_BENCH_SIZES=",".join(str(s) for s in sizes))
    out = subprocess.run([os.path.join(build, "bench", "kernels_cpu"), "--benchmark_format=json",
                          f"--benchmark_filter={filt}"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"scaling: kernels_cpu exited {out.returncode}:\n{out.stderr[-2000:]}")
    result = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("error_occurred"):
            continue
        op, variant, size = b["name"].split("/")[:3]
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        name = variant if op == "copy" else op  # "copy_" or "clone"
        result[(name, int(size))] = b["real_time"] * scale / (int(size) / 4)
    return result


def spec_case(label, op, args):
    return {"op": op, "label": label, "args": args}


def tensor(shape, seed):
    rng = random.Random(seed)
    n = 1
    for s in shape:
        n *= s
    return {"tensor": {"shape": list(shape), "dtype": "float64",
                       "values": [rng.uniform(-2, 2) for _ in range(n)]}}


def harness(build, mode, cases):
    """[(label, forward calls, VJPs, seconds)] of the CLI on `cases`, one at a time."""
    cli = os.path.join(build, "gradcheck", "customop-gradcheck")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            spec, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
            with open(spec, "w") as f:
                json.dump({"cases": [case]}, f)
            cmd = [cli, "--samples", spec, "--device", "cpu", "--mode", mode, "--json", out, "-q",
                   "--jobs", "1", "--input-subsets", "none", "--no-precision-probe",
                   "--no-layout-variants", "--no-op-checks"]
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
            if proc.returncode != 0:
                sys.exit(f"scaling: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
            with open(out) as f:
                c = json.load(f)["cases"][0]
            r = c["result"]
            rows.append((case["label"], r["forward_calls"], r["vjp_calls"], c["seconds"]))
    return rows


def fit(xs, ys):
    """Least-squares a, b of y = a x + b."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return a, my - a * mx


def plot(path, sizes, k1, k2, by_elements, by_inputs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(17, 5))
    names = ("copy_", "clone") + OPS
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, name in zip(colors, names):
        xs = [s for s in sizes if (name, s) in k2]
        ax[0].plot(xs, [k2[(name, s)] for s in xs], "-o", color=c, ms=3, label=f"{name}, 2 threads")
        xs1 = [s for s in sizes if (name, s) in k1]
        ax[0].plot(xs1, [k1[(name, s)] for s in xs1], "--", color=c, lw=1, label=f"{name}, 1 thread")
    ax[0].set_xscale("log", base=2)
    ax[0].set_yscale("log")
    ax[0].set_xticks(sizes, [fmt_size(s) for s in sizes], rotation=45)
    ax[0].set_xlabel("input size (float32)")
    ax[0].set_ylabel("ns per input element (forward)")
    ax[0].set_title("CPU kernels: time per element")
    ax[0].legend(fontsize=6, ncol=2)
    for mode, style in (("slow", "-o"), ("fast", "-s")):
        xs = [e for e, _, _ in by_elements[mode]]
        ax[1].plot(xs, [f for _, f, _ in by_elements[mode]], style, label=f"{mode}: forward calls")
        ax[1].plot(xs, [v for _, _, v in by_elements[mode]], style, mfc="none",
                   label=f"{mode}: VJPs")
        ks = [k for k, _, _ in by_inputs[mode]]
        ax[2].plot(ks, [f for _, f, _ in by_inputs[mode]], style, label=f"{mode}: forward calls")
        ax[2].plot(ks, [v for _, _, v in by_inputs[mode]], style, mfc="none", label=f"{mode}: VJPs")
    ax[1].set_xscale("log", base=2)
    ax[1].set_yscale("log")
    ax[1].set_xlabel("input elements (bias_gelu x of [n/8, 8], bias of 8)")
    ax[1].set_ylabel("op evaluations per check")
    ax[1].set_title("gradcheck cost against elements")
    ax[1].legend(fontsize=7)
    ax[2].set_xlabel("inputs (weighted_sum of K tensors of 16)")
    ax[2].set_ylabel("op evaluations per check")
    ax[2].set_title("gradcheck cost against inputs")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "primary"))
    ap.add_argument("--quick", action="store_true", help="sizes up to 4 MiB only (a smoke test)")
    ap.add_argument("--no-write", action="store_true",
                    help="do not touch bench/RESULTS.md or bench/scaling.png")
    a = ap.parse_args()
    sizes = [s for s in SIZES if s <= 4 * MIB] if a.quick else SIZES
    k1 = kernels(a.build, 1, sizes)
    k2 = kernels(a.build, 2, sizes)
    by_elements, by_inputs, seconds = {}, {}, {}
    for mode in ("slow", "fast"):
        cases = [spec_case(f"bias_gelu [{n // 8}, 8]", "customop::bias_gelu",
                           [tensor((n // 8, 8), n), tensor((8,), 1), "none"]) for n in ELEMENTS]
        rows = harness(a.build, mode, cases)
        by_elements[mode] = [(n + 8, f, v) for n, (_, f, v, _) in zip(ELEMENTS, rows)]
        seconds[mode] = [s for *_, s in rows]
        cases = [spec_case(f"weighted_sum K={k}", "customop::weighted_sum",
                           [{"tensors": [tensor((16,), 100 + i) for i in range(k)]}, [0.5] * k])
                 for k in INPUTS]
        rows = harness(a.build, mode, cases)
        by_inputs[mode] = [(k, f, v) for k, (_, f, v, _) in zip(INPUTS, rows)]
    a_slow, b_slow = fit([e for e, _, _ in by_elements["slow"]], [f for _, f, _ in by_elements["slow"]])
    av_slow, bv_slow = fit(ELEMENTS, [v for _, _, v in by_elements["slow"]])  # per output element
    a_in, b_in = fit([k for k, _, _ in by_inputs["fast"]], [f for _, f, _ in by_inputs["fast"]])

    lines = [BEGIN, "",
             f"Scaling (bench/scaling.py; plotted in [scaling.png](scaling.png)). CPU kernels, "
             f"float32 forward, ns per input element, best of Google Benchmark's run (0.1 s "
             f"minimum), 1 thread / 2 threads:", ""]
    lines.append("| size | " + " | ".join(("copy_", "clone") + OPS) + " |")
    lines.append("|---" * (len(OPS) + 3) + "|")
    for s in sizes:
        cells = []
        for name in ("copy_", "clone") + OPS:
            one, two = k1.get((name, s)), k2.get((name, s))
            cells.append("-" if one is None or two is None else f"{one:.3g} / {two:.3g}")
        lines.append(f"| {fmt_size(s)} | " + " | ".join(cells) + " |")
    big = max(sizes)
    if all((n, big) in k2 for n in ("copy_", "clone") + OPS):
        ratios = sorted(k2[(op, big)] / k2[("clone", big)] for op in OPS)
        lines += ["", f"At {fmt_size(big)} on 2 threads, clone (a copy into a tensor it allocates) "
                  f"takes {k2[('clone', big)]:.3g} ns per element against copy_'s "
                  f"{k2[('copy_', big)]:.3g} (into a tensor allocated once): "
                  f"{k2[('clone', big)] / k2[('copy_', big)]:.2g}x, the first touch of freshly "
                  f"mapped pages. The ops, which allocate their outputs as clone does, take "
                  f"{ratios[0]:.2g}x to {ratios[-1]:.2g}x clone's time per element there."]
    lines += ["", "The harness, one case per run, one thread (op evaluations: forward calls + VJPs; "
              "seconds: the check itself):", "",
              "| case | slow fwd + vjp | slow s | fast fwd + vjp | fast s |", "|---|---|---|---|---|"]
    for i, n in enumerate(ELEMENTS):
        _, fs, vs = by_elements["slow"][i]
        _, ff, vf = by_elements["fast"][i]
        lines.append(f"| bias_gelu, {n} + 8 input elements | {fs} + {vs} | {seconds['slow'][i]:.4f} | "
                     f"{ff} + {vf} | {seconds['fast'][i]:.4f} |")
    for i, k in enumerate(INPUTS):
        _, fs, vs = by_inputs["slow"][i]
        _, ff, vf = by_inputs["fast"][i]
        lines.append(f"| weighted_sum, {k} input(s) of 16 | {fs} + {vs} | - | {ff} + {vf} | - |")
    lines += ["",
              f"Slow mode's forward calls grow as {a_slow:.2f} per input element + {b_slow:.0f} "
              f"(least squares over the bias_gelu rows) and its VJPs as {av_slow:.2f} per output "
              f"element + {bv_slow:.0f}: one central difference per input element, one VJP per "
              f"output element (the analytical Jacobian's rows), and a constant. Fast mode's "
              f"count does not grow with the elements "
              f"({by_elements['fast'][0][1]} + {by_elements['fast'][0][2]} at "
              f"{by_elements['fast'][0][0]} input elements, {by_elements['fast'][-1][1]} + "
              f"{by_elements['fast'][-1][2]} at {by_elements['fast'][-1][0]}); against the "
              f"number of inputs its forward calls grow as {a_in:.2f} per input + {b_in:.0f}: "
              f"one central difference (2 calls) along a random direction per input. Its "
              f"constant is the evaluation at the point (under grad mode, and once more as the "
              f"differences' base), and per output the reentrancy check's two VJPs, then one "
              f"VJP each for the grad_output-scaling and undefined-grad checks. Slow mode's "
              f"seconds grow as elements^2 ({seconds['slow'][-2]:.3g} s at {ELEMENTS[-2]}, "
              f"{seconds['slow'][-1]:.3g} s at {ELEMENTS[-1]}): O(n) calls, each over O(n) "
              f"elements, and Jacobians of n^2 entries; fast mode's go from "
              f"{seconds['fast'][0]:.3g} s to {seconds['fast'][-1]:.3g} s over the same range.",
              "", END]
    text = "\n".join(lines)
    print(text)
    if a.no_write:
        return
    plot(os.path.join(HERE, "scaling.png"), sizes, k1, k2, by_elements, by_inputs)
    path = os.path.join(HERE, "RESULTS.md")
    with open(path) as f:
        old = f.read()
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + text + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    with open(path, "w") as f:
        f.write(new)


if __name__ == "__main__":
    main()
