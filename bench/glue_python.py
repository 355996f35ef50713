"""Glue overhead from Python: forward + backward of rms_norm on [n] float32 (n = 1 and 4096)
through
  customop         torch.ops.customop.rms_norm (libcustomop_ops.so: C++ glue + C++ kernel)
  customop_pkg     customop.rms_norm, the Python package's function for it (with --package)
  py_custom_op     torch.library.custom_op + register_autograd of the same math in ATen ops
  py_function      a torch.autograd.Function of the same math (for reference)
  aten_composite   the same math as plain ATen ops under autograd (for reference)
The forward and the backward math of the Python variants are customop's own formulas
(plugin/ops/rms_norm.cpp), so the kernels cost about the same and the rest is glue.

The floor (with --floor-lib libglue_python_ops.so): y = x * alpha on [n] float32 called through
torch.ops the same way, as
  scale_customop        a customop op (by-name grads)
  scale_customop_typed  a customop op (typed grads)
  scale_by_hand         a hand-written TORCH_LIBRARY op (CPU kernel + Autograd kernel running a
                        torch::autograd::Function that redispatches below autograd)
each "<variant>_fwd" (forward alone, input requiring grad: the graph is built and dropped) and
"<variant>_fwdbwd" (forward + backward). customop / by hand is the cost of customop's C++ glue
seen from Python, with nothing of Python's around either.

Timing: one process, rounds interleaving the variants (a new random order each round); per variant the median over rounds of
the per-iteration wall time and of the thread's CPU time (single-threaded: the CPU time is
what a busy shared machine perturbs least). Instruction counts: with --callgrind, each variant's loop is bracketed
by callgrind's collect toggle and dumped as "<variant>/<n>" (run under
valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no; bench/run does).
Prints one JSON object: {"time_ns": {"<variant>/<n>": ns}, "cpu_ns": {...}, ...}.
"""

import argparse
import ctypes
import json
import random
import statistics
import sys
import time

import torch

EPS = 1e-6
SIZES = (1, 4096)


@torch.library.custom_op("glue_py::rms_norm", mutates_args=())
def py_rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps) * weight


@py_rms_norm.register_fake
def _(input, weight, eps):
    return torch.empty_like(input)


def _rms_norm_backward(x, w, eps, g):
    # customop's formula (plugin/ops/rms_norm.cpp): r = rsqrt(mean(x^2) + eps), xhat = x * r,
    # grad_input = r * (g*w - xhat * mean(g*w * xhat)), grad_weight = sum over rows of g * xhat.
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    xhat = x * r
    gw = g * w
    grad_input = r * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    grad_weight = (g * xhat).sum_to_size(w.shape)
    return grad_input, grad_weight


def _setup_context(ctx, inputs, output):
    input, weight, eps = inputs
    ctx.save_for_backward(input, weight)
    ctx.eps = eps


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    gi, gw = _rms_norm_backward(x, w, ctx.eps, grad)
    return gi, gw, None


py_rms_norm.register_autograd(_backward, setup_context=_setup_context)


class RmsNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        ctx.save_for_backward(x, w)
        ctx.eps = eps
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gi, gw = _rms_norm_backward(x, w, ctx.eps, grad)
        return gi, gw, None


def variants():
    cop = torch.ops.customop.rms_norm
    return {
        "customop": lambda x, w: cop(x, w, EPS),
        "py_custom_op": lambda x, w: py_rms_norm(x, w, EPS),
        "py_function": lambda x, w: RmsNormFunction.apply(x, w, EPS),
        "aten_composite": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w,
    }


def floor_variants():
    """The floor's ops (libglue_python_ops.so loaded): name -> (forward fn of x, backward?)."""
    ops = torch.ops.glue_bench
    fns = {"scale_customop": ops.scale, "scale_customop_typed": ops.scale_typed,
           "scale_by_hand": ops.scale_by_hand}
    out = {}
    for name, op in fns.items():
        out[name + "_fwd"] = (lambda x, w, op=op: op(x, 2.0), False)
        out[name + "_fwdbwd"] = (lambda x, w, op=op: op(x, 2.0), True)
    return out


def make_fwd_loop(f, n):
    x = torch.randn(n, requires_grad=True)
    w = torch.randn(n, requires_grad=True)

    def loop(iterations):
        for _ in range(iterations):
            f(x, w)

    return loop, (x, w)


def make_loop(f, n):
    x = torch.randn(n, requires_grad=True)
    w = torch.randn(n, requires_grad=True)
    g = torch.ones(n)

    def loop(iterations):
        for _ in range(iterations):
            y = f(x, w)
            y.backward(g)
            x.grad = None
            w.grad = None

    return loop, (x, w, g)


def check_same(fs):
    """The variants must agree (values and grads) before their speed means anything."""
    torch.manual_seed(0)
    x0, w0, g = torch.randn(4096), torch.randn(4096), torch.randn(4096)
    ref = None
    for name, f in fs.items():
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        y = f(x, w)
        y.backward(g)
        got = (y.detach(), x.grad, w.grad)
        if ref is None:
            ref = got
        elif not all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, ref)):
            sys.exit(f"glue_python: {name} disagrees with customop (values or grads)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", required=True, help="path of libcustomop_ops.so")
    p.add_argument("--iterations", type=int, default=200, help="iterations per round")
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per variant")
    p.add_argument("--package", metavar="DIR",
                   help="a folder holding the customop Python package (build/<preset>/python_dev): "
                        "also time customop.rms_norm, the package's function, as customop_pkg")
    p.add_argument("--floor-lib", metavar="LIB",
                   help="libglue_python_ops.so: also time the floor variants (see above)")
    p.add_argument("--callgrind", metavar="LIB",
                   help="libcallgrind_toggle.so: count instructions instead of timing")
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.ops.load_library(a.lib)
    fs = variants()
    if a.package:
        sys.path.insert(0, a.package)
        import customop  # noqa: E402 (the op library is the one loaded above: same file)
        fs["customop_pkg"] = lambda x, w: customop.rms_norm(x, w, EPS)
    check_same(fs)
    out = {"torch": torch.__version__, "iterations": a.iterations}
    loopers = {name: (f, make_loop) for name, f in fs.items()}
    if a.floor_lib:
        torch.ops.load_library(a.floor_lib)
        floor = floor_variants()
        x = torch.randn(64, requires_grad=True)
        ys = {name: f(x, None) for name, (f, _) in floor.items()}
        if not all(torch.equal(y, x * 2.0) for y in ys.values()):
            sys.exit("glue_python: a floor variant disagrees with x * 2")
        for name, (f, backward) in floor.items():
            loopers[name] = (f, make_loop if backward else make_fwd_loop)

    if a.callgrind:
        cg = ctypes.CDLL(a.callgrind)
        cg.customop_callgrind_dump.argtypes = [ctypes.c_char_p]
        cg.customop_callgrind_start()
        for n in SIZES:
            for name, (f, make) in loopers.items():
                loop, _ = make(f, n)
                loop(20)  # warm-up, not collected
                cg.customop_callgrind_toggle_collect()
                loop(a.iterations)
                cg.customop_callgrind_toggle_collect()
                cg.customop_callgrind_dump(f"{name}/{n}".encode())
        out["dumps"] = [f"{name}/{n}" for n in SIZES for name in loopers]
    else:
        loops = {f"{name}/{n}": make(f, n)[0] for n in SIZES for name, (f, make) in loopers.items()}
        for loop in loops.values():
            loop(max(10, a.iterations // 10))  # warm-up
        wall = {k: [] for k in loops}
        cpu = {k: [] for k in loops}
        order = list(loops.items())
        rng = random.Random(0)
        for _ in range(a.rounds):
            rng.shuffle(order)  # no variant always runs right after the same other one
            for key, loop in order:
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                loop(a.iterations)
                wall[key].append((time.perf_counter_ns() - t0) / a.iterations)
                cpu[key].append((time.thread_time_ns() - c0) / a.iterations)
        out["time_ns"] = {k: statistics.median(v) for k, v in wall.items()}
        out["cpu_ns"] = {k: statistics.median(v) for k, v in cpu.items()}
        out["rounds"] = a.rounds
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
