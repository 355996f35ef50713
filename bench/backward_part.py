"""bench/run's backward part: bench/backward_cpu (each op's backward against its ATen
composite's backward) run, and its rows of the table. A module of its own beside bench/run.

The targets are the forward kernels': a compute-bound backward (bias_gelu's: erf and exp per
element) at least 1.5x the composite's, a memory-bound one at least 60 % of kernels_cpu's copy
bandwidth of the same bench/run run; both at 16 and 256 MiB of float32 input, float32. The
16-bit dtypes are shown against their composite (info). Info rows set the memory-bound ones
against ATen's add(out=) over three tensors of the size (backward_cpu's yardstick/add_out): the
same footprint as a backward that reads two tensors and writes one (48 MiB at 16 MiB, more than
the 32 MiB last-level cache, where kernels_cpu's copy_ of 16 MiB moves 32 MiB).
"""

import os
import re

MIB = 1 << 20
SIZES = (1 * MIB, 16 * MIB, 256 * MIB)
LARGE = (16 * MIB, 256 * MIB)
OPS = ("rms_norm", "bias_gelu", "clamp_count", "masked_softmax", "max_along", "weighted_sum")
# bias_gelu's backward evaluates erf and exp per element (tens of flops); the others a few
# multiplies and adds per element moved (masked_softmax's backward has no exp).
COMPUTE_BOUND = ("bias_gelu",)
LOW_DTYPES = ("bf16", "fp16")


def run(build, quick, gbench, to_ns):
    """{(op, variant, bytes): GB/s over bytes_moved}, {name: error}: backward_cpu's best of 3
    repetitions in random order (1, without 256 MiB, for --quick)."""
    extra = ["--benchmark_repetitions=1" if quick else "--benchmark_repetitions=3",
             "--benchmark_enable_random_interleaving=true"]
    if quick:
        extra.append("--benchmark_filter=/(1048576|16777216)$")
    _, runs, errors = gbench(os.path.join(build, "bench", "backward_cpu"), extra)
    gbs = {}
    for name, bs in runs.items():  # <op>[@bf16|@fp16]/<customop|composite>/<bytes>
        m = re.match(r"([\w@]+)/(customop|composite|add_out)/(\d+)$", name)
        if m:
            best = min(to_ns(b, "real_time") for b in bs)
            gbs[(m.group(1), m.group(2), int(m.group(3)))] = bs[0]["bytes_moved"] / best
    return gbs, errors


def rows(b, copy, add, fmt_size, x):
    """Adds the backward rows through add(part, comparison, case, value, target, ok): `b` from
    run(), `copy` {bytes: copy GB/s} of kernels_cpu in the same run (may lack a size)."""
    sizes = [s for s in SIZES if any(k[2] == s for k in b)]
    case = ", ".join(fmt_size(s) for s in sizes)
    part = "3b CPU backward"
    stream = [b.get(("yardstick", "add_out", s)) for s in sizes]
    if any(stream):
        add(part, "add(out=) bandwidth, GB/s (float32, a + b into c, each of the size)", case,
            " / ".join("n/a" if v is None else f"{v:.1f}" for v in stream), "(yardstick)", None)
    for op in OPS:
        sp = [b[(op, "customop", s)] / b[(op, "composite", s)]
              if b.get((op, "composite", s)) and (op, "customop", s) in b else None for s in sizes]
        large = [v for s, v in zip(sizes, sp) if s in LARGE and v is not None]
        bound = op in COMPUTE_BOUND
        add(part, f"{op} backward: customop speed / composite backward speed", case,
            " / ".join(x(v) for v in sp),
            ">= 1.5x at 16, 256 MiB" if bound else "(memory-bound: info)",
            (all(v >= 1.5 for v in large) if large else None) if bound else None)
        pct = [100 * b[(op, "customop", s)] / copy[s]
               if (op, "customop", s) in b and copy.get(s) else None for s in sizes]
        large = [v for s, v in zip(sizes, pct) if s in LARGE and v is not None]
        add(part, f"{op} backward: customop GB/s / copy GB/s", case,
            " / ".join("n/a" if v is None else f"{v:.0f}%" for v in pct),
            "(compute-bound: info)" if bound else ">= 60% at 16, 256 MiB",
            None if bound else (all(v >= 60 for v in large) if large else None))
        if not bound:
            pct = [100 * b[(op, "customop", s)] / b[("yardstick", "add_out", s)]
                   if (op, "customop", s) in b and b.get(("yardstick", "add_out", s)) else None
                   for s in sizes]
            add(part, f"{op} backward: customop GB/s / add(out=) GB/s, 3 tensors of the size",
                case, " / ".join("n/a" if v is None else f"{v:.0f}%" for v in pct), "(info)", None)
        for low in LOW_DTYPES:
            key = f"{op}@{low}"
            sp = [b[(key, "customop", s)] / b[(key, "composite", s)]
                  if b.get((key, "composite", s)) and (key, "customop", s) in b else None
                  for s in sizes]
            add(part, f"{op} backward {low}: customop speed / composite backward speed ({low})",
                case, " / ".join(x(v) for v in sp), "(info)", None)


def details(b):
    """The raw GB/s behind the rows, as markdown lines."""
    if not b:
        return []
    sizes = sorted({k[2] for k in b})
    keys = sorted({k[0] for k in b if k[0] != "yardstick"}, key=lambda k: (k.split("@")[0], k))
    out = ["", "CPU backward, GB/s over the bytes the backward must move (bench/backward_cpu, best of "
           "the repetitions):", "",
           "| op | " + " | ".join(f"{s // MIB} MiB customop / composite" for s in sizes) + " |",
           "|---|" + "---|" * len(sizes)]
    for k in keys:
        cells = [f"{b.get((k, 'customop', s), 0):.1f} / {b.get((k, 'composite', s), 0):.1f}"
                 for s in sizes]
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    return out
