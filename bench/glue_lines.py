#!/usr/bin/env python3
"""Counts the glue lines of examples/fused_leaky_relu's two registrations of one op.

Glue: the code that turns the shared kernels (tensor_kernels.h) into a dispatcher op with a
differentiable backward op, fake kernels and double backward; non-blank lines that are not
`//` comments. customop's count includes the header with its args structs (the by-hand version
needs none: its schema strings carry the arguments).

Usage: bench/glue_lines.py [--max-ratio R]
  prints one line per version and the ratio customop / by hand; with --max-ratio, exits 1 when
  the ratio is above R (the test command runs it with 0.7).
"""

import argparse
import pathlib
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "fused_leaky_relu"
VERSIONS = {
    "customop": ["fused_leaky_relu.h", "fused_leaky_relu_customop.cpp"],
    "TORCH_LIBRARY + autograd::Function": ["fused_leaky_relu_by_hand.cpp"],
}


def glue_lines(path: pathlib.Path) -> int:
    count = 0
    in_block = False
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if in_block:
            in_block = "*/" not in line
            continue
        if line.startswith("/*"):
            in_block = "*/" not in line
            continue
        if line and not line.startswith("//"):
            count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-ratio", type=float, default=None)
    args = parser.parse_args()
    counts = {}
    for version, files in VERSIONS.items():
        counts[version] = sum(glue_lines(EXAMPLE / f) for f in files)
        print(f"{version:36s} {counts[version]:4d} lines  ({', '.join(files)})")
    ours, theirs = counts["customop"], counts["TORCH_LIBRARY + autograd::Function"]
    ratio = ours / theirs
    print(f"ratio customop / by hand: {ratio:.2f}")
    if args.max_ratio is not None and ratio > args.max_ratio:
        print(f"glue_lines: ratio {ratio:.2f} is above the goal {args.max_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
