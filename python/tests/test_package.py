"""The installed `customop` Python package (a wheel from `pip install .` / `pip wheel .`, run from
a fresh venv by ci/matrix's wheel leg): import, the functions' signatures, docstrings and
stubs, each op called with named arguments and through torch.library.opcheck, and the
torch-mismatch error."""

import inspect
import pathlib

import pytest
import torch

import customop
from customop import _schema_py, _stubs
from customop._torch_check import mismatch_message

F64 = torch.float64


def _leaf(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_()


# One call per built-in op, with named arguments (kwargs as a user writes them).
CALLS = {
    "bias_gelu": lambda: dict(input=_leaf(4, 8), bias=_leaf(8, seed=1), approximate="tanh"),
    "clamp_count": lambda: dict(input=_leaf(7), min=-0.5, max=0.5),
    # The ops that write their arguments take tensors that do not require grad.
    "fused_add_rms_norm_": lambda: dict(input=_leaf(4, 8).detach(), residual=_leaf(4, 8, seed=1).detach(),
                                        weight=_leaf(8, seed=2).detach(), eps=1e-5),
    "masked_softmax": lambda: dict(input=_leaf(3, 4), mask=torch.rand(3, 4) > 0.3, dim=1),
    "max_along": lambda: dict(input=_leaf(3, 5), dim=1, keepdim=True),
    "paged_kv_write": lambda: dict(key=_leaf(3, 2, 4).detach(), value=_leaf(3, 2, 4, seed=1).detach(),
                                   key_cache=torch.zeros(2, 4, 2, 4, dtype=F64),
                                   value_cache=torch.zeros(2, 4, 2, 4, dtype=F64),
                                   slot_mapping=torch.tensor([5, -1, 0])),
    "rms_norm": lambda: dict(input=_leaf(4, 8), weight=_leaf(8, seed=1), eps=1e-5),
    # The in-place variants write their first argument: no tensor requires grad.
    "rms_norm_": lambda: dict(input=_leaf(4, 8).detach(), weight=_leaf(8, seed=1).detach(),
                              eps=1e-5),
    "bias_gelu_": lambda: dict(input=_leaf(4, 8).detach(), bias=_leaf(8, seed=1).detach(),
                               approximate="tanh"),
    "weighted_sum": lambda: dict(inputs=[_leaf(2, 3), _leaf(2, 3, seed=1)], weights=[0.5, 2.0]),
    # The backward ops: grads of the ops above, differentiable themselves (double backward).
    "bias_gelu_backward": lambda: dict(grad=_leaf(4, 8, seed=2), input=_leaf(4, 8),
                                       bias=_leaf(8, seed=1), approximate="none"),
    "clamp_count_backward": lambda: dict(grad=_leaf(7, seed=1), input=_leaf(7), min=-0.5, max=0.5),
    "masked_softmax_backward": lambda: dict(grad=_leaf(4, 8, seed=2),
                                            output=_leaf(4, 8).detach().softmax(-1)
                                            .requires_grad_(), dim=-1),
    "max_along_backward": lambda: dict(grad=_leaf(4, 1, seed=2),
                                       indices=torch.tensor([[3], [0], [7], [5]]), dim=1, size=8),
    "rms_norm_backward": lambda: dict(grad=_leaf(4, 8, seed=2), input=_leaf(4, 8),
                                      weight=_leaf(8, seed=1), eps=1e-5),
    "weighted_sum_backward": lambda: dict(grad=_leaf(4, 8, seed=2), weights=[0.5, -2.0]),
}


def test_imports_from_the_installed_wheel_not_the_source_tree():
    path = pathlib.Path(customop.__file__)
    assert "site-packages" in path.parts, path
    assert customop.OPS_LIBRARY.exists()
    assert customop.__version__ == "0.1.0"


def test_the_built_in_ops_are_exactly_the_registered_customop_ops():
    registered = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas()
                  if s.name.startswith("customop::")}
    assert registered == set(customop.BUILT_IN_OPS)
    assert set(CALLS) == set(customop.BUILT_IN_OPS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_named_arguments_and_defaults_come_from_the_schema(name):
    fn = getattr(customop, name)
    schema = getattr(torch.ops.customop, name).default._schema
    params = inspect.signature(fn).parameters
    assert list(params) == [a.name for a in schema.arguments]
    for a in schema.arguments:
        if a.has_default_value():
            assert params[a.name].default == a.default_value
    assert _schema_py.schema_text(schema) in fn.__doc__
    assert f"customop/ops/{name.rstrip('_')}.h" in fn.__doc__


def test_schema_text_keeps_symint_where_torchs_python_arguments_say_int():
    # torch's Python Argument reports a SymInt argument's type as int; the text, docstrings
    # and ops.pyi spell it as the schema does.
    schema = torch.ops.customop.max_along_backward.default._schema
    assert [str(a.type) for a in schema.arguments][3] == "int"
    text = _schema_py.schema_text(schema)
    assert text == str(schema)
    assert "int dim, SymInt size" in text
    lib = torch.library.Library("customop_pkg_symint", "DEF")
    lib.define("f(Tensor x, SymInt[] shape, SymInt? n=None, int k=2) -> Tensor")
    schema = torch.ops.customop_pkg_symint.f.default._schema
    assert _schema_py.schema_text(schema) == (
        "customop_pkg_symint::f(Tensor x, SymInt[] shape, SymInt? n=None, int k=2) -> Tensor")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_call_equals_the_dispatcher_op_and_passes_opcheck(name):
    kwargs = CALLS[name]()
    twin = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    got = getattr(customop, name)(**kwargs)
    want = getattr(torch.ops.customop, name)(**twin)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for key, value in kwargs.items():  # what the op wrote, too
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, twin[key], rtol=0, atol=0)
    torch.library.opcheck(getattr(torch.ops.customop, name).default, (), kwargs)


def test_bad_arguments_name_the_op():
    with pytest.raises(RuntimeError, match="customop::rms_norm.*missing value for argument 'weight'"):
        customop.rms_norm(torch.ones(2, 3))  # weight is required
    with pytest.raises(RuntimeError, match="rms_norm"):
        customop.rms_norm(torch.ones(2, 3, dtype=F64), torch.ones(4, dtype=F64))


def test_the_out_form_writes_the_buffers_and_returns_them():
    x, w = torch.randn(4, 8), torch.rand(8) + 0.5
    y = torch.empty(4, 8)
    assert customop.rms_norm(x, w, out=y) is y
    torch.testing.assert_close(y, customop.rms_norm(x, w), rtol=0, atol=0)
    values, indices = torch.empty(4), torch.empty(4, dtype=torch.long)
    got = customop.max_along(x, 1, values=values, indices=indices)
    assert got[0] is values and got[1] is indices
    assert torch.equal(values, x.max(1).values) and torch.equal(indices, x.max(1).indices)


@pytest.mark.parametrize(
    "call, text",
    [
        (lambda x: customop.max_along(x, 1, out=torch.empty(4)),
         r"customop.max_along: the out= form takes every output by name \(values=, indices=\), "
         r"but got out=; missing values, indices"),
        (lambda x: customop.max_along(x, 1, values=torch.empty(4)),
         r"customop.max_along: .* but got values=; missing indices"),
        (lambda x: customop.rms_norm_(x, torch.ones(8), out=x),
         r"customop.rms_norm_: this op has no out= form"),
        (lambda x: customop.weighted_sum_backward(x, [1.0], out=x),
         r"customop.weighted_sum_backward: this op has no out= form"),
    ],
)
def test_a_bad_out_form_names_the_op_and_the_outputs(call, text):
    with pytest.raises(TypeError, match=text):
        call(torch.randn(4, 8))


def test_the_committed_stubs_match_the_schemas():
    stub = pathlib.Path(customop.__file__).with_name("ops.pyi")
    assert stub.read_text() == _stubs.render(customop.BUILT_IN_OPS), (
        "ops.pyi is stale: regenerate it with `python -m customop._stubs > python/customop/ops.pyi`")


def test_mismatch_message_names_both_versions_and_how_to_rebuild():
    msg = mismatch_message("customop 0.1.0", "2.15.0+cu132", "13.2", "2.11.0+cu128", "12.8")
    assert "built against torch 2.15.0+cu132 (CUDA 13.2)" in msg
    assert "runs torch 2.11.0+cu128 (CUDA 12.8)" in msg
    assert "pip install --no-build-isolation --force-reinstall" in msg
    cpu = mismatch_message("customop 0.1.0", "2.15.0", "13.2", "2.15.0+cpu", None)
    assert "runs torch 2.15.0+cpu (CPU-only)" in cpu
    assert mismatch_message("x", "2.15.0+cu132", "13.2", "2.15.0", "13.2") is None


def test_the_op_library_records_the_torch_it_was_built_against():
    assert customop.recorded_torch_version(customop.OPS_LIBRARY) == torch.__version__.split("+")[0]
    assert customop.recorded_torch_version(__file__) is None  # not an ELF file


def test_load_library_refuses_a_library_built_against_another_torch(monkeypatch, tmp_path):
    # A copy, so that nothing is loaded twice if the check were to let it through.
    lib = tmp_path / "libcopy.so"
    lib.write_bytes(customop.OPS_LIBRARY.read_bytes())
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu128")
    with pytest.raises(ImportError) as e:
        customop.load_library(lib)
    built = customop._build_info.TORCH_VERSION.split("+")[0]
    assert f"the op library {lib} was built against torch {built}" in str(e.value)
    assert "runs torch 2.11.0+cu128" in str(e.value)


# ---- customop.gradcheck on ops defined in Python (torch.library.custom_op) --------------------

def _define_cube(name, factor):
    """x**3 with backward 3 x^2 * factor (factor 1: correct; else a planted bug)."""

    @torch.library.custom_op(f"customop_pkg_test::{name}", mutates_args=())
    def cube(x: torch.Tensor) -> torch.Tensor:
        return x * x * x

    @cube.register_fake
    def _(x):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x * factor

    cube.register_autograd(backward, setup_context=setup_context)
    return cube


CUBE = _define_cube("cube", 1.0)
CUBE_BUGGY = _define_cube("cube_buggy", 1.01)  # 1 % too large: a wrong constant


def _cube_samples():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(5, generator=g, dtype=F64).requires_grad_(),),
            (torch.randn(3, 4, generator=g, dtype=F64).t().requires_grad_(),)]  # non-contiguous


def test_gradcheck_passes_a_correct_python_op_and_returns_the_cli_report():
    reports = customop.gradcheck.check(CUBE, _cube_samples())
    assert [r["passed"] for r in reports] == [True, True]
    r = reports[0]
    assert r["op"] == "customop_pkg_test::cube" and r["dtype"] == "float64"
    assert r["inputs"] == ["x"] and r["mode"] == "slow"
    customop.gradcheck.assert_gradcheck(torch.ops.customop_pkg_test.cube, _cube_samples(),
                                        mode="fast")


def test_gradcheck_catches_the_planted_backward_bug_naming_the_argument_and_element():
    reports = customop.gradcheck.check("customop_pkg_test::cube_buggy", _cube_samples())
    assert [r["passed"] for r in reports] == [False, False]
    text = customop.gradcheck.format_failure(reports[0])
    assert "Jacobian mismatch for output 0 with respect to input 0 ('x')" in text
    assert "numerical" in text and "analytical" in text
    pair = reports[0]["pairs"][0]
    assert pair["input_name"] == "x" and not pair["passed"]
    assert pair["worst"]["analytical"] == pytest.approx(pair["worst"]["numerical"] * 1.01, rel=1e-6)
    with pytest.raises(AssertionError, match="with respect to input 0 \\('x'\\)"):
        customop.gradcheck.assert_gradcheck(CUBE_BUGGY, _cube_samples())


def test_check_refuses_a_keyword_only_argument_given_by_position():
    # aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1): a third positional value
    # must not become alpha (add(x, y, 2) raises in torch too).
    x = torch.randn(3, dtype=F64, requires_grad=True)
    y = torch.randn(3, dtype=F64, requires_grad=True)
    with pytest.raises(ValueError, match=r"expected at most 2 positional arguments .*got 3; "
                                         r"'alpha' is keyword-only: pass it by name"):
        customop.gradcheck.check("aten::add.Tensor", [(x, y, 2.0)])
    (report,) = customop.gradcheck.check("aten::add.Tensor",
                                         [customop.gradcheck.Sample(x, y, alpha=2.0)])
    assert report["passed"], customop.gradcheck.format_failure(report)


def test_gradcheck_runs_on_customops_own_ops_and_refuses_bad_samples():
    x = torch.randn(4, 8, dtype=F64).requires_grad_()
    w = (torch.rand(8, dtype=F64) + 0.5).requires_grad_()
    (report,) = customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w, 1e-6)])
    assert report["passed"], customop.gradcheck.format_failure(report)
    (report,) = customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w)])  # eps's default
    assert report["passed"], customop.gradcheck.format_failure(report)
    with pytest.raises(ValueError, match="expected at most 3 positional arguments"):
        customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w, 1e-6, 1)])
    with pytest.raises(ValueError, match="unknown option 'tolerance'"):
        customop.gradcheck.check(torch.ops.customop.rms_norm, [(x, w, 1e-6)], tolerance=1)
