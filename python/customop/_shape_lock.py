"""The shape-lock check of customop.gradcheck.check: does the op's fake (Meta) kernel keep its
inputs' sizes symbolic?

torch.compile(dynamic=True) and torch.export trace an op through its fake kernel with symbolic
sizes (SymInts). A fake kernel that reads a size as a plain integer (C++ `guard_int`,
`expect_int`, an `int64_t` taken from a SymInt; Python `int(x.shape[0])`) or compares it with
a constant and keeps the answer records a guard that fixes the size: the graph is then valid
for that one size, and the compiler recompiles or, under export, refuses. No error is raised
at the point where it happens.

The check runs the fake kernel once on fake copies of a sample in which every dim of size 2 or
more has its own symbol (no duck sizing: equal sizes are not assumed to stay equal), and so has
every `SymInt` / `SymInt[]` argument of value 2 or more (a size passed as a number, as
`new_zeros(Tensor self, SymInt[] size)` takes it), then asks
the symbolic-shape environment which symbols it fixed to a constant. Relations between sizes
(`x.size(1) == w.size(0)`, `n <= m`) are guards too, and allowed: they do not fix a size.
Dims of size 0 or 1 stay static, as torch specializes them itself.

Python-only: the symbolic-shape environment (torch.fx.experimental.symbolic_shapes) has no C++
API, so the C++ library and the CLI do not run this check.
"""

from __future__ import annotations

import os

import torch

from . import _errors
from ._op_call import is_tensor_list, map_tensors, split_call
from ._quiet import fake_tensor_log_off, no_fake_kernel
from ._schema_py import argument_types


def _symint_positions(op) -> dict[int, bool]:
    """{argument position: is a list} for the SymInt, SymInt? and SymInt[] arguments of `op`."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return {}
    out = {}
    for i, t in enumerate(argument_types(str(schema))):
        base = t.split("(")[0]
        if base in ("SymInt", "SymInt?"):
            out[i] = False
        elif base.startswith("SymInt[") and base.rstrip("?").endswith("]"):
            out[i] = True
    return out


def _fake_args(args, mode, symbols: list, symint_positions: dict[int, bool]):
    """Fake copies of `args` (tensors and lists of tensors) with a symbol per dim of size >= 2,
    and a symbol for each value >= 2 of a SymInt / SymInt[] argument (`symint_positions`);
    `symbols` gets (symbol, argument position, list element or None, dim or None for a SymInt
    argument, the sample's value)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    env = mode.shape_env

    def sym_int(value, position: int, element):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            return value
        source = ConstantSource(f"customop_arg{position}" + ("" if element is None else f"_{element}"))
        expr = env.create_symbol(value, source=source, dynamic_dim=DimDynamic.DYNAMIC)
        symbols.append((expr, position, element, None, value))
        return env.create_symintnode(expr, hint=value, source=source)

    def fake(t: torch.Tensor, position: int, element):
        dynamic = [DimDynamic.DYNAMIC if s >= 2 else DimDynamic.STATIC for s in t.shape]
        ctx = StatelessSymbolicContext(dynamic_sizes=dynamic, constraint_sizes=[None] * t.dim())
        f = mode.from_tensor(t, symbolic_context=ctx)
        for d, size in enumerate(f.shape):
            if isinstance(size, torch.SymInt):
                symbols.append((size.node.expr, position, element, d, t.shape[d]))
        return f

    out = []
    for i, a in enumerate(args):
        if i in symint_positions and isinstance(a, (list, tuple)):
            out.append([sym_int(v, i, k) for k, v in enumerate(a)])
        elif i in symint_positions:
            out.append(sym_int(a, i, None))
        elif isinstance(a, torch.Tensor):
            out.append(fake(a, i, None))
        elif is_tensor_list(a):
            out.append([fake(v, i, k) for k, v in enumerate(a)])
        else:
            out.append(a)
    return out


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _guard_location(sloc) -> tuple[str, bool]:
    """(where a guard was recorded, whether that is inside torch's own code): the frame's full
    path when torch kept it (a user's file under a folder named torch is still the user's)."""
    frame = getattr(sloc, "framework_loc", None)
    if hasattr(frame, "filename"):
        inside = os.path.abspath(frame.filename).startswith(_TORCH_DIR)
        return f"{frame.filename}:{frame.lineno} in {frame.name}", inside
    loc = str(sloc)
    return loc, "_ops.py" in loc


def _where(env, symbol) -> str:
    """Where the guard that fixed `symbol` was recorded."""
    for guard in env.guards:
        if symbol in guard.expr.free_symbols:
            loc, inside_torch = _guard_location(guard.sloc)
            if inside_torch:
                return (f"guard {guard.expr}, recorded inside the op's kernel (a C++ fake kernel "
                        f"has no Python frame: look for guard_int, expect_int, size() or an "
                        f"int64_t taken from a SymInt)")
            return f"guard {guard.expr}, recorded at {loc}"
    return "no guard on record (a replacement by the symbolic-shape environment)"


def check_shape_lock(op, args: list, arg_names: list[str]) -> dict:
    """Runs `op` (an OpOverload) under FakeTensorMode on `args` with symbolic sizes.

    Returns {"passed": bool, "symbols": n (sizes made symbolic), "locked": [{"argument",
    "dim" (None for a SymInt argument), "size", "where"}], "guards": [str]} or, when the op has
    no fake kernel or the sample has no dim or SymInt of 2 or more, {"passed": True,
    "not_run": reason}. A fake kernel
    that raises under symbolic sizes fails: {"passed": False, "error": message}. Never raises
    for what the op does (KeyboardInterrupt and SystemExit propagate).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv(duck_shape=False)
    mode = FakeTensorMode(shape_env=env)
    symbols: list = []
    detached = map_tensors(args, torch.Tensor.detach)
    with mode:
        fakes = _fake_args(detached, mode, symbols, _symint_positions(op))
    if not symbols:
        return {"passed": True, "not_run": "no dim or SymInt of 2 or more to make symbolic"}
    try:
        positional, keywords = split_call(op, fakes)
        with fake_tensor_log_off(), mode, torch.no_grad():
            op(*positional, **keywords)
    except Exception as e:  # noqa: BLE001 -- the op's error is the report
        text = _errors.text(e).strip()
        text = text.splitlines()[0] if text else type(e).__name__
        if no_fake_kernel(e):
            return {"passed": True, "not_run": "the op has no fake kernel"}
        return {"passed": False, "symbols": len(symbols), "locked": [],
                "error": f"{type(e).__name__}: {text}"}
    locked = []
    for symbol, position, element, dim, size in symbols:
        value = env.replace(symbol)
        bounds = env.var_to_range.get(symbol)
        fixed = value.is_number or (bounds is not None and bounds.is_singleton())
        if not fixed:
            continue
        name = arg_names[position] if position < len(arg_names) else f"#{position}"
        locked.append({"argument": name + ("" if element is None else f"[{element}]"),
                       "dim": dim, "size": int(size), "where": _where(env, symbol)})
    return {"passed": not locked, "symbols": len(symbols), "locked": locked,
            "guards": [str(g.expr) for g in env.guards]}


def format_shape_lock(name: str, report: dict) -> tuple[str, str]:
    """(headline, detail) of a failed check_shape_lock report."""
    if "error" in report:
        return (f"fake kernel of {name} raised with symbolic sizes",
                f"  {report['error']}\n  it must compute its outputs from sym_size()/sym_sizes() "
                f"(SymInt), as torch.compile(dynamic=True) and torch.export call it")
    lines = [f"  argument '{lk['argument']}' dim {lk['dim']} (size {lk['size']} in the sample): "
             f"{lk['where']}" if lk["dim"] is not None else
             f"  argument '{lk['argument']}' (SymInt, {lk['size']} in the sample): {lk['where']}"
             for lk in report["locked"]]
    return (f"fake kernel of {name} locks {len(report['locked'])} of {report['symbols']} "
            f"symbolic sizes to their sample values",
            "\n".join(lines) + "\n  a compiled graph then holds for these sizes only: compute "
            "with SymInt (sym_size, sym_sizes), or name the specialization (mark the dim static)")
