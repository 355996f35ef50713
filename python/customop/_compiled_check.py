"""The eager-vs-compiled check of customop.gradcheck.check: does the op give the same answer
under torch.compile as eagerly, with Inductor's out= lowering active?

Inductor (torch >= 2.12) replaces a call of a functional custom op with one Tensor return by a
call of its out= overload, writing into a buffer it allocated from the op's fake kernel, when it
finds one: an overload tagged torch.Tag.out, or one registered in torch's out-variant registry.
A compiled model then runs the out kernel, not the functional one; if the two disagree, or the
out kernel reads its buffer, compiled output differs from eager and nothing says so.

customop's generated `.out` overloads are not tagged Tag.out (torch 2.15's AOTInductor emits a
C shim call, `aoti_torch_cpu_<op>`, for a custom op lowered to its out variant, and no such shim
exists, so every AOTI package holding the op would fail to compile; README "out="). This check
turns the lowering on for the op, for the duration of the check only, by registering the `.out`
overload in the registry, and takes it off again, so what it compiles is what a Tag.out op
would compile to. When that compile fails only because of the lowering (torch 2.15's Inductor
passes an argument with a schema default twice, positionally and by keyword, to the out=
overload it calls), the op is compared without it and the report says why: no real compile
takes an untagged overload.

The op runs once eagerly and once compiled (torch.compile, Inductor, fullgraph=True,
dynamic=False, a fresh code object per run so no cached graph and no recompile limit can send
it back to eager, Inductor's and AOTAutograd's caches off) on separate clones of the sample,
without grad. Every output and every argument the op declares it writes are compared: shape,
dtype, and values with torch.testing.assert_close's default tolerance for the dtype (the same
kernel on the same values: any larger difference is a different computation). Python-only
(torch.compile).
"""

from __future__ import annotations

import contextlib
import itertools
import types

import torch

from . import _errors
from ._op_call import map_tensors, split_call, written_positions
from ._quiet import fake_tensor_log_off, no_fake_kernel

_fresh = itertools.count()


@contextlib.contextmanager
def out_lowering(op):
    """While active, Inductor lowers functional `op` (an OpOverload) to its `.out` overload.
    Yields (out overload or None, how: a phrase for the report). Restores the registry after."""
    try:
        from torch._library import _out_variant as registry
    except ImportError:
        yield None, "this torch has no out= lowering of custom ops"
        return
    if written_positions(op):
        yield None, "the op writes its arguments (no out= overload)"
        return
    packet = getattr(getattr(torch.ops, op.namespace), op._schema.name.split("::")[1])
    if "out" not in packet.overloads():
        yield None, "the op has no .out overload"
        return
    out_op = packet.out
    try:
        tagged = registry.to_out_variant(op)
    except RuntimeError as e:
        yield None, f"torch refuses its out= overloads: {_errors.text(e)}"
        return
    if tagged is not None:
        yield tagged, f"{tagged} (tagged torch.Tag.out)"
        return
    if len(op._schema.returns) != 1 or not hasattr(registry, "register_out_variant"):
        yield None, ("Inductor lowers an op with several returns only to a Tag.out overload"
                     if len(op._schema.returns) != 1 else
                     "this torch has no out-variant registry")
        return
    table = registry._manual_out_variant_registry
    had, previous = op in table, table.get(op)
    registry.register_out_variant(op, out_op)
    try:
        yield out_op, f"{out_op} (registered for this check)"
    finally:
        if had:
            table[op] = previous
        else:
            table.pop(op, None)


@contextlib.contextmanager
def _no_compile_caches():
    """Inductor's and AOTAutograd's on-disk caches are keyed on the graph, not on the out-variant
    registry: a cached compile would decide whether the lowering is taken."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    patches = {"fx_graph_cache": False, "fx_graph_remote_cache": False}
    with inductor_config.patch(patches), functorch_config.patch(enable_autograd_cache=False):
        yield


def _flat_tensors(result) -> list:
    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for r in result for t in _flat_tensors(r)]
    return [result]


def _compare(what: str, eager, compiled, mismatches: list) -> None:
    if not isinstance(eager, torch.Tensor) or not isinstance(compiled, torch.Tensor):
        if eager != compiled:
            mismatches.append({"what": what, "detail": f"eager {eager!r}, compiled {compiled!r}"})
        return
    if eager.shape != compiled.shape or eager.dtype != compiled.dtype:
        mismatches.append({"what": what, "detail": f"eager {list(eager.shape)} {eager.dtype}, "
                                                   f"compiled {list(compiled.shape)} "
                                                   f"{compiled.dtype}"})
        return
    try:
        torch.testing.assert_close(compiled.cpu(), eager.cpu(), equal_nan=True,
                                   check_stride=False)
    except AssertionError as e:
        lines = [line.strip() for line in _errors.text(e).splitlines() if line.strip()]
        mismatches.append({"what": what, "detail": "; ".join(lines[1:4] or lines)})


def _compiled_function(op, values: list, positions: list[int]):
    """A fresh function (its own code object, so its own compile cache) that calls `op` with
    `values`, the tensors at `positions` taken from its arguments."""

    # The schema is read here: inside the traced function it would be a pybind call.
    keyword_names = [p.name if p.kwarg_only else None for p in op._schema.arguments]

    def call(*tensors):
        filled = list(values)
        for k, t in zip(positions, tensors):
            filled[k] = t
        positional = [v for v, kw in zip(filled, keyword_names) if kw is None]
        keywords = {kw: v for v, kw in zip(filled, keyword_names) if kw is not None}
        return op(*positional, **keywords)

    code = call.__code__.replace(co_name=f"customop_compiled_check_{next(_fresh)}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def _has_no_fake_kernel(op, args: list) -> bool:
    """Whether `op` says it has no fake kernel when run on fake copies of `args`: decided
    before torch.compile, which would spend Inductor's start-up to find it out. False when the
    copies cannot be made (the compile then decides)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    try:
        fakes = map_tensors(args, lambda t: mode.from_tensor(t.detach()))
    except Exception:  # noqa: BLE001 -- e.g. a tensor subclass FakeTensor does not take
        return False
    try:
        positional, keywords = split_call(op, fakes)
        with fake_tensor_log_off(), mode, torch.no_grad():
            op(*positional, **keywords)
    except Exception as e:  # noqa: BLE001 -- any other error: the compile reports it
        return no_fake_kernel(e)
    return False


def check_compiled(op, args: list, arg_names: list[str]) -> dict:
    """Runs `op` (an OpOverload) on `args` eagerly and under torch.compile with its out= lowering
    active, and compares every output and every written argument.

    Returns {"passed": bool, "compared": n, "out_lowering": phrase, "out_overload": the
    overload lowered to or None, "lowered": bool (the generated code calls it), "mismatches":
    [{"what", "detail"}]}, or
    {"passed": True, "not_run": reason} when the op raises eagerly (the main check reports it),
    has no fake kernel, or takes a Tensor[] argument; a compile or compiled-run error fails:
    {"passed": False, "error": message}. Never raises for what the op does (KeyboardInterrupt
    and SystemExit propagate).
    """
    from torch._inductor.utils import run_and_get_code
    from torch._library.utils import is_builtin

    if is_builtin(op):
        return {"passed": True, "not_run": "a built-in op (Inductor lowers it itself)"}
    if any(isinstance(a, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in a)
           for a in args):
        return {"passed": True, "not_run": "a Tensor[] argument (not compared here)"}

    def clones():
        return map_tensors(args, lambda t: t.detach().clone())

    positions = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor)]
    written = written_positions(op)
    eager_args = clones()
    try:
        positional, keywords = split_call(op, eager_args)
        with torch.no_grad():
            eager = op(*positional, **keywords)
    except Exception as e:  # noqa: BLE001 -- reported by the main check
        return {"passed": True, "not_run": f"the op raised eagerly ({type(e).__name__})"}
    if _has_no_fake_kernel(op, args):
        return {"passed": True, "not_run": "the op has no fake kernel"}
    lowering_error = None
    for lower in (True, False):
        compiled_args = clones()
        with out_lowering(op) if lower else contextlib.nullcontext((None, "off")) as (out_op,
                                                                                       how):
            fn = _compiled_function(op, compiled_args, positions)
            try:
                with torch.no_grad(), _no_compile_caches(), fake_tensor_log_off():
                    compiled, code = run_and_get_code(
                        torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False),
                        *[compiled_args[k] for k in positions])
                break
            except Exception as e:  # noqa: BLE001 -- the compile error is the report
                text = _errors.text(e).strip()
                first = text.splitlines()[0] if text else type(e).__name__
                if "no fake" in text.lower() or "fake impl" in text.lower() or isinstance(
                        e, NotImplementedError):
                    return {"passed": True, "not_run": "the op has no fake kernel"}
                if lower and out_op is not None and "registered for this check" in how:
                    # The lowering failed, and only this check turned it on: real compiles of
                    # the op do not take it. Compare without it, and say why.
                    lowering_error = f"{type(e).__name__}: {first}"
                    continue
                return {"passed": False, "error": f"{type(e).__name__}: {first}",
                        "out_lowering": how}
    if lowering_error is not None:
        how = (f"not taken: Inductor's call of the untagged out= overload failed "
               f"({lowering_error[:200]}); compared without it")
    call = (f"torch.ops.{out_op.namespace}.{out_op._schema.name.split('::')[1]}."
            f"{out_op._overloadname}(" if out_op is not None else None)
    lowered = call is not None and any(call in c for c in code)
    mismatches: list = []
    eager_flat, compiled_flat = _flat_tensors(eager), _flat_tensors(compiled)
    if len(eager_flat) != len(compiled_flat):
        mismatches.append({"what": "outputs", "detail": f"eager {len(eager_flat)}, compiled "
                                                        f"{len(compiled_flat)}"})
    for i, (e, c) in enumerate(zip(eager_flat, compiled_flat)):
        _compare(f"output {i}", e, c, mismatches)
    for k in written:
        name = arg_names[k] if k < len(arg_names) else f"#{k}"
        _compare(f"written argument '{name}'", eager_args[k], compiled_args[k], mismatches)
    return {"passed": not mismatches, "compared": len(eager_flat) + len(written),
            "out_lowering": how, "out_overload": None if out_op is None else str(out_op),
            "lowered": lowered, "mismatches": mismatches}


def format_compiled(name: str, report: dict) -> tuple[str, str]:
    """(headline, detail) of a failed check_compiled report."""
    if "error" in report:
        return (f"{name} fails under torch.compile",
                f"  {report['error']}\n  out= lowering: {report.get('out_lowering')}")
    lines = [f"  {m['what']}: {m['detail']}" for m in report["mismatches"]]
    return (f"{name}: compiled result differs from eager in {len(report['mismatches'])} of "
            f"{report['compared']} tensors",
            "\n".join(lines) + f"\n  out= lowering: {report['out_lowering']}"
            + (" (the compiled code calls the out= overload: its kernel disagrees with the "
               "functional one, or reads its buffer)" if report["lowered"] else ""))
