"""Gradcheck cost: customop-gradcheck (C++) vs torch.autograd.gradcheck (Python) over every
built-in op, on the same float64 CPU inputs, slow and fast mode.

The inputs are drawn here (fixed seed, away from the ops' kinks: no ties for max_along, no
value within 0.05 of clamp_count's bounds) and written as an input spec (values spelled out,
so both sides get bit-identical tensors, strides included); the CLI checks it with
--samples, torch.autograd.gradcheck checks the same tensors through
torch.ops.customop.<op> (libcustomop_ops.so loaded with torch.ops.load_library).

Cost, best of --reps interleaved repetitions:
- wall seconds of the checks: the CLI's run "seconds" (--json summary: all cases, on --jobs
  = every core at once, samples built and checks run; the float64 precision probe (torch has
  none; its cost is counted apart in each report) off; the layout variants and the op checks
  (fake kernel, mutation audit, out=, in-place, transforms: --no-op-checks) off, as torch has
  none),
  the sum of the time around each torch.autograd.gradcheck call (one ATen thread on both
  sides: torch checks one case after another). Also the CLI on one thread, the CLI
  with the layout variants and the CLI with the op checks (their costs, reported apart);
- the CLI warm, as torch is measured: the wall time of a run over the cases twice minus that
  of a run over them once (every core, no layout variants), i.e. the cost of a pass whose
  threads, allocator arenas and code pages are already warm. The once-only run stays
  reported as the cold figure;
- instructions (with --callgrind; bench/run runs the CLI under callgrind with
  --toggle-collect on run_spec_cases, the same spec from --write-spec);
- op evaluations: the CLI's forward_calls / vjp_calls; for torch, the calls of the wrapped
  function and the backward passes through its outputs (a hook on each output).
Torch runs warm (same process, from the second repetition); each CLI run is a fresh process,
so its one-time costs (first dispatcher / autograd use) count against it.
Prints one JSON object.
"""

import argparse
import collections
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def _tensor_spec(t, noncontiguous=False):
    """{"tensor": ...} of the input spec, values spelled out (float64 repr round-trips)."""
    d = {"shape": list(t.shape), "dtype": {torch.float64: "float64", torch.bool: "bool"}[t.dtype],
         "values": t.double().tolist()}
    if noncontiguous:
        d["noncontiguous"] = True
    return {"tensor": d}


def _noncontiguous(t):
    """t's values in a strided view (every other element of the last dim), as the spec's
    "noncontiguous": true builds it."""
    shape = list(t.shape)
    shape[-1] *= 2
    base = torch.zeros(shape, dtype=t.dtype)
    view = base[..., ::2]
    view.copy_(t)
    return view


def make_cases(seed):
    """[(label, op name, spec args (JSON), make() -> (fn, differentiable inputs))]."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def away_from(x, points, margin=0.05):
        for p in points:
            x = torch.where((x - p).abs() < margin, x + 2 * margin, x)
        return x

    def distinct(*shape):
        n = 1
        for s in shape:
            n *= s
        return (torch.randperm(n, generator=g).double() / n - 0.5).reshape(shape)

    ops = torch.ops.customop
    cases = []

    # rms_norm(input, weight, eps)
    x, w = randn(4, 8), randn(8)
    cases.append(("rms_norm [4, 8]", "customop::rms_norm", [_tensor_spec(x), _tensor_spec(w), 1e-6],
                  lambda x=x, w=w: (lambda a, b: ops.rms_norm(a, b, 1e-6), (x, w))))
    x, w = randn(3, 7), randn(7)
    cases.append(("rms_norm strided [3, 7]", "customop::rms_norm",
                  [_tensor_spec(x, True), _tensor_spec(w), 1e-3],
                  lambda x=x, w=w: (lambda a, b: ops.rms_norm(a, b, 1e-3), (_noncontiguous(x), w))))
    # bias_gelu(input, bias, approximate)
    for approx in ("none", "tanh"):
        x, b = randn(4, 8), randn(8)
        cases.append((f"bias_gelu {approx} [4, 8]", "customop::bias_gelu",
                      [_tensor_spec(x), _tensor_spec(b), approx],
                      lambda x=x, b=b, ap=approx: (lambda a, c: ops.bias_gelu(a, c, ap), (x, b))))
    # clamp_count(input, min, max): the count (an int) is not differentiable; torch's
    # gradcheck takes tensor outputs only, so the wrapper keeps the clamped tensor.
    for shape in ((20,), (4, 5)):
        x = away_from(randn(*shape), (-0.5, 0.5))
        cases.append((f"clamp_count {list(shape)}", "customop::clamp_count",
                      [_tensor_spec(x), -0.5, 0.5],
                      lambda x=x: (lambda a: ops.clamp_count(a, -0.5, 0.5)[0], (x,))))
    # masked_softmax(input, mask, dim)
    x, keep = randn(3, 6), torch.rand(3, 6, generator=g) > 0.3
    keep[:, 0] = True
    cases.append(("masked_softmax mask [3, 6]", "customop::masked_softmax",
                  [_tensor_spec(x), _tensor_spec(keep), -1],
                  lambda x=x, keep=keep: (lambda a: ops.masked_softmax(a, keep, -1), (x,))))
    x = randn(4, 5)
    cases.append(("masked_softmax dim 0 [4, 5]", "customop::masked_softmax",
                  [_tensor_spec(x), None, 0],
                  lambda x=x: (lambda a: ops.masked_softmax(a, None, 0), (x,))))
    # max_along(input, dim, keepdim)
    x = distinct(4, 6)
    cases.append(("max_along dim -1 [4, 6]", "customop::max_along", [_tensor_spec(x), -1, False],
                  lambda x=x: (lambda a: ops.max_along(a, -1, False), (x,))))
    x = distinct(5, 3)
    cases.append(("max_along dim 0 keepdim [5, 3]", "customop::max_along",
                  [_tensor_spec(x), 0, True],
                  lambda x=x: (lambda a: ops.max_along(a, 0, True), (x,))))
    # weighted_sum(inputs, weights)
    for k, shape in ((2, (3, 4)), (3, (5,))):
        xs = [randn(*shape) for _ in range(k)]
        ws = [0.5, 2.0, -1.0][:k]
        cases.append((f"weighted_sum K={k} {list(shape)}", "customop::weighted_sum",
                      [{"tensors": [_tensor_spec(t) for t in xs]}, ws],
                      lambda xs=xs, ws=ws: (lambda *a: ops.weighted_sum(list(a), ws), tuple(xs))))
    return cases


class Counted:
    """fn, counting its calls and the backward passes through its outputs."""

    def __init__(self, fn):
        self.fn, self.forward_calls, self.vjp_calls = fn, 0, 0

    def _hook(self, grad):
        self.vjp_calls += 1

    def __call__(self, *args):
        self.forward_calls += 1
        out = self.fn(*args)
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and o.requires_grad:
                o.register_hook(self._hook)
        return out


def run_torch(cases, fast):
    rows = []
    for label, op, _, make in cases:
        fn, inputs = make()
        inputs = tuple(t.detach().requires_grad_(t.dtype.is_floating_point) for t in inputs)
        counted = Counted(fn)
        t0 = time.perf_counter()
        try:
            ok = torch.autograd.gradcheck(counted, inputs, fast_mode=fast, raise_exception=False)
        except Exception as e:  # an op error is a failed verdict, as in the CLI
            print(f"gradcheck_cost: torch {label}: {e}", file=sys.stderr)
            ok = False
        rows.append({"label": label, "op": op, "passed": bool(ok),
                     "seconds": time.perf_counter() - t0,
                     "forward_calls": counted.forward_calls, "vjp_calls": counted.vjp_calls})
    return rows


def run_cli(cli, spec, fast, workdir, jobs, layout, op_checks=False):
    """The CLI's cases (from its --json), the wall time of its checks (the run's "seconds":
    cases on `jobs` threads at once) and its process wall time. `layout`: with the layout
    variants (their cost is reported apart, as the issue asks)."""
    out = os.path.join(workdir, "cli.json")
    cmd = [cli, "--samples", spec, "--device", "cpu", "--mode", "fast" if fast else "slow",
           "--json", out, "-q", "--jobs", str(jobs),
           # the input subsets off in every run (torch has none; their cost is counted, not timed)
           "--input-subsets", "none", "--no-precision-probe"] + \
        ([] if layout else ["--no-layout-variants"]) + \
        ([] if op_checks else ["--no-op-checks"])
    t0 = time.perf_counter()
    # One ATen thread, as torch.set_num_threads(1) on the Python side.
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    process_s = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"gradcheck_cost: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    with open(out) as f:
        data = json.load(f)
    rows = []
    for c in data["cases"]:
        r = c.get("result") or {}
        rows.append({"label": c["label"], "op": c["op"], "passed": c["status"] == "passed",
                     "seconds": c["seconds"], "forward_calls": r.get("forward_calls", 0),
                     "vjp_calls": r.get("vjp_calls", 0),
                     "layout_forward_calls": r.get("layout_forward_calls", 0),
                     "layout_vjp_calls": r.get("layout_vjp_calls", 0)})
    return rows, data["summary"]["seconds"], process_s


def total(rows, key):
    return sum(r[key] for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", help="path of customop-gradcheck (timing mode)")
    p.add_argument("--lib", required=True, help="path of libcustomop_ops.so")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (best is kept)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-spec", metavar="PATH",
                   help="only write the input spec (for a callgrind run of the CLI), then exit")
    p.add_argument("--callgrind", metavar="LIB",
                   help="libcallgrind_toggle.so: count torch's instructions instead of timing; "
                        "dumps 'torch/slow' and 'torch/fast' (run under valgrind --tool=callgrind "
                        "--instr-atstart=no --collect-atstart=no; bench/run does)")
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.ops.load_library(a.lib)
    cases = make_cases(a.seed)
    spec = {"cases": [{"op": op, "label": label, "args": args} for label, op, args, _ in cases]}
    if a.write_spec:
        with open(a.write_spec, "w") as f:
            json.dump(spec, f)
        return
    result = {"torch": torch.__version__, "cases": len(cases), "reps": a.reps, "modes": {}}
    if a.callgrind:
        cg = ctypes.CDLL(a.callgrind)
        cg.customop_callgrind_dump.argtypes = [ctypes.c_char_p]
        cg.customop_callgrind_start()
        for mode in ("slow", "fast"):
            run_torch(cases, mode == "fast")  # warm-up, not collected (as the timed runs)
            cg.customop_callgrind_toggle_collect()
            rows = run_torch(cases, mode == "fast")
            cg.customop_callgrind_toggle_collect()
            cg.customop_callgrind_dump(f"torch/{mode}".encode())
            result["modes"][mode] = {"torch_forward_calls": total(rows, "forward_calls"),
                                     "torch_vjp_calls": total(rows, "vjp_calls")}
        json.dump(result, sys.stdout, indent=1)
        print()
        return
    if not a.cli:
        sys.exit("gradcheck_cost: --cli is required (unless --write-spec or --callgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        spec2_path = os.path.join(tmp, "spec2.json")  # the cases twice: the warm pass's cost
        with open(spec2_path, "w") as f:
            json.dump({"cases": spec["cases"] * 2}, f)
        best, process_s = {}, collections.defaultdict(list)
        wall = collections.defaultdict(lambda: float("inf"))  # (mode, variant) -> best seconds
        jobs = os.cpu_count() or 1
        for rep in range(a.reps):
            for mode in ("slow", "fast"):
                # The CLI links libcustomop_ops.so already (its built-in ops): no --load.
                # The verdict run: every core, no layout variants (torch has none); then one
                # thread, and every core with the variants, for the figures beside it.
                cli_rows, secs, proc_s = run_cli(a.cli, spec_path, mode == "fast", tmp, jobs, False)
                process_s[mode].append(proc_s)
                wall[(mode, "cli")] = min(wall[(mode, "cli")], secs)
                _, secs1, _ = run_cli(a.cli, spec_path, mode == "fast", tmp, 1, False)
                wall[(mode, "cli_1job")] = min(wall[(mode, "cli_1job")], secs1)
                layout_rows, secs_l, _ = run_cli(a.cli, spec_path, mode == "fast", tmp, jobs, True)
                wall[(mode, "cli_layout")] = min(wall[(mode, "cli_layout")], secs_l)
                _, secs_o, _ = run_cli(a.cli, spec_path, mode == "fast", tmp, jobs, False, True)
                wall[(mode, "cli_op_checks")] = min(wall[(mode, "cli_op_checks")], secs_o)
                _, secs2, _ = run_cli(a.cli, spec2_path, mode == "fast", tmp, jobs, False)
                wall[(mode, "cli_twice")] = min(wall[(mode, "cli_twice")], secs2)
                best[(mode, "layout")] = layout_rows
                torch_rows = run_torch(cases, mode == "fast")
                for side, rows in (("cli", cli_rows), ("torch", torch_rows)):
                    key = (mode, side)
                    if key not in best or total(rows, "seconds") < total(best[key], "seconds"):
                        best[key] = rows
        for mode in ("slow", "fast"):
            cli, tor = best[(mode, "cli")], best[(mode, "torch")]
            by_label = {r["label"]: r for r in cli}
            disagree = [r["label"] for r in tor
                        if r["label"] not in by_label or by_label[r["label"]]["passed"] != r["passed"]]
            lay = best[(mode, "layout")]
            result["modes"][mode] = {
                "cli_seconds": wall[(mode, "cli")],
                "cli_jobs": jobs,
                "cli_seconds_1job": wall[(mode, "cli_1job")],
                "cli_seconds_twice": wall[(mode, "cli_twice")],
                "cli_seconds_warm": wall[(mode, "cli_twice")] - wall[(mode, "cli")],
                "cli_case_seconds": total(cli, "seconds"),
                "cli_seconds_with_layout": wall[(mode, "cli_layout")],
                "cli_seconds_with_op_checks": wall[(mode, "cli_op_checks")],
                "layout_forward_calls": total(lay, "layout_forward_calls"),
                "layout_vjp_calls": total(lay, "layout_vjp_calls"),
                "layout_verdicts_equal": [r["passed"] for r in lay] == [r["passed"] for r in cli],
                "cli_process_seconds": min(process_s[mode]),
                "torch_seconds": total(tor, "seconds"),
                "cli_forward_calls": total(cli, "forward_calls"),
                "cli_vjp_calls": total(cli, "vjp_calls"),
                "torch_forward_calls": total(tor, "forward_calls"),
                "torch_vjp_calls": total(tor, "vjp_calls"),
                "cli_passed": sum(r["passed"] for r in cli),
                "torch_passed": sum(r["passed"] for r in tor),
                "verdicts_equal": not disagree and len(cli) == len(tor),
                "disagreements": disagree,
                "per_case": [{"label": t["label"], "cli": by_label.get(t["label"]), "torch": t}
                             for t in tor],
            }
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
