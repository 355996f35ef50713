"""Sharding rules declared in C++ (`op.sharding(...)`, customop/sharding.h) registered with
DTensor (torch.distributed.tensor), and the single-mesh-dimension strategies each rule gives.

The rules come from the op libraries as JSON (the dispatcher op
`customop_registry::sharding_rules`). Registration goes through torch's public
`torch.distributed.tensor.experimental.register_sharding`, which redistributes inputs that
match no strategy; it happens when torch.distributed.tensor is imported (at once when it
already is: importing it costs about half of `import torch`, so `import customop` does not),
and again after each `customop.load_library(path)` for the ops that library adds.

An op defined with customop that declares no rule gets a strategy that raises, naming the op
and `op.sharding`, in place of DTensor's generic "no sharding strategy registered".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import threading

import torch

_registered: set[str] = set()
loaded_libraries: list[str] = []  # customop.load_library's paths, for the sharding check's workers
_lock = threading.Lock()
_hook_installed = False


def declared_rules() -> dict:
    """Every customop op in this process with its rule: {"ns::name": {...}} (the JSON of
    customop::sharding_rules_json; "kind" is None for an op without a rule)."""
    return json.loads(torch.ops.customop_registry.sharding_rules())


# ---- the strategies of one rule ------------------------------------------------------------

def _placement(text: str, ndim: int):
    from torch.distributed.tensor import Partial, Replicate, Shard

    if text == "R":
        return Replicate()
    if text == "P":
        return Partial("sum")
    dim = int(text[1:])
    return Shard(dim + ndim if dim < 0 else dim)


def _bind(schema, args, kwargs) -> dict:
    values = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            values[a.name] = args[i]
        elif a.name in kwargs:
            values[a.name] = kwargs[a.name]
        else:
            values[a.name] = a.default_value
    return values


def _tensor_leaves(schema, values, tensor_names):
    """(argument name, spec) per tensor the op receives, in argument order (a Tensor[]'s
    tensors one by one; an absent Tensor? left out): the order DTensor flattens them in."""
    leaves = []
    for a in schema.arguments:
        if a.name not in tensor_names:
            continue
        v = values[a.name]
        if v is None:
            continue
        for spec in (v if isinstance(v, (list, tuple)) else [v]):
            leaves.append((a.name, spec))
    return leaves


def _op_shape(shapes):
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for k, size in enumerate(s):
            d = ndim - len(s) + k
            if size != 1:
                out[d] = size
    return out


def _reduced_dims(rule, values, ndim) -> set[int]:
    dims = rule["dims"]
    if rule["dim_argument"]:
        v = values[rule["dim_argument"]]
        dims = list(v) if isinstance(v, (list, tuple)) else [v]
    # A dim outside the op shape (0 or -1 of a 0-d tensor) reduces nothing that a rank splits.
    return {d + ndim if d < 0 else d for d in dims} & set(range(ndim))


def strategies(rule: dict, schema, args, kwargs, output_ndims=None) -> list[tuple[list, list]]:
    """The placements one mesh dimension accepts, as register_sharding wants them: a list of
    (output placements, input placements), inputs one per tensor the op receives. `args` hold
    DTensor's specs (anything with a `.shape`) where the op takes tensors; `output_ndims` the
    number of dims of each output (checked against the kind: an output of the pointwise or
    reduction kind has the op shape, or the reduced one, unless it is a partial sum).
    Raises ValueError naming the op and the output that the kind cannot place."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    values = _bind(schema, args, kwargs)
    leaves = _tensor_leaves(schema, values, set(rule["tensor_arguments"]))
    n_out = len(schema.returns)
    everything_replicated = ([Replicate()] * n_out, [Replicate()] * len(leaves))
    out = [everything_replicated]
    kind = rule["kind"]
    if kind == "replicate":
        return out
    shapes = [tuple(spec.shape) for _, spec in leaves]
    if kind == "strategies":
        first_ndim = len(shapes[0]) if shapes else 0
        for st in rule["strategies"]:
            inputs = [_placement(st["inputs"].get(name, "R"), len(shape))
                      for (name, _), shape in zip(leaves, shapes)]
            outputs = [_placement(p, first_ndim) for p in st["outputs"]]
            out.append((outputs, inputs))
        return out
    shape = _op_shape(shapes)
    ndim = len(shape)
    reduced = _reduced_dims(rule, values, ndim) if kind == "reduction" else set()
    keepdim = True
    if rule["keepdim_argument"]:
        keepdim = bool(values[rule["keepdim_argument"]])
    partial = set(rule["partial_sum"])
    out_ndim = ndim - (0 if keepdim else len(reduced))
    for i, n in enumerate(output_ndims or []):
        if i not in partial and n != out_ndim:
            out_name = schema.returns[i].name or str(i)
            raise ValueError(
                f"{schema.name}: its {kind} sharding rule places every output like the op shape "
                f"({out_ndim} dims here), but output '{out_name}' has {n}: declare it "
                f".partial_sum(\"{out_name}\") if it sums over the elements, or give the "
                f"placements with Sharding::strategies")
    for d in range(ndim):
        if d in reduced:
            continue
        inputs = []
        for s in shapes:
            k = d - (ndim - len(s))
            inputs.append(Shard(k) if k >= 0 and s[k] == shape[d] else Replicate())
        out_dim = d if keepdim else d - sum(1 for r in reduced if r < d)
        outputs = [Partial("sum") if i in partial else Shard(out_dim) for i in range(n_out)]
        out.append((outputs, inputs))
    return out


# ---- registration --------------------------------------------------------------------------

def _overload(name: str):
    ns, op = name.split("::", 1)
    return getattr(getattr(torch.ops, ns), op).default


def _no_rule(name: str, defined_at: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"{name}: no sharding rule is declared, so it cannot run on DTensor arguments; "
            f"declare one in C++ beside impl_fake with op.sharding(customop::Sharding::...) "
            f"(customop/sharding.h), where the op is defined ({defined_at})")
    return refuse


def _output_ndims(overload, args, kwargs) -> list[int]:
    """The outputs' numbers of dims, from the op's fake kernel on meta tensors of the specs'
    global shapes (DTensor runs the fake kernel too: a rule needs op.impl_fake)."""
    def meta(v):
        if hasattr(v, "tensor_meta") and v.tensor_meta is not None:
            return torch.empty(v.tensor_meta.shape, dtype=v.tensor_meta.dtype, device="meta")
        if isinstance(v, (list, tuple)):
            return type(v)(meta(x) for x in v)
        return v
    out = overload(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    return [o.dim() for o in (out if isinstance(out, (tuple, list)) else [out])]


def _with_rule(name: str, rule: dict):
    overload = _overload(name)
    schema = overload._schema

    def rule_strategies(*args, **kwargs):
        ndims = _output_ndims(overload, args, kwargs) if rule["kind"] in (
            "pointwise", "reduction") else None
        return strategies(rule, schema, args, kwargs, ndims)
    return rule_strategies


def _fix_schema_info(overload) -> None:
    """register_sharding hashes the arguments from the first int argument on, for its cache of
    strategies; a rule that reads a bool or int[] argument before that would reuse another
    call's strategies. Hash every non-tensor argument instead."""
    try:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
        prop = DTensor._op_dispatcher.sharding_propagator
        table = prop.op_to_schema_info
    except (ImportError, AttributeError):
        return
    first = next((i for i, a in enumerate(overload._schema.arguments)
                  if "Tensor" not in str(a.type)), None)
    if first is not None:
        table[overload] = RuntimeSchemaInfo(static_argnum=first, needs_pytree=True)


def register_declared_rules() -> list[str]:
    """Registers with DTensor every declared rule not registered yet (and a refusing strategy
    for customop ops without one); returns the op names registered now. Does nothing when
    torch.distributed is unavailable or torch.distributed.tensor is not imported yet (the
    import hook registers then)."""
    if not torch.distributed.is_available() or "torch.distributed.tensor" not in sys.modules:
        return []
    from torch.distributed.tensor.experimental import register_sharding

    done = []
    with _lock:
        for name, rule in declared_rules().items():
            if name in _registered:
                continue
            if rule["kind"] is None and rule["wrapped"]:
                continue  # an op customop did not define: DTensor may have its own rule
            overload = _overload(name)
            fn = _no_rule(name, rule["defined_at"]) if rule["kind"] is None else \
                _with_rule(name, rule)
            register_sharding(overload)(fn)
            _fix_schema_info(overload)
            _registered.add(name)
            done.append(name)
    return done


class _AfterDTensorImport(importlib.abc.MetaPathFinder):
    """Runs register_declared_rules once torch.distributed.tensor has been imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch.distributed.tensor":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterDTensorImport)]
            register_declared_rules()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Registers now, or when torch.distributed.tensor is first imported."""
    global _hook_installed
    if "torch.distributed.tensor" in sys.modules:
        register_declared_rules()
    elif not _hook_installed and torch.distributed.is_available():
        sys.meta_path.insert(0, _AfterDTensorImport())
        _hook_installed = True
