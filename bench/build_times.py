#!/usr/bin/env python3
"""CPU-seconds of a build per target group, from the build's own log (.ninja_log).

Each ninja edge runs one single-threaded compiler or linker, so its duration in .ninja_log is
its CPU time (on a machine not oversubscribed); the sum per group is the group's CPU-seconds,
whatever the parallelism. Groups by output path: core (plugin/ outside ops), ops (plugin/ops),
cuda_kernels, gradcheck, tests, examples, bench.

Usage: bench/build_times.py BUILD_DIR [BUILD_DIR ...]   (one column per build folder)
"""

import pathlib
import sys

GROUPS = [
    ("ops", "plugin/ops/"),
    ("core", "plugin/"),
    ("cuda_kernels", "cuda_kernels/"),
    ("gradcheck", "gradcheck/"),
    ("tests", "tests/"),
    ("examples", "examples/"),
    ("bench", "bench/"),
]


def read_log(build: pathlib.Path):
    """{output: seconds} for the last run of each output (ninja appends on every build)."""
    edges = {}
    lines = (build / ".ninja_log").read_text().splitlines()
    for line in lines[1:]:
        parts = line.split("\t")
        if len(parts) < 4:
            continue
        start, end, output = int(parts[0]), int(parts[1]), parts[3]
        edges[output] = (end - start) / 1000.0
    return edges


def group_of(output: str) -> str:
    for name, prefix in GROUPS:
        if output.startswith(prefix):
            return name
    return "other"


def main(argv) -> int:
    if not argv:
        print(__doc__)
        return 2
    builds = [pathlib.Path(a) for a in argv]
    tables = []
    for b in builds:
        per = {}
        objects = []
        for output, secs in read_log(b).items():
            g = group_of(output)
            per[g] = per.get(g, 0.0) + secs
            if output.endswith(".o"):
                objects.append((secs, output))
        tables.append((per, sorted(objects, reverse=True)[:5]))
    names = [n for n, _ in GROUPS] + ["other"]
    print("| group | " + " | ".join(str(b) for b in builds) + " |")
    print("|---|" + "---|" * len(builds))
    for n in names:
        if any(n in t[0] for t in tables):
            print(f"| {n} | " + " | ".join(f"{t[0].get(n, 0.0):.0f} s" for t in tables) + " |")
    print("| total | " + " | ".join(f"{sum(t[0].values()):.0f} s" for t in tables) + " |")
    for b, (_, top) in zip(builds, tables):
        print(f"\nslowest objects in {b}:")
        for secs, out in top:
            print(f"  {secs:6.1f} s  {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
