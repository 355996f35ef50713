"""The built-in ops that write their arguments (customop.fused_add_rms_norm_,
customop.paged_kv_write) in the PyTorch 2 stack and TorchScript: torch.library.opcheck,
torch.compile(fullgraph=True, dynamic=True) with the ops called in place on the graph's
inputs (no clone or copy of a written tensor in the generated code), torch.export and an
AOTInductor package (the module's cache buffers written), TorchScript, and the decode-loop
example (examples/decode_loop) eager against compiled.

Environment: PYTHONPATH holds the customop package (build/<preset>/python_dev).
"""

import pathlib
import subprocess
import sys

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import customop  # noqa: F401  (loads the op library)

ROOT = pathlib.Path(__file__).resolve().parents[2]
fused = torch.ops.customop.fused_add_rms_norm_.default
paged = torch.ops.customop.paged_kv_write.default


def step(h, res, w, k, v, kc, vc, slots):
    torch.ops.customop.fused_add_rms_norm_(h, res, w, 1e-6)
    torch.ops.customop.paged_kv_write(k, v, kc, vc, slots)
    return h * 2


def step_args(tokens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(tokens, 16, generator=g), torch.randn(tokens, 16, generator=g),
            torch.randn(16, generator=g), torch.randn(tokens, 2, 8, generator=g),
            torch.randn(tokens, 2, 8, generator=g), torch.zeros(4, 4, 2, 8),
            torch.zeros(4, 4, 2, 8), torch.randperm(16, generator=g)[:tokens]]


def test_opcheck_passes_on_both_ops():
    a = step_args(3)
    assert set(torch.library.opcheck(fused, (a[0], a[1], a[2], 1e-6)).values()) == {"SUCCESS"}
    assert set(torch.library.opcheck(paged, (a[3], a[4], a[5], a[6], a[7])).values()) == {"SUCCESS"}


def test_compile_calls_the_ops_in_place_with_dynamic_shapes():
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for tokens in (3, 5):  # the second size reuses the dynamic graph
        eager_args = step_args(tokens, seed=tokens)
        compiled_args = [t.clone() for t in eager_args]
        expected = step(*eager_args)
        got, code = run_and_get_code(compiled, *compiled_args)
        torch.testing.assert_close(got, expected)
        for e, c in zip(eager_args, compiled_args):  # every written argument, as eager wrote it
            torch.testing.assert_close(c, e)
    src = "\n".join(code)
    assert "customop.fused_add_rms_norm_.default(" in src and "customop.paged_kv_write.default(" in src
    # auto_functionalized would clone each written input and copy the result back: the
    # reinplacing pass must have removed both.
    assert "clone" not in src and ".copy_(" not in src, src


class Decode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16), requires_grad=False)
        self.register_buffer("kc", torch.zeros(4, 4, 2, 8))
        self.register_buffer("vc", torch.zeros(4, 4, 2, 8))

    def forward(self, h, res, k, v, slots):
        torch.ops.customop.fused_add_rms_norm_(h, res, self.w, 1e-6)
        torch.ops.customop.paged_kv_write(k, v, self.kc, self.vc, slots)
        return h + 0, self.kc.sum() + self.vc.sum()


def test_export_and_aoti_package_write_the_cache_buffers(tmp_path):
    torch.manual_seed(0)
    m = Decode()
    a = step_args(3)
    inputs = (a[0], a[1], a[3], a[4], a[7])
    ep = torch.export.export(m, tuple(t.clone() for t in inputs))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"customop.fused_add_rms_norm_.default", "customop.paged_kv_write.default"} <= targets
    fresh = Decode()
    fresh.load_state_dict(m.state_dict())
    expected = fresh(*[t.clone() for t in inputs])
    assert expected[1].item() != 0  # the caches were written
    torch.testing.assert_close(ep.module()(*[t.clone() for t in inputs]), expected)
    pkg = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "decode.pt2"))
    got = torch._inductor.aoti_load_package(pkg)(*[t.clone() for t in inputs])
    torch.testing.assert_close(tuple(got), expected)


def test_torchscript_scripted_step_writes_in_place():
    scripted = torch.jit.script(step)
    a = step_args(3)
    b = [t.clone() for t in a]
    step(*a)
    scripted(*b)
    for x, y in zip(a, b):
        torch.testing.assert_close(y, x)
    assert "customop::paged_kv_write" in str(scripted.graph)


def test_refused_call_changes_nothing_from_python():
    a = step_args(3)
    before = [t.clone() for t in a]
    bad_slots = torch.tensor([0, 99, 1])
    with pytest.raises(RuntimeError, match=r"slot_mapping\[1\] = 99"):
        paged(a[3], a[4], a[5], a[6], bad_slots)
    with pytest.raises(RuntimeError, match="argument 'input'.*requires grad"):
        fused(a[0].requires_grad_(), a[1], a[2], 1e-6)
    for x, y in zip(a, before):
        torch.testing.assert_close(x.detach(), y)


def test_decode_loop_example_compiled_matches_eager():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "decode_loop" / "decode_loop.py"),
                        "--steps", "6", "--seqs", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "eager and compiled agree" in r.stdout


def test_gradcheck_audits_the_declared_writes():
    a = step_args(3)
    [report] = customop.gradcheck.check(paged, [(a[3], a[4], a[5], a[6], a[7])])
    assert report["passed"], report
    notes = "\n".join(report["notes"])
    assert "no gradient check" in notes
    assert "written: 'key_cache' (declared), 'value_cache' (declared)" in notes
    assert torch.count_nonzero(a[5]) == 0  # the audit wrote private copies


# A torch.library op (not customop's) whose kernel writes its input without declaring it: the
# commonest schema bug, which opcheck's four tests do not see on a kernel below autograd.
_lib = torch.library.Library("customop_test_mut", "DEF")
_lib.define("scale_writes(Tensor x) -> Tensor")


def _scale_writes(x):
    x.mul_(2)
    return x * 1.5


_lib.impl("scale_writes", _scale_writes, "CPU")


def test_gradcheck_catches_an_undeclared_write_in_a_torch_library_op():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    [report] = customop.gradcheck.check("customop_test_mut::scale_writes", [(x,)])
    assert not report["passed"]
    mutation = [f for f in report["failures"] if f["check"] == "mutation"]
    assert mutation and "undeclared write: argument 'x'" in mutation[0]["headline"], report
    assert "element [0]: 0.5 -> 1" in mutation[0]["detail"]
    torch.testing.assert_close(x.detach(), torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))


# ---- out= overloads (every op with a shape function has one) --------------------------------

def test_out_overload_compiles_and_matches_the_functional_op():
    x = torch.randn(4, 8)
    w = torch.randn(8)

    def f(x, w, out):
        torch.ops.customop.rms_norm.out(x, w, 1e-6, out=out)
        return out * 2

    out = torch.empty(4, 8)
    got = torch.compile(f, fullgraph=True, dynamic=True)(x, w, out)
    want = torch.ops.customop.rms_norm.default(x, w, 1e-6)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(got, want * 2)


def test_out_overload_refuses_a_buffer_overlapping_a_list_input_and_leaves_it():
    a, b, c = (torch.randn(4, 8) for _ in range(3))
    before = c.clone()
    with pytest.raises(RuntimeError, match="out argument 'out' shares memory with argument "
                                           "'inputs' element 2"):
        torch.ops.customop.weighted_sum.out([a, b, c], [1.0, 2.0, 3.0], out=c)
    assert torch.equal(c, before)


def test_out_overload_refuses_a_buffer_on_another_device():
    x, w = torch.randn(4, 8), torch.randn(8)
    meta = torch.empty(4, 8, device="meta")
    with pytest.raises(RuntimeError, match="customop::rms_norm.out: out argument 'out' is on "
                                           "meta, expected cpu"):
        torch.ops.customop.rms_norm.out(x, w, 1e-6, out=meta)


# ---- in-place variants (op.inplace_variant(): rms_norm_, bias_gelu_) ------------------------

def test_inplace_variant_compiles_exports_scripts_and_matches_the_functional_op(tmp_path):
    assert torch.Tag.inplace in torch.ops.customop.rms_norm_.default.tags

    def f(x, w):
        y = x + 1
        torch.ops.customop.rms_norm_(y, w, 1e-6)
        return y * 2

    x, w = torch.randn(4, 8), torch.randn(8)
    want = torch.ops.customop.rms_norm(x + 1, w, 1e-6) * 2
    torch.testing.assert_close(f(x, w), want)
    compiled, code = run_and_get_code(torch.compile(f, fullgraph=True, dynamic=True), x, w)
    torch.testing.assert_close(compiled, want)
    assert any("customop.rms_norm" in c for c in code)
    torch.testing.assert_close(torch.jit.script(f)(x, w), want)

    class M(torch.nn.Module):
        def forward(self, x, w):
            return f(x, w)

    ep = torch.export.export(M(), (x, w))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
    torch.testing.assert_close(torch._inductor.aoti_load_package(path)(x, w), want)


def test_inplace_variant_is_checked_by_the_harness():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    [report] = customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w)],
                                        check_compiled=False)
    assert report["passed"], customop.gradcheck.format_failure(report)
    assert any(n.startswith("inplace variant: customop::rms_norm_ wrote the functional op's "
                            "result into 'input' (2 layout(s))") for n in report["notes"])


def test_rms_norm_inplace_gives_the_functional_grads_eager_and_compiled():
    # rms_norm_ opts in (InplaceGrad::kThroughFunctional): y = 2 x; rms_norm_(y, w) must give
    # the values and grads of rms_norm(2 x, w), eagerly and through AOTAutograd.
    x0, w0 = torch.randn(4, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    g = torch.randn(4, 8, dtype=torch.float64)

    def functional(x, w):
        return torch.ops.customop.rms_norm(x * 2, w, 1e-6)

    def inplace(x, w):
        y = x * 2
        torch.ops.customop.rms_norm_(y, w, 1e-6)
        return y

    def run(f):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = f(x, w)
        out.backward(g)
        return out.detach(), x.grad, w.grad

    want = run(functional)
    for got in (run(inplace), run(torch.compile(inplace, fullgraph=True, dynamic=True))):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    leaf = x0.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="argument 'input' is a leaf tensor that requires grad"):
        torch.ops.customop.rms_norm_(leaf, w0, 1e-6)
    assert torch.equal(leaf.detach(), x0)
    # bias_gelu_ keeps the default: an argument that requires grad is refused.
    with pytest.raises(RuntimeError, match="not differentiable, but argument 'bias' requires grad"):
        torch.ops.customop.bias_gelu_(x0.clone(), torch.randn(8, dtype=torch.float64,
                                                              requires_grad=True))


def test_harness_compares_the_inplace_grads():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    [report] = customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w)],
                                        check_compiled=False)
    assert report["passed"], customop.gradcheck.format_failure(report)
    assert ("inplace variant: customop::rms_norm_'s grads of 'input', 'weight' match the "
            "functional op's (VJP, same cotangent)") in report["notes"]
    b = torch.randn(8, dtype=torch.float64, requires_grad=True)
    [report] = customop.gradcheck.check(torch.ops.customop.bias_gelu, [(x, b)],
                                        check_compiled=False)
    assert report["passed"], customop.gradcheck.format_failure(report)
    assert any(n.startswith("inplace variant: customop::bias_gelu_ refuses arguments that "
                            "require grad, leaving them unchanged") for n in report["notes"])


_VIEW_NOTE = "not checked (an in-place view op, tagged inplace_view"
_CAST_NOTE = "wrote the functional op's result (cast to its dtype)"


@pytest.mark.parametrize("op, sample, note", [
    (torch.ops.aten.t.default, lambda: (torch.randn(4, 5, dtype=torch.float64, requires_grad=True),),
     _VIEW_NOTE),
    (torch.ops.aten.squeeze.dim,
     lambda: (torch.randn(4, 1, 5, dtype=torch.float64, requires_grad=True), 1), _VIEW_NOTE),
    (torch.ops.aten.unsqueeze.default,
     lambda: (torch.randn(4, 5, dtype=torch.float64, requires_grad=True), 1), _VIEW_NOTE),
    # float32 self, float64 other: mul_/add_ keep self's dtype, the functional op promotes.
    (torch.ops.aten.mul.Tensor, lambda: (torch.randn(4, 5, requires_grad=True),
                                         torch.randn(4, 5, dtype=torch.float64, requires_grad=True)),
     _CAST_NOTE),
    (torch.ops.aten.add.Tensor, lambda: (torch.randn(4, 5, requires_grad=True),
                                         torch.randn(4, 5, dtype=torch.float64, requires_grad=True)),
     _CAST_NOTE),
])
def test_inplace_check_no_false_alarm_on_view_ops_and_type_promotion(op, sample, note):
    # Found by a hostile-input probe: t_/squeeze_/unsqueeze_ (tagged inplace_view) change their
    # argument's layout by design, and an in-place op keeps its argument's dtype (its grads
    # then agree with the functional op's to float32's tolerance, not float64's).
    [report] = customop.gradcheck.check(op, [sample()], check_compiled=False)
    assert report["passed"], customop.gradcheck.format_failure(report)
    assert any(note in n for n in report["notes"]), report["notes"]
    if note == _CAST_NOTE:
        assert any("grads of 'self', 'other' match" in n for n in report["notes"]), report["notes"]


def test_inference_tensors_are_not_written_outside_inference_mode():
    # As torch refuses x.mul_(2) for an inference tensor x outside InferenceMode, before writing.
    with torch.inference_mode():
        x, w, res = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8)
    before = x.clone()
    with pytest.raises(RuntimeError, match="argument 'input' is an inference tensor"):
        torch.ops.customop.rms_norm_(x, w, 1e-6)
    with pytest.raises(RuntimeError, match="argument 'input' .*inference tensor"):
        torch.ops.customop.fused_add_rms_norm_(x, res, w, 1e-6)
    assert torch.equal(x, before)
    with torch.inference_mode():
        torch.ops.customop.rms_norm_(x, w, 1e-6)  # inside InferenceMode it writes
    assert not torch.equal(x, before)


def test_inplace_variant_errors_name_the_call_the_user_made():
    # The functional op's checks name rms_norm; the context says rms_norm_ was called.
    x, w = torch.randn(4, 8), torch.randn(8, dtype=torch.float64)
    before = x.clone()
    with pytest.raises(TypeError, match=r"weight must have the dtype of input .*raised while "
                                        r"customop::rms_norm_ ran customop::rms_norm"):
        torch.ops.customop.rms_norm_(x, w, 1e-6)
    assert torch.equal(x, before)
