"""TorchScript interop of the built-in ops (torch.ops.customop.*).

Per op: eager, torch.jit.script, torch.jit.trace, and both after save + load give the outputs
and the input gradients of eager (float64, a fixed random cotangent), three calls each so the
profiling executor's optimised graph runs too, and the gradients come from the op's registered
backward (a customop node in the autograd graph). Then: a saved model loaded without the op
library fails, naming the op, from Python and from the C++ loader (digits_load_and_eval).

Environment: CUSTOMOP_OPS_LIB (libcustomop_ops.so; default build/release/plugin/ops/...) and
CUSTOMOP_LOADER (the digits_load_and_eval binary; its tests skip without it).
"""

import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import pytest
import torch
from torch import Tensor

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS_LIB = os.environ.get("CUSTOMOP_OPS_LIB") or str(
    ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so")
LOADER = os.environ.get("CUSTOMOP_LOADER") or None

if not os.path.exists(OPS_LIB):
    if "CUSTOMOP_OPS_LIB" in os.environ:
        raise FileNotFoundError(f"CUSTOMOP_OPS_LIB={OPS_LIB} does not exist")
    pytest.skip(f"op library not built ({OPS_LIB}); set CUSTOMOP_OPS_LIB", allow_module_level=True)
torch.ops.load_library(OPS_LIB)
# TorchScript is deprecated upstream (torch >= 2.10 warns on every script/trace/save/load).
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


# ---- one module per op (and per notable argument choice) ---------------------------------

class RmsNorm(torch.nn.Module):
    def forward(self, input: Tensor, weight: Tensor) -> Tensor:
        return torch.ops.customop.rms_norm(input, weight)  # schema default eps


class RmsNormEps(torch.nn.Module):
    def forward(self, input: Tensor, weight: Tensor) -> Tensor:
        return torch.ops.customop.rms_norm(input, weight, eps=0.5)


class BiasGelu(torch.nn.Module):
    def forward(self, input: Tensor, bias: Tensor) -> Tensor:
        return torch.ops.customop.bias_gelu(input, bias)  # approximate="none"


class BiasGeluTanh(torch.nn.Module):
    def forward(self, input: Tensor, bias: Tensor) -> Tensor:
        return torch.ops.customop.bias_gelu(input, bias, approximate="tanh")


class WeightedSum(torch.nn.Module):
    def forward(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        return torch.ops.customop.weighted_sum([a, b, c], [0.5, -1.25, 2.0])


class MaxAlong(torch.nn.Module):
    def forward(self, input: Tensor) -> Tuple[Tensor, Tensor]:
        return torch.ops.customop.max_along(input, 1)


class MaxAlongKeepdim(torch.nn.Module):
    def forward(self, input: Tensor) -> Tuple[Tensor, Tensor]:
        return torch.ops.customop.max_along(input, -1, keepdim=True)


class MaskedSoftmax(torch.nn.Module):
    def forward(self, input: Tensor, mask: Tensor) -> Tensor:
        return torch.ops.customop.masked_softmax(input, mask, 1)


class MaskedSoftmaxNoMask(torch.nn.Module):
    def forward(self, input: Tensor) -> Tensor:
        return torch.ops.customop.masked_softmax(input, None, 0)


class ClampCount(torch.nn.Module):
    def forward(self, input: Tensor) -> Tuple[Tensor, Tensor]:
        return torch.ops.customop.clamp_count(input, -0.5, 0.5)


# ---- inputs (float64; `seed` varies them so a trace is run on values it did not see) -------

def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _distinct(gen, *shape):
    """Values with no ties anywhere (max_along's gradient is defined)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=gen).double() / n).view(*shape) - 0.5


def _away_from(gen, shape, kinks, margin=0.05):
    """randn values at least `margin` from every kink (clamp_count's bounds)."""
    x = _randn(gen, *shape)
    for k in kinks:
        near = (x - k).abs() < margin
        x = torch.where(near, x + 2 * margin, x)
    return x


@dataclass
class Case:
    op: str                                 # the TorchScript op name, customop::<op>
    module: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], tuple]  # grads are taken for floating tensors


CASES = {
    "rms_norm": Case("rms_norm", RmsNorm, lambda g: (_randn(g, 4, 7), _randn(g, 7))),
    "rms_norm_eps": Case("rms_norm", RmsNormEps, lambda g: (_randn(g, 3, 2, 5), _randn(g, 5))),
    "bias_gelu": Case("bias_gelu", BiasGelu, lambda g: (_randn(g, 4, 7), _randn(g, 7))),
    "bias_gelu_tanh": Case("bias_gelu", BiasGeluTanh, lambda g: (_randn(g, 2, 3, 6), _randn(g, 6))),
    "weighted_sum": Case("weighted_sum", WeightedSum,
                         lambda g: (_randn(g, 3, 5), _randn(g, 3, 5), _randn(g, 3, 5))),
    "max_along": Case("max_along", MaxAlong, lambda g: (_distinct(g, 3, 5, 4),)),
    "max_along_keepdim": Case("max_along", MaxAlongKeepdim, lambda g: (_distinct(g, 3, 6),)),
    "masked_softmax": Case("masked_softmax", MaskedSoftmax,
                           lambda g: (_randn(g, 3, 6), _mask(g, 3, 6))),
    "masked_softmax_no_mask": Case("masked_softmax", MaskedSoftmaxNoMask,
                                   lambda g: (_randn(g, 4, 5),)),
    "clamp_count": Case("clamp_count", ClampCount,
                        lambda g: (_away_from(g, (4, 6), (-0.5, 0.5)),)),
}
OPS = ["rms_norm", "bias_gelu", "weighted_sum", "max_along", "masked_softmax", "clamp_count"]


def _mask(gen, *shape):
    """A bool mask (True = keep) with at least one kept entry per row."""
    m = torch.rand(*shape, generator=gen) < 0.6
    m[..., 0] = True
    return m


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _run(module, inputs, cotangent_seed=123):
    """Outputs and the VJP of a fixed random cotangent w.r.t. the floating inputs."""
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    outs = _as_tuple(module(*leaves))
    gen = torch.Generator().manual_seed(cotangent_seed)
    diff = [o for o in outs if isinstance(o, Tensor) and o.requires_grad]
    assert diff, "no differentiable output"
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in diff)
    wrt = [x for x in leaves if x.requires_grad]
    grads = torch.autograd.grad(loss, wrt)
    return outs, grads, _autograd_node_names(loss)


def _autograd_node_names(root):
    names, seen, todo = [], set(), [root.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(node.name())
        todo.extend(f for f, _ in node.next_functions)
    return names


def _assert_same(actual, expected, what):
    assert len(actual) == len(expected), f"{what}: {len(actual)} values, eager has {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, Tensor):
            torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12, msg=lambda m: f"{what}[{i}]: {m}")
        else:
            assert a == e, f"{what}[{i}]: {a!r} != eager {e!r}"


def _compile(case, mode):
    if mode == "script":
        return torch.jit.script(case.module())
    example = case.inputs(torch.Generator().manual_seed(0))
    return torch.jit.trace(case.module(), example, check_trace=False)


PARAMS = [pytest.param(name, mode, id=f"{name}-{mode}")
          for name in CASES for mode in ("script", "trace")]


@pytest.mark.parametrize("name", list(CASES))
def test_eager_uses_registered_backward(name):
    case = CASES[name]
    _, grads, nodes = _run(case.module(), case.inputs(torch.Generator().manual_seed(1)))
    assert all(g is not None for g in grads)
    assert any("customop" in n for n in nodes), f"no customop backward in {nodes}"


@pytest.mark.parametrize("name,mode", PARAMS)
def test_round_trip_matches_eager(name, mode, tmp_path):
    """script or trace, then save + load: outputs and grads equal eager's, on inputs the
    trace did not see, over three calls (profiling run, then the optimised graph)."""
    case = CASES[name]
    inputs = case.inputs(torch.Generator().manual_seed(1))
    eager_outs, eager_grads, _ = _run(case.module(), inputs)
    compiled = _compile(case, mode)
    path = tmp_path / f"{name}.pt"
    torch.jit.save(compiled, str(path))
    for variant, module in ((mode, compiled), (mode + "+save+load", torch.jit.load(str(path)))):
        assert f"customop::{case.op}" in str(module.graph), f"{variant}: op not in the graph"
        for call in range(3):
            outs, grads, nodes = _run(module, inputs)
            what = f"{name} {variant} call {call}"
            _assert_same(outs, eager_outs, what + " output")
            _assert_same(grads, eager_grads, what + " grad")
            assert any("customop" in n for n in nodes), f"{what}: no customop backward in {nodes}"


@pytest.mark.parametrize("mode", ["script", "trace"])
def test_clamp_count_count_output_stays_live(mode):
    """clamp_count's count (a 0-dim int64 tensor) follows the data in a scripted and in a
    traced model: neither freezes it as a constant."""
    example = (torch.tensor([-1.0, 0.0, 2.0, 0.25]),)
    module = (torch.jit.script(ClampCount()) if mode == "script"
              else torch.jit.trace(ClampCount(), example, check_trace=False))
    for x in (torch.tensor([-1.0, 0.0, 2.0, 0.25]), torch.tensor([0.0, 0.1]), torch.zeros(0)):
        out, clamped = module(x)
        assert clamped.dtype == torch.int64 and clamped.dim() == 0
        assert int(clamped) == int(((x < -0.5) | (x > 0.5)).sum())
        torch.testing.assert_close(out, x.clamp(-0.5, 0.5))


# ---- a saved model without the op library --------------------------------------------------

@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """One saved scripted model per op: op -> path."""
    folder = tmp_path_factory.mktemp("models")
    first = {}
    for case in CASES.values():
        if case.op not in first:
            first[case.op] = folder / f"{case.op}.pt"
            torch.jit.script(case.module()).save(str(first[case.op]))
    assert sorted(first) == sorted(OPS)
    return first


_LOAD_ALL = """
import json, sys, torch
if sys.argv[1]:
    torch.ops.load_library(sys.argv[1])
result = {}
for path in sys.argv[2:]:
    try:
        torch.jit.load(path)
        result[path] = "loaded"
    except RuntimeError as e:
        result[path] = str(e)
print(json.dumps(result))
"""


def _load_in_fresh_python(ops_lib, paths):
    proc = subprocess.run([sys.executable, "-c", _LOAD_ALL, ops_lib, *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_python_load_without_library_names_the_op(saved_models):
    result = _load_in_fresh_python("", saved_models.values())
    for op, path in saved_models.items():
        assert f"Unknown builtin op: customop::{op}" in result[str(path)], result[str(path)]
    # control: the same process with the library loaded reads every model
    result = _load_in_fresh_python(OPS_LIB, saved_models.values())
    assert set(result.values()) == {"loaded"}, result


needs_loader = pytest.mark.skipif(not LOADER, reason="CUSTOMOP_LOADER (digits_load_and_eval) not set")


@needs_loader
@pytest.mark.parametrize("op", OPS)
def test_cpp_loader_without_library_names_the_op_and_the_fix(op, saved_models):
    proc = subprocess.run([LOADER, "--model", str(saved_models[op])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"it calls the op customop::{op}," in proc.stderr, proc.stderr
    assert "libcustomop_ops.so" in proc.stderr and "--ops-library" in proc.stderr, proc.stderr


@needs_loader
def test_cpp_loader_with_library_loads(saved_models):
    for op, path in saved_models.items():
        proc = subprocess.run([LOADER, "--model", str(path), "--ops-library", OPS_LIB],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{op}: {proc.stdout}{proc.stderr}"
