"""The sharding check: an op's declared rule against the op itself, on a 2-rank mesh.

For each sample (float64) and each combination of input placements (every tensor Replicate or
Shard(d) for each dim of size >= 2; at most `max_combinations`, the first ones in a fixed
order, which are all one-sharded-input combinations first), the op runs on DTensors and its
outputs and the grads of its floating inputs (dense random cotangents, the same on every rank)
are gathered and compared with the op on the whole tensors. A combination the rule lists is
run as is; the others make DTensor redistribute (both must be right). A mismatch beyond
rtol/atol is a failure naming the op, the placements, the output or grad and the worst element.

Process group: two worker processes (spawn) over gloo on 127.0.0.1, the torch.distributed
backend training uses on CPU. torch's fake process group computes no collective (a missing
Partial would pass unseen) and its threaded group is test-only internals; two processes cost
one torch import each (seconds) per check, not per sample.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import socket
import sys
import tempfile
import traceback

import torch

from . import _errors
from ._op_names import op_name

DEFAULT_RTOL = 1e-9  # float64: sums split over ranks differ from whole sums by a few ulps
DEFAULT_ATOL = 1e-12


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _placements_of(t: torch.Tensor):
    from torch.distributed.tensor import Replicate, Shard

    return [Replicate()] + [Shard(d) for d in range(t.dim()) if t.size(d) >= 2]


def _text(p) -> str:
    from torch.distributed.tensor import Partial, Replicate, Shard

    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Shard):
        return f"S{p.dim}"
    if isinstance(p, Partial):
        return "P"
    return str(p)


def _leaves(schema, args):
    """(argument name, tensor) per tensor argument, a Tensor[]'s tensors one by one."""
    out = []
    for a, v in zip(schema.arguments, args):
        if isinstance(v, torch.Tensor):
            out.append((a.name, v))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
            out.extend((f"{a.name}[{k}]", x) for k, x in enumerate(v))
    return out


def _replace_leaves(schema, args, new):
    it = iter(new)
    out = []
    for v in args:
        if isinstance(v, torch.Tensor):
            out.append(next(it))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
            out.append([next(it) for _ in v])
        else:
            out.append(v)
    return out


def _outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _combinations(tensors, max_combinations, listed=()):
    """Placement combinations, at most max_combinations: those the rule lists first, then one
    sharded input with the others replicated, then the rest (up to 100000 enumerated)."""
    options = [_placements_of(t) for t in tensors]
    every = list(itertools.islice(itertools.product(*options), 100000))

    def rank(combo):
        texts = tuple(_text(p) for p in combo)
        sharded = sum(t != "R" for t in texts)
        return (texts not in listed, sharded != 1)
    return sorted(every, key=rank)[:max_combinations]


def _worst(a: torch.Tensor, b: torch.Tensor, rtol, atol):
    """(passed, flat index, |diff|, a there, b there) of |a - b| against atol + rtol |b|."""
    if a.shape != b.shape:
        return False, None, float("inf"), None, None
    if a.numel() == 0:
        return True, None, 0.0, None, None
    a64, b64 = a.double(), b.double()
    diff = (a64 - b64).abs()
    same_nonfinite = (~torch.isfinite(b64)) & ((a64 == b64) | (a64.isnan() & b64.isnan()))
    diff = torch.where(same_nonfinite, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)
    excess = diff - (atol + rtol * b64.abs().nan_to_num(posinf=0.0, neginf=0.0))
    k = int(excess.flatten().argmax())
    idx = list(torch.unravel_index(torch.tensor(k), a.shape))
    return (bool((excess <= 0).all()), [int(i) for i in idx], float(diff.flatten()[k]),
            float(a64.flatten()[k]), float(b64.flatten()[k]))


def _run_case(op, schema, args, mesh, rule, rtol, atol, seed, max_combinations, label):
    from torch.distributed.tensor import distribute_tensor

    from . import _sharding

    if len(args) != len(schema.arguments):
        raise ValueError(f"{schema.name}: a sample gives {len(args)} argument(s), the schema has "
                         f"{len(schema.arguments)} ({', '.join(a.name for a in schema.arguments)})")
    leaves = _leaves(schema, args)
    names = [n for n, _ in leaves]
    full = [t.detach().clone() for _, t in leaves]
    grad_wanted = [t.is_floating_point() for t in full]
    # The op on whole tensors: outputs and grads (the reference). An op without a backward is
    # checked forward only.
    try:
        ref_in = [t.clone().requires_grad_(g) for t, g in zip(full, grad_wanted)]
        ref_out = _outputs(op(*_replace_leaves(schema, args, ref_in)))
    except NotImplementedError:
        grad_wanted = [False] * len(full)
        ref_in = [t.clone() for t in full]
        ref_out = _outputs(op(*_replace_leaves(schema, args, ref_in)))
    gen = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype)
                  if o.is_floating_point() and o.requires_grad else None for o in ref_out]
    diff_in = [t for t in ref_in if t.requires_grad]

    def grads_of(outs, inputs):
        terms = [(o * c).sum() for o, c in zip(outs, cotangents) if c is not None]
        if not terms or not inputs:
            return [None] * len(inputs)
        return list(torch.autograd.grad(sum(terms), inputs, allow_unused=True))

    ref_grads = grads_of(ref_out, diff_in)
    out_names = [r.name or str(i) for i, r in enumerate(schema.returns)]
    accepted = []
    if rule is not None:
        fake = [type("Spec", (), {"shape": t.shape})() for t in full]
        try:
            accepted = [tuple(_text(p) for p in ins) for _, ins in _sharding.strategies(
                rule, schema, _replace_leaves(schema, args, fake), {},
                [o.dim() for o in ref_out])]
        except ValueError:
            accepted = []  # the rule cannot place an output: the call below says so
    failures, combos, listed = [], 0, 0
    for combo in _combinations(full, max_combinations, accepted):
        combos += 1
        placement_text = ", ".join(f"{n}: {_text(p)}" for n, p in zip(names, combo))
        listed += tuple(_text(p) for p in combo) in accepted
        try:
            dt_in = [distribute_tensor(t, mesh, [p]).requires_grad_(g)
                     for t, p, g in zip(full, combo, grad_wanted)]
            dt_out = _outputs(op(*_replace_leaves(schema, args, dt_in)))
            got_out = [o.full_tensor() if hasattr(o, "full_tensor") else o for o in dt_out]
            dt_diff = [t for t in dt_in if t.requires_grad]
            got_grads = [g.full_tensor() if g is not None and hasattr(g, "full_tensor") else g
                         for g in grads_of(got_out, dt_diff)]
        except Exception as e:  # noqa: BLE001 (a report, with the op's message)
            failures.append({"placements": placement_text, "what": "the call",
                             "message": f"{type(e).__name__}: {_errors.text(e)}".strip()})
            continue
        checks = [(f"output '{n}'", g, r) for n, g, r in zip(out_names, got_out, ref_out)]
        diff_names = [n for n, t in zip(names, ref_in) if t.requires_grad]
        checks += [(f"grad of '{n}'", g, r) for n, g, r in zip(diff_names, got_grads, ref_grads)
                   if r is not None]
        for what, got, want in checks:
            if got is None:
                failures.append({"placements": placement_text, "what": what,
                                 "message": "no grad came back from the DTensor run"})
                continue
            ok, idx, d, a, b = _worst(got.detach(), want.detach(), rtol, atol)
            if not ok:
                failures.append({"placements": placement_text, "what": what, "index": idx,
                                 "sharded": a, "whole": b, "abs_error": d,
                                 "message": f"{what} differs from the op on whole tensors: at "
                                            f"{idx} sharded run {a!r}, whole {b!r} "
                                            f"(|error| {d:.3g} > atol {atol:g} + rtol {rtol:g})"
                                            if idx is not None else
                                            f"{what} has shape {tuple(got.shape)}, the op on "
                                            f"whole tensors {tuple(want.shape)}"})
    return {"label": label, "combinations": combos, "listed_by_rule": listed,
            "redistributed": combos - listed, "failures": failures,
            "passed": not failures}


def format_sharding_failure(report: dict, limit: int = 8) -> str:
    """The failures of one check_sharding report as text: the op, the sample, the rule, and per
    failure the placements, the output or grad, the worst element and both values."""
    head = (f"sharding check of {report.get('op')} ({report.get('label')}), rule "
            f"{report.get('rule') or 'none declared'}: {report.get('combinations', 0)} placement "
            f"combinations, {report.get('listed_by_rule', 0)} listed by the rule")
    if report.get("passed"):
        return head + ": passed"
    failures = report.get("failures", [])
    lines = [head + f": {len(failures)} failure(s)"]
    for f in failures[:limit]:
        lines.append(f"  [{f.get('placements')}] {f.get('message')}")
    if len(failures) > limit:
        lines.append(f"  ... and {len(failures) - limit} more")
    return "\n".join(lines)


def _overload_of(name: str):
    qualified, _, overload = name.partition(".")
    ns, opname = qualified.split("::", 1)
    return getattr(getattr(getattr(torch.ops, ns), opname), overload or "default")


def _run_cases(cases, mesh, options, world_size):
    """One report per (op name, label, args) case, in order."""
    from . import _sharding

    rules = _sharding.declared_rules()
    reports = []
    for k, (name, label, args) in enumerate(cases):
        rule = rules.get(name.partition(".")[0])
        kind = rule["kind"] if rule else None
        try:
            op = _overload_of(name)
            rep = _run_case(op, op._schema, args, mesh, rule if kind else None, options["rtol"],
                            options["atol"], options["seed"] + k, options["max_combinations"],
                            label)
        except Exception as e:  # noqa: BLE001 (a report, with the message)
            # The op (or the sample) failed before any DTensor ran: nothing says the rule is
            # wrong, so the report says the check could not run.
            rep = {"label": label, "passed": False, "combinations": 0, "listed_by_rule": 0,
                   "redistributed": 0, "not_run": True,
                   "failures": [{"placements": "", "what": "the op on whole tensors",
                                 "message": f"{type(e).__name__}: {_errors.text(e)}\n"
                                            f"{traceback.format_exc(limit=3)}"}]}
        rep.update(op=name, rule=kind, world_size=world_size)
        reports.append(rep)
    return reports


def _worker(rank: int, job_path: str) -> None:
    job = torch.load(job_path, weights_only=False)
    world_size = job["world_size"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        import customop
        from torch.distributed.device_mesh import init_device_mesh

        for lib in job["libraries"]:
            customop.load_library(lib)
        customop._sharding.register_declared_rules()
        mesh = init_device_mesh("cpu", (world_size,))
        reports = _run_cases(job["cases"], mesh, job["options"], world_size)
        if rank == 0:
            pathlib.Path(job["out_path"]).write_text(json.dumps(reports))
        # Both ranks done before either leaves; the line tells a crash after the work (in a
        # failure's log tail) from one during it.
        dist.barrier()
        print(f"sharding worker {rank}: {len(reports)} case(s) run", flush=True)
    except BaseException:
        traceback.print_exc()
        code = 1
    else:
        code = 0
    # Leave without tearing down the process group or the interpreter. A worker died with
    # "terminate called without an active exception" (SIGABRT) in 2 of ~130 checks, at a point
    # its log did not show (it printed nothing else); gloo's threads against interpreter
    # finalization abort that way (pytorch/pytorch#179291), and 60 of 60 checks passed after
    # this change. Nothing is left to save: rank 0's reports are written and closed above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _cpu_float64(v):
    """v's tensors on the CPU, floating ones in float64: the workers are CPU processes over
    gloo, so a sample on another device (CUDA) is checked from its CPU copy."""
    if isinstance(v, torch.Tensor):
        return v.to("cpu", torch.float64) if v.is_floating_point() else v.to("cpu")
    return type(v)(_cpu_float64(x) for x in v) if isinstance(v, (list, tuple)) else v


def _detached(v):
    if isinstance(v, torch.Tensor):
        return v.detach()
    return type(v)(_detached(x) for x in v) if isinstance(v, (list, tuple)) else v


def job_cases(cases):
    """The cases as the workers get them: every tensor detached and copied to the CPU (the
    workers run gloo on CPU processes, so a sample on a GPU is checked from its CPU copy),
    floating ones in float64 (the tolerances are float64's: a float32 or bfloat16 sample would
    make a correct rule's reordered sums look wrong)."""
    return [(name, label, [_cpu_float64(_detached(a)) for a in args])
            for name, label, args in cases]


def run_cases(cases, *, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL, seed=0, max_combinations=64,
              timeout=600.0, world_size=2) -> list[dict]:
    """check_sharding for several ops at once, one pair of worker processes for all:
    `cases` is a list of (op name, label, args). Returns one report per case, in order."""
    import subprocess
    import time

    from . import _sharding

    if world_size < 2:
        raise ValueError(f"sharding check: world_size must be at least 2 (a rule is only "
                         f"exercised across ranks), got {world_size}")
    for k, case in enumerate(cases):
        if not (isinstance(case, (tuple, list)) and len(case) == 3 and isinstance(case[0], str)
                and "::" in case[0] and isinstance(case[1], str)
                and isinstance(case[2], (tuple, list))):
            raise TypeError(f"sharding check: case {k} must be (\"ns::name\", label, [one value "
                            f"per schema argument]), got {case!r:.200}")
    what = ", ".join(sorted({c[0] for c in cases})) or "no op"
    options = {"rtol": rtol, "atol": atol, "seed": seed, "max_combinations": max_combinations}
    package_root = str(pathlib.Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cases = job_cases(cases)
    with tempfile.TemporaryDirectory(prefix="customop_sharding_") as tmp:
        job_path = os.path.join(tmp, "job.pt")
        out_path = os.path.join(tmp, "reports.json")
        torch.save({"world_size": world_size, "port": _free_port(), "cases": cases,
                    "libraries": list(_sharding.loaded_libraries), "options": options,
                    "out_path": out_path}, job_path)
        logs = [open(os.path.join(tmp, f"rank{r}.log"), "w+") for r in range(world_size)]
        procs = [subprocess.Popen([sys.executable, "-m", "customop._sharding_main", "--worker",
                                   str(r), job_path], stdout=logs[r], stderr=subprocess.STDOUT,
                                  env=env) for r in range(world_size)]
        deadline = time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                    break
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        codes = [p.returncode for p in procs]
        try:
            if any(c != 0 for c in codes) or not os.path.exists(out_path):
                tails = []
                for r, log in enumerate(logs):
                    log.seek(0)
                    tails.append(f"--- rank {r} (exit {codes[r]}) ---\n" + log.read()[-3000:])
                timed_out = time.monotonic() > deadline
                raise RuntimeError(f"sharding check of {what}: the {world_size} workers "
                                   + (f"did not finish within {timeout:g} s" if timed_out else
                                      f"failed (exit codes {codes})") + "\n" + "\n".join(tails))
            return json.loads(pathlib.Path(out_path).read_text())
        finally:
            for log in logs:
                log.close()


def check_sharding(op, samples, **options) -> list[dict]:
    """Checks `op`'s declared sharding rule on each sample (tensors copied to the CPU, floating
    ones cast to float64):
    see the module's docstring. `op`: "ns::name[.overload]", an OpOverload or OpOverloadPacket,
    a torch.library.custom_op or a customop function; `samples`: a list of (label, args) with
    one value per schema argument (TypeError otherwise). An op without a backward is checked
    forward only. Options: rtol (1e-9), atol (1e-12), seed, max_combinations
    (64), timeout (600 s), world_size (2). The workers are fresh Python processes (this
    interpreter, this customop package, the libraries customop.load_library loaded), so it
    works from scripts and notebooks alike.
    Returns one report per sample: {"op", "label", "rule", "passed", "combinations",
    "listed_by_rule", "redistributed", "failures": [{"placements", "what", "index",
    "sharded", "whole", "abs_error", "message"}]}. Raises RuntimeError naming the op when a
    worker fails or the workers time out (their output's tail kept)."""
    name = op_name(op)  # the same op spellings as check()
    if "::" not in name:
        raise ValueError(f"check_sharding: ops are named \"ns::name\", got {name!r}")
    cases = []
    for k, sample in enumerate(samples):
        if not (isinstance(sample, (tuple, list)) and len(sample) == 2
                and isinstance(sample[0], str) and isinstance(sample[1], (tuple, list))):
            raise TypeError(f"check_sharding({name}): sample {k} must be (label, [one value per "
                            f"schema argument]), got {sample!r:.200}")
        cases.append((name, sample[0], sample[1]))
    return run_cases(cases, **options)


def registered_samples(name: str, dtype=torch.float64, device="cpu") -> list:
    """The samples a customop op registered (op.samples in C++), as (label, args) pairs."""
    text, tensors = torch.ops.customop_registry.samples(name, device, dtype)

    def decode(v):
        if isinstance(v, dict) and "tensor" in v:
            return tensors[v["tensor"]]
        if isinstance(v, dict) and "tensors" in v:
            return [tensors[k] for k in v["tensors"]]
        return [decode(x) for x in v] if isinstance(v, list) else v
    return [(s["label"], [decode(a) for a in s["args"]]) for s in json.loads(text)]


def main(argv=None) -> int:
    """customop-gradcheck --sharding (and python -m customop._sharding_main): every declared
    rule (of the ops matching --op) on the op's registered samples in float64. Exit status 0
    when every rule held, 3 when one failed, 2 for bad usage (no op matched); anything else
    (1: Python itself failed, e.g. torch or customop not importable) means it could not run."""
    import argparse
    import fnmatch

    import customop

    from . import _sharding

    ap = argparse.ArgumentParser(prog="customop-gradcheck --sharding")
    ap.add_argument("--op", default="*", help="glob over 'ns::name' (default: every op)")
    ap.add_argument("--load", action="append", default=[], help="an op library to load first")
    ap.add_argument("--json", help="write the reports to this file")
    ap.add_argument("--max-combinations", type=int, default=64)
    args = ap.parse_args(argv)
    for lib in args.load:
        customop.load_library(lib)
    rules = _sharding.declared_rules()
    names = [n for n, r in rules.items() if r["kind"] is not None and fnmatch.fnmatch(n, args.op)]
    if not names:
        print(f"customop-gradcheck --sharding: no op with a sharding rule matches '{args.op}' "
              f"(ops with rules: {', '.join(n for n, r in rules.items() if r['kind']) or 'none'})")
        return 2
    cases, unsampled = [], []
    for n in names:
        samples = registered_samples(n)
        unsampled += [] if samples else [n]
        cases += [(n, label, a) for label, a in samples]
    reports = run_cases(cases, max_combinations=args.max_combinations) if cases else []
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))
    print(f"{'op':<28} {'rule':<11} {'sample':<34} {'combos':>6} {'listed':>6}  verdict")
    for r in reports:
        print(f"{r['op']:<28} {r['rule'] or '-':<11} {r['label'][:34]:<34} "
              f"{r['combinations']:>6} {r['listed_by_rule']:>6}  "
              f"{'passed' if r['passed'] else 'FAILED'}")
    for n in unsampled:
        print(f"{n:<28} skipped: no registered samples (op.samples)")
    without = [n for n, r in rules.items() if r["kind"] is None and not r["wrapped"]
               and fnmatch.fnmatch(n, args.op)]
    if without:
        print(f"no sharding rule declared (refused on DTensor): {', '.join(without)}")
    failed = [r for r in reports if not r["passed"]]
    for r in failed:
        print(format_sharding_failure(r))
    ops_failed = len({r["op"] for r in failed})
    print(f"sharding: {len(names) - len(unsampled) - ops_failed} of {len(names)} ops passed; "
          f"{len(reports) - len(failed)} of {len(reports)} samples passed, "
          f"{sum(r['combinations'] for r in reports)} placement combinations")
    return 3 if failed else 0
