"""The built-in ops in the PyTorch 2 stack: fake (Meta) kernels, torch.library.opcheck,
torch.compile (fullgraph, dynamic shapes, inductor and aot_eager), vmap through the ops' rules.

Samples: every sample each op registers (OpCore::samples), in float64, float32, bfloat16 and
float16 (the CPU kernels take all four), written by
`customop-gradcheck --dump-samples` (torch::pickle_save) so Python checks exactly the inputs
the C++ gradcheck checks.

Environment: CUSTOMOP_OPS_LIB (libcustomop_ops.so) and CUSTOMOP_GRADCHECK_CLI (the
customop-gradcheck binary; default: next to the op library's build folder).
"""

import os
import pathlib
import subprocess

import pytest
import torch
from torch import Tensor

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS_LIB = os.environ.get("CUSTOMOP_OPS_LIB") or str(
    ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so")
CLI = os.environ.get("CUSTOMOP_GRADCHECK_CLI") or str(
    pathlib.Path(OPS_LIB).parents[2] / "gradcheck" / "customop-gradcheck")

if not os.path.exists(OPS_LIB):
    if "CUSTOMOP_OPS_LIB" in os.environ:
        raise FileNotFoundError(f"CUSTOMOP_OPS_LIB={OPS_LIB} does not exist")
    pytest.skip(f"op library not built ({OPS_LIB}); set CUSTOMOP_OPS_LIB", allow_module_level=True)
torch.ops.load_library(OPS_LIB)

OPS = ["rms_norm", "bias_gelu", "weighted_sum", "max_along", "masked_softmax", "clamp_count"]


def _load_samples():
    out = pathlib.Path(os.environ.get("PYTEST_TMPDIR", "/tmp")) / f"customop_samples_{os.getpid()}.pt"
    subprocess.run([CLI, "--op", "customop::*", "--dtype", "all", "--dump-samples", str(out)], check=True,
                   capture_output=True, text=True)
    # torch::pickle_save tags lists and dicts with TorchScript's builders: allow just those.
    import torch.jit._pickle as jit_pickle
    builders = [getattr(jit_pickle, n) for n in dir(jit_pickle) if n.startswith(("build_", "restore_"))]
    try:
        with torch.serialization.safe_globals(builders):
            return torch.load(str(out), weights_only=True)
    finally:
        out.unlink(missing_ok=True)


SAMPLES = _load_samples()


def _with_grad(value):
    """Floating tensors (also inside lists) as leaves that require grad, strides kept."""
    if isinstance(value, Tensor):
        t = value.detach().clone() if value.is_floating_point() else value
        if value.is_floating_point():
            t = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).copy_(value)
            t.requires_grad_(True)
        return t
    if isinstance(value, list):
        return [_with_grad(v) for v in value]
    return value


def _sample_params():
    params = []
    for name in OPS:
        for k, s in enumerate(SAMPLES[f"customop::{name}"]):
            params.append(pytest.param(name, k, id=f"{name}-{s['dtype']}-{k}"))
    return params


def test_every_op_has_samples_in_the_four_dtypes():
    for name in OPS:
        dtypes = {s["dtype"] for s in SAMPLES[f"customop::{name}"]}
        assert dtypes == {"float32", "float64", "bfloat16", "float16"}, f"{name}: {dtypes}"


@pytest.mark.parametrize("name,k", _sample_params())
def test_opcheck(name, k):
    """torch.library.opcheck's default tests: test_schema, test_autograd_registration,
    test_faketensor, test_aot_dispatch_dynamic."""
    sample = SAMPLES[f"customop::{name}"][k]
    args = tuple(_with_grad(a) for a in sample["args"])
    result = torch.library.opcheck(getattr(torch.ops.customop, name).default, args,
                                   raise_exception=False)
    failed = {test: r for test, r in result.items() if r != "SUCCESS"}
    assert not failed, f"{name} '{sample['label']}' ({sample['dtype']}): {failed}"


def test_a_python_exception_through_a_fake_kernel_keeps_its_type():
    """A Python exception raised while an op's C++ code runs (here symbolic shapes' guard on an
    unbacked size, raised inside rms_norm's shape function) reaches the caller as itself: FakeTensor,
    dynamo and export dispatch on these types, so naming the op must not rewrap them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        x = torch.empty(4, shape_env.create_unbacked_symint())
        with pytest.raises(GuardOnDataDependentSymNode):
            torch.ops.customop.rms_norm(x, torch.empty(8), 1e-5)


def test_a_python_kernels_exception_through_a_jvp_keeps_its_type():
    """rms_norm's JVP calls at::rsqrt; a Python CPU kernel for it that raises reaches the caller
    as its own exception, not a RuntimeError naming the op."""
    import warnings

    import torch.autograd.forward_ad as fwad

    class Refused(Exception):
        pass

    def refuse(*args, **kwargs):
        raise Refused("rsqrt refused")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("rsqrt", refuse, "CPU")
    try:
        x = torch.randn(4, 8, dtype=torch.float64)
        with fwad.dual_level(), pytest.raises(Refused, match="rsqrt refused"):
            torch.ops.customop.rms_norm(fwad.make_dual(x, torch.randn_like(x)),
                                        torch.randn(8, dtype=torch.float64), 1e-5)
    finally:
        lib._destroy()


def test_meta_tensors_run_the_fake_kernels():
    """Meta tensors reach each op's fake kernel: shapes (and dtypes) without data."""
    m = lambda *shape: torch.randn(*shape, device="meta")
    assert torch.ops.customop.rms_norm(m(5, 3), m(3), 1e-6).shape == (5, 3)
    assert torch.ops.customop.bias_gelu(m(5, 3), m(3), "none").shape == (5, 3)
    assert torch.ops.customop.weighted_sum([m(2, 3), m(2, 3)], [1.0, 2.0]).shape == (2, 3)
    values, indices = torch.ops.customop.max_along(m(4, 5, 6), 1, True)
    assert values.shape == (4, 1, 6) and indices.dtype == torch.int64
    assert torch.ops.customop.masked_softmax(m(4, 6), None, 1).shape == (4, 6)
    out, clamped = torch.ops.customop.clamp_count(m(7), -1.0, 1.0)
    assert out.shape == (7,) and clamped.shape == () and clamped.dtype == torch.int64
    with pytest.raises(RuntimeError, match=r"rms_norm: weight must have shape \[D\] = \[3\]"):
        torch.ops.customop.rms_norm(m(5, 3), m(4), 1e-6)


# ---- torch.compile ---------------------------------------------------------------------------

class AllOps(torch.nn.Module):
    """Every built-in op in one small model: x [N, D] (+ a [N, D] bool mask) -> scores [N, D]."""

    def __init__(self, d: int = 16):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.d = d
        self.bias = torch.nn.Parameter(0.1 * torch.randn(d, generator=gen, dtype=torch.float64))
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d, generator=gen, dtype=torch.float64))
        self.fc = torch.nn.Linear(d, 2 * d, dtype=torch.float64)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(2 * d, d, generator=gen, dtype=torch.float64) / d ** 0.5)
            self.fc.bias.zero_()

    def forward(self, x: Tensor, mask: Tensor):
        h = torch.ops.customop.bias_gelu(x, self.bias, "tanh")
        h = torch.ops.customop.rms_norm(h, self.weight, 1e-6)
        c, clamped = torch.ops.customop.clamp_count(h, -1.5, 1.5)
        z = self.fc(c).view(x.shape[0], self.d, 2)
        m, _ = torch.ops.customop.max_along(z, 2, False)
        s = torch.ops.customop.weighted_sum([m, h], [0.5, 2.0])
        return torch.ops.customop.masked_softmax(s, mask, 1), clamped


def _batch(n, d=16, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    mask = torch.rand(n, d, generator=gen) > 0.2
    mask[:, 0] = True
    target = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return x, mask, target


def _train(model, step_fn, batches):
    """A few SGD steps; the outputs, count and parameter grads of each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    record = []
    for x, mask, target in batches:
        opt.zero_grad()
        p, clamped = step_fn(x, mask)
        loss = ((p - target.softmax(1)) ** 2).sum()
        loss.backward()
        record.append((p.detach().clone(), clamped.clone(),
                       [q.grad.detach().clone() for q in model.parameters()]))
        opt.step()
    return record


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_dynamic_matches_eager_without_recompiling(backend):
    torch._dynamo.reset()
    batches = [_batch(8, seed=s) for s in range(3)]
    eager_model = AllOps()
    compiled_model = AllOps()
    compiled_model.load_state_dict(eager_model.state_dict())
    compiled = torch.compile(compiled_model, backend=backend, fullgraph=True, dynamic=True)
    eager = _train(eager_model, eager_model, batches)
    ours = _train(compiled_model, compiled, batches)
    for step, ((pe, ce, ge), (pc, cc, gc)) in enumerate(zip(eager, ours)):
        torch.testing.assert_close(pc, pe, rtol=1e-9, atol=1e-12, msg=lambda m: f"step {step}: {m}")
        assert int(cc) == int(ce), f"step {step}: clamped {int(cc)} vs eager {int(ce)}"
        for i, (a, b) in enumerate(zip(gc, ge)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12,
                                       msg=lambda m: f"step {step} grad {i}: {m}")
    # Another batch size runs the same graph: a recompile would raise here.
    x, mask, target = _batch(5, seed=7)
    with torch._dynamo.config.patch(error_on_recompile=True):
        p, clamped = compiled(x, mask)
        ((p - target.softmax(1)) ** 2).sum().backward()
    pe, ce = eager_model(x, mask)
    torch.testing.assert_close(p, pe, rtol=1e-9, atol=1e-12)
    assert int(clamped) == int(ce)


def _max_along_backward_case(rows, size, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, size, generator=gen, dtype=torch.float64)
    _, idx = x.max(1, keepdim=True)
    g = torch.randn(rows, 1, generator=gen, dtype=torch.float64)
    return g, idx, x


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_dynamic_keeps_a_symint_size_argument_symbolic(backend):
    """max_along_backward's `size` is a SymInt: given x's symbolic size under
    torch.compile(dynamic=True), one graph serves every size (an `int` argument would guard on
    the traced value and recompile for the next)."""
    torch._dynamo.reset()

    def f(g, idx, x):
        return torch.ops.customop.max_along_backward(g, idx, 1, x.shape[1])

    compiled = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    for size in (6, 9):
        g, idx, x = _max_along_backward_case(4, size, seed=size)
        torch.testing.assert_close(compiled(g, idx, x), torch.zeros_like(x).scatter_(1, idx, g))
    g, idx, x = _max_along_backward_case(3, 13, seed=13)
    with torch._dynamo.config.patch(error_on_recompile=True):
        out = compiled(g, idx, x)
    assert out.shape == (3, 13)
    torch.testing.assert_close(out, torch.zeros_like(x).scatter_(1, idx, g))


def test_export_keeps_a_symint_size_argument_dynamic():
    """torch.export with a dynamic dim passed as max_along_backward's SymInt size: the program
    runs at another size (an `int` argument would specialise the dim and the export refuse it)."""

    class Scatter(torch.nn.Module):
        def forward(self, g, idx, x):
            return torch.ops.customop.max_along_backward(g, idx, 1, x.shape[1])

    size = torch.export.Dim("size", min=2, max=1 << 20)
    program = torch.export.export(Scatter(), _max_along_backward_case(4, 6),
                                  dynamic_shapes={"g": None, "idx": None, "x": {1: size}})
    g, idx, x = _max_along_backward_case(4, 11, seed=3)
    out = program.module()(g, idx, x)
    assert out.shape == (4, 11)
    torch.testing.assert_close(out, torch.zeros_like(x).scatter_(1, idx, g))


# ---- torch.func (the transforms themselves: test_transforms.py) ---------------------------

def test_vmap_runs_the_ops_batching_rule_not_torchs_fallback():
    x = torch.randn(3, 4, dtype=torch.float64)
    w = torch.rand(4, dtype=torch.float64)
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        out = torch.func.vmap(lambda r: torch.ops.customop.rms_norm(r, w, 1e-6))(x)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)
    torch.testing.assert_close(out, torch.ops.customop.rms_norm(x, w, 1e-6))


# ---- torch.export + AOTInductor, loaded from Python and from C++ ----------------------------

LOADER = os.environ.get("CUSTOMOP_AOTI_LOADER") or None


@pytest.fixture(scope="module")
def aoti_package(tmp_path_factory):
    """One export + AOTI package per session: the digits demo's model (untrained weights),
    batch dim dynamic. Returns (package path, eager model, data path for the C++ loader)."""
    import sys
    sys.path.insert(0, str(ROOT / "examples" / "digits_demo"))
    from train import DigitsNet, Inference, TensorContainer
    folder = tmp_path_factory.mktemp("aoti")
    torch.manual_seed(0)
    net = DigitsNet().eval()
    x = torch.rand(40, 64)
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    with torch.no_grad():
        program = torch.export.export(Inference(net), (x[:8],), dynamic_shapes={"x": {0: batch}})
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(folder / "m.pt2"))
        probs = torch._inductor.aoti_load_package(path)(x)
    data = folder / "data.pt"
    torch.jit.script(TensorContainer({"x_test": x, "y_test": probs.argmax(1),
                                      "py_aoti_probs_test": probs})).save(str(data))
    return path, net, x, data


def test_export_graph_calls_the_ops(aoti_package):
    path, net, x, _ = aoti_package
    from train import Inference
    program = torch.export.export(Inference(net), (x[:8],),
                                  dynamic_shapes={"x": {0: torch.export.Dim("b", min=1)}})
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    for op in ("bias_gelu", "rms_norm", "max_along", "masked_softmax"):
        assert f"customop.{op}.default" in targets, targets


def test_aoti_package_matches_eager_for_two_batch_sizes(aoti_package):
    path, net, x, _ = aoti_package
    package = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        for n in (40, 3):
            torch.testing.assert_close(package(x[:n]), net(x[:n], None), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(LOADER is None, reason="CUSTOMOP_AOTI_LOADER (digits_aoti_eval) not built")
def test_aoti_package_loads_in_cpp_and_matches_python(aoti_package):
    path, _, _, data = aoti_package
    r = subprocess.run([LOADER, "--model", path, "--data", str(data), "--ops-library", OPS_LIB,
                        "--min-accuracy", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "predictions equal to Python's run of the package: 40 of 40" in r.stdout


@pytest.mark.skipif(LOADER is None, reason="CUSTOMOP_AOTI_LOADER (digits_aoti_eval) not built")
def test_aoti_package_without_the_op_library_names_the_op(aoti_package):
    path = aoti_package[0]
    r = subprocess.run([LOADER, "--model", path], capture_output=True, text=True)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "it calls the op customop::" in r.stderr
    assert "--ops-library" in r.stderr
