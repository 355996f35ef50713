"""Any Python callable as a dispatcher op, for the C++ harness: the tensors among its inputs
(nested sequences flattened) become the op's Tensor arguments, the rest stay constants, and its
tensor outputs (nested sequences flattened) become the op's returns. The op's kernel is the
callable itself at the CompositeImplicitAutograd key, so its own autograd (an
autograd.Function, a torch.library.custom_op, ATen ops) is what the harness differentiates."""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from . import _harness

_NAMESPACE = "customop_pyfn"
_counter = itertools.count()


def as_tuple(inputs) -> tuple:
    """torch.autograd.gradcheck's reading of `inputs`: one tensor, or a sequence of inputs."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, (list, tuple)):
        return tuple(inputs)
    return (inputs,)


def parameter_names(func: Callable, count: int) -> list[str]:
    """The names of func's first `count` positional parameters ("input 3" where it has none:
    a builtin, or past a fixed list); *args is spelled args[k]."""
    names: list[str] = []
    if isinstance(func, torch.nn.Module):
        func = func.forward
    func = getattr(func, "_init_fn", func)  # torch.library.custom_op: the decorated function
    owner = getattr(func, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        func = owner.forward  # MyFunction.apply: forward's parameters, without ctx
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        params = []
    if owner is not None and params and params[0].name == "ctx":
        params = params[1:]
    for p in params:
        if len(names) == count:
            break
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            names.extend(f"{p.name}[{k}]" for k in range(count - len(names)))
    names.extend(f"input {k}" for k in range(len(names), count))
    return names


def function_name(func: Callable) -> str:
    """"Scale.apply", "test_x.<locals>.f", "exp" (a builtin: its own name, not its class's),
    "mylib::op" (a torch.library.custom_op), "Linear" (a module)."""
    if isinstance(func, torch.nn.Module):
        return type(func).__name__
    if isinstance(getattr(func, "_qualname", None), str):
        return func._qualname
    if inspect.isbuiltin(func) and not isinstance(getattr(func, "__self__", None), type):
        return getattr(func, "__name__", type(func).__name__)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return name or type(func).__name__


def tensor_leaves(value) -> list[torch.Tensor]:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def output_names(value) -> list[str]:
    """The names of tensor_leaves(value), as check() names an op's returns: a top-level tuple
    or list holds the outputs ("output 0", "output 1", as torch.autograd.gradcheck counts
    them), and a tensor nested in one of them is named by its path ("output 1[0]")."""
    top = value if isinstance(value, (tuple, list)) else (value,)
    names: list[str] = []
    for k, v in enumerate(top):
        for path, leaf in pytree.tree_flatten_with_path(v)[0]:
            if isinstance(leaf, torch.Tensor):
                names.append(f"output {k}{pytree.keystr(path)}")
    return names


def fresh_copies(inputs):
    """`inputs` with every tensor a detached copy that requires grad as the original does: a
    call on them leaves the user's tensors untouched (an in-place function) and runs under
    autograd as the check will."""
    return pytree.tree_map(
        lambda v: v.detach().clone().requires_grad_(v.requires_grad)
        if isinstance(v, torch.Tensor) else v, inputs)


def tensor_names(func: Callable, inputs: Sequence[Any],
                 top_names: Sequence[str] | None = None) -> list[str]:
    """The names of the tensor leaves of `inputs` (a tuple of func's positional arguments), in
    order: the parameter's name ("x"), with the path inside a sequence ("xs[1]"); top_names
    replaces func's parameter names."""
    top = list(top_names) if top_names is not None else parameter_names(func, len(inputs))
    names = []
    for path, leaf in pytree.tree_flatten_with_path(tuple(inputs))[0]:
        if isinstance(leaf, torch.Tensor):
            rest = "".join(f"[{getattr(p, 'idx', getattr(p, 'key', p))}]" for p in path[1:])
            names.append(top[path[0].idx] + rest)
    return names


def written_input(originals: Sequence[Any], copies: Sequence[torch.Tensor],
                  names: Sequence[str]):
    """The first tensor that requires grad whose copy a call changed in place, as
    (name, where, before, after) (where: "[i, j]", "its value" (0-d) or "its shape or dtype"),
    or None. `copies`: tensor_leaves(fresh_copies(originals)), taken before the call (by
    identity: a function may append to, pop from or reorder its list arguments); NaN counts as
    equal to NaN."""
    for name, o, c in zip(names, tensor_leaves(tuple(originals)), copies):
        if not o.requires_grad:
            continue  # a buffer the function updates (running statistics) is its business
        before, after = o.detach(), c.detach()
        if before.shape != after.shape or before.dtype != after.dtype:
            return name, "its shape or dtype", f"{tuple(before.shape)} {before.dtype}", \
                f"{tuple(after.shape)} {after.dtype}"
        same = (before == after) | (before.isnan() & after.isnan()) if \
            before.is_floating_point() or before.is_complex() else before == after
        if not bool(same.all()):
            index = tuple(int(i) for i in (~same).nonzero()[0])
            where = "[" + ", ".join(map(str, index)) + "]" if index else "its value"
            return name, where, f"{before[index].item():.6g}", f"{after[index].item():.6g}"
    return None


_LOWER = (torch.float32, torch.float16, torch.bfloat16)


def _promoted(value):
    return value.to(torch.float64) if isinstance(value, torch.Tensor) and \
        value.dtype in _LOWER else value


_LOWERING_METHODS = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}
_LOWER_TYPE_NAMES = {"torch.FloatTensor", "torch.HalfTensor", "torch.BFloat16Tensor"}


def _is_float64(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.float64


class _Float64Run(TorchFunctionMode):
    """The float64 run of a float32/float16/bfloat16 check computes in float64 what the
    function computes from its inputs (above autograd, so the backward autograd records is
    float64 too):
    - a cast of a float64 tensor (one computed from the inputs, which are float64 in this run)
      to float32, float16 or bfloat16 (.to(torch.float32), .float(), .half(), .bfloat16(),
      .type(torch.float16), type_as a lower-precision tensor, a dtype= keyword of a call given a
      float64 tensor) stays float64: a function that computes in float32 inside
      (x.to(torch.float32) ... .to(x.dtype), as LLaMA's RMSNorm does) is float64 there too.
      Otherwise that run, the reference of the finite differences and of the low-precision
      rule, is only float32-precise: finite differences at eps 1e-6 then err by about 6 %,
      RMSNorm failed in bfloat16, and a 10 % error in a backward passed. A cast of anything
      else (a constant: W.bfloat16(), a rounded weight) is the function's own and stays;
    - a call given float64 tensors and float32/16-bit ones (a module's parameters, which are not
      the function's inputs) gets the latter in float64, by a differentiable cast that keeps
      their values (a bfloat16 nn.Linear raised "mat1 and mat2 must have the same dtype"
      there). Not for in-place methods (name ending in _) and out= calls: their destination
      keeps its dtype.
    torch.autocast inside the function cannot be reproduced (it does not cast float64 tensors):
    the run raises, saying so, and the check goes on as for a function without a float64 run
    (float32: Ridders' extrapolation on the function itself; float16/bfloat16: no precise run,
    a failure naming the reason). Bit reinterpretations (x.view(torch.int32)) are not seen."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda")):
            raise RuntimeError("torch.autocast is on inside the function: its rounding cannot be "
                               "reproduced in a float64 run (autocast leaves float64 tensors as "
                               "they are)")
        source = args[0] if args else None
        if _is_float64(source):
            if func in _LOWERING_METHODS:
                return torch.Tensor.double(source)
            if func is torch.Tensor.type_as and isinstance(args[1], torch.Tensor) and \
                    args[1].dtype in _LOWER:
                return source
            if func is torch.Tensor.type and args[1:] and (
                    args[1] in _LOWER or args[1] in _LOWER_TYPE_NAMES):
                return source
            if func is torch.Tensor.to:
                args = tuple(torch.float64 if a in _LOWER else
                             _promoted(a) if isinstance(a, torch.Tensor) and k > 0 else a
                             for k, a in enumerate(args))
        flat = pytree.tree_leaves((args, kwargs))
        if not any(_is_float64(v) for v in flat):
            return func(*args, **kwargs)  # nothing computed from the inputs: the function's own
        if kwargs.get("dtype") in _LOWER:
            kwargs = dict(kwargs, dtype=torch.float64)
        name = getattr(func, "__name__", "")
        if not name.endswith("_") and "out" not in kwargs and \
                any(isinstance(v, torch.Tensor) and v.dtype in _LOWER for v in flat):
            args, kwargs = pytree.tree_map(_promoted, (args, kwargs))
        return func(*args, **kwargs)


class CallableOp:
    """The generated op of one check. `tensors` are the op's arguments (the tensor leaves of
    the inputs, in order), `arg_names` their names ("x", "xs[1]"), `name` the op's qualified
    name ("customop_pyfn::fn7"). Use as a context manager: the op is removed on exit."""

    def __init__(self, func: Callable, inputs: Sequence[Any], num_outputs: int,
                 top_names: Sequence[str] | None = None):
        self.func = func
        paths, self._spec = pytree.tree_flatten_with_path(tuple(inputs))
        self._leaves = [leaf for _, leaf in paths]
        self._positions = [k for k, leaf in enumerate(self._leaves) if isinstance(leaf, torch.Tensor)]
        if not self._positions:
            raise ValueError(f"customop.gradcheck.gradcheck({function_name(func)}): no tensor "
                             f"among the inputs")
        self.arg_names = tensor_names(func, inputs, top_names)
        # Copies of the tensors that do not require grad (the harness copies the others): a
        # function that writes into its inputs leaves the caller's tensors untouched.
        self.tensors = [t if t.requires_grad else t.detach().clone()
                        for t in (self._leaves[k] for k in self._positions)]
        self._differentiable = [t.requires_grad and (t.is_floating_point() or t.is_complex())
                                for t in self.tensors]
        self.num_outputs = num_outputs
        self.name = f"{_NAMESPACE}::fn{next(_counter)}"
        self._lib: torch.library.Library | None = None

    def call(self, tensors: Sequence[torch.Tensor]):
        leaves = list(self._leaves)
        for k, t in zip(self._positions, tensors):
            leaves[k] = t
        return self.func(*pytree.tree_unflatten(leaves, self._spec))

    def _kernel(self, *tensors):
        # NB: the harness evaluates perturbed copies under no_grad; torch's gradcheck calls the
        # function with grad mode on and its inputs requiring grad, and a function that
        # differentiates inside (a Hessian-vector product) needs that: given here, outputs
        # detached.
        inside_no_grad = not torch.is_grad_enabled()
        if inside_no_grad:
            tensors = [t.detach().requires_grad_(True) if d and not t.requires_grad else t
                       for t, d in zip(tensors, self._differentiable)]
        # The float64 run of a float32/float16/bfloat16 check: its casts stay float64.
        float64_run = any(t.dtype == torch.float64 and o.dtype in _LOWER
                          for t, o in zip(tensors, self.tensors))
        try:
            with torch.enable_grad(), \
                    (_Float64Run() if float64_run else contextlib.nullcontext()):
                outs = tensor_leaves(self.call(tensors))
        except BaseException as e:
            _harness.record(e)  # the original, for the caller's `raise ... from`
            raise
        if len(outs) != self.num_outputs:  # the op's schema has the first call's count
            raise RuntimeError(
                f"{function_name(self.func)} returned {len(outs)} tensor(s) on this call and "
                f"{self.num_outputs} on the first: the outputs a check differentiates must be "
                f"the same on every call (a lazily initialised module: call it once before)")
        if inside_no_grad:
            outs = [o.detach() for o in outs]
        return outs[0] if self.num_outputs == 1 else tuple(outs)

    def __enter__(self) -> CallableOp:
        short = self.name.split("::")[1]
        params = ", ".join(f"Tensor a{k}" for k in range(len(self.tensors)))
        returns = "Tensor" if self.num_outputs == 1 else \
            "(" + ", ".join("Tensor" for _ in range(self.num_outputs)) + ")"
        self._lib = torch.library.Library(_NAMESPACE, "FRAGMENT")
        self._lib.define(f"{short}({params}) -> {returns}")
        self._lib.impl(short, self._kernel, "CompositeImplicitAutograd")
        return self

    def __exit__(self, *exc) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None


@contextlib.contextmanager
def callable_op(func: Callable, inputs: Sequence[Any], num_outputs: int,
                top_names: Sequence[str] | None = None) -> Iterator[CallableOp]:
    with CallableOp(func, inputs, num_outputs, top_names) as op:
        yield op
