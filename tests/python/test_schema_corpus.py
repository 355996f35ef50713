"""The schema corpus (tests/gradcheck/mutants/schema_bugs.cpp), side by side with
torch.library.opcheck.

Each planted bug breaks an op's contract with the dispatcher, not its backward: a write the
schema does not declare, a declared write without a version bump, a fake kernel that locks a
symbolic size, a fake kernel whose strides are wrong on shapes other than the sample's. Each has
a correct twin. customop.gradcheck.check must fail every bug with the check named here and pass
every twin; opcheck's verdicts are printed beside ours (pytest -s shows the table) and, on the
pinned torch, must be the ones the README's table states.

Environment (set by ctest): CUSTOMOP_MUTANTS_LIB (the .so); PYTHONPATH holding customop.
"""

import os

import pytest
import torch

import customop.gradcheck as gc

LIB = os.environ.get("CUSTOMOP_MUTANTS_LIB")
pytestmark = pytest.mark.skipif(not LIB, reason="CUSTOMOP_MUTANTS_LIB must be set")

# op -> (its correct twin or None, the check of ours that must fail, or None)
CORPUS = {
    "double_it": (None, None),
    "add_one_": (None, None),
    "pad_row": (None, None),
    "tall_copy": (None, None),
    "scale3": (None, None),
    "halve": (None, None),
    "add_iota": (None, None),
    "double_it_writes_input": ("double_it", "mutation"),
    "add_one_no_bump_": ("add_one_", "mutation"),
    "pad_row_locks_size": ("pad_row", "shape_lock"),
    "tall_copy_fake_contiguous": ("tall_copy", "fake_kernel"),
    "halve_upcasts": ("halve", "fake_kernel"),
    "add_iota_walks_memory": ("add_iota", "inplace_variant"),
    "add_iota_no_bump": ("add_iota", "inplace_variant"),
    "halve_loses_grad": ("halve", "inplace_variant"),
    "scale3_out_off": ("scale3", "out_variant"),
    "scale3_out_reads": ("scale3", "out_variant"),
}
# What opcheck said on torch 2.15 (the README's table): the opcheck test that failed, or None.
OPCHECK_ON_PINNED_TORCH = {
    "double_it_writes_input": "test_schema",
    "add_one_no_bump_": None,
    "pad_row_locks_size": None,
    "tall_copy_fake_contiguous": None,
    "halve_upcasts": None,
    "add_iota_walks_memory": None,
    "add_iota_no_bump": None,
    "halve_loses_grad": None,
    "scale3_out_off": None,
    "scale3_out_reads": None,
}


@pytest.fixture(scope="module", autouse=True)
def _load():
    torch.ops.load_library(LIB)


def _sample(name: str):
    # add_one_* write x: a written tensor may not require grad
    grad = not name.startswith("add_one")
    return (torch.randn(3, 4, dtype=torch.float64, requires_grad=grad),)


def _ours(name: str):
    report = gc.check(getattr(torch.ops.customop_mutants, name), [_sample(name)])[0]
    return report, sorted({f["check"] for f in report.get("failures", [])})


def _opcheck(name: str):
    results = torch.library.opcheck(getattr(torch.ops.customop_mutants, name).default,
                                    _sample(name),
                                    raise_exception=False)
    return [test for test, verdict in results.items() if verdict != "SUCCESS"]


@pytest.mark.filterwarnings("ignore")
def test_every_bug_caught_no_false_alarm_and_the_table_against_opcheck():
    rows = []
    for name, (twin, expected) in CORPUS.items():
        torch.manual_seed(0)
        report, failed = _ours(name)
        torch_failed = _opcheck(name)
        rows.append((name, twin or "", ", ".join(failed) or "pass",
                     ", ".join(torch_failed) or "pass"))
        if expected is None:
            assert report["passed"], gc.format_failure(report)
            assert not torch_failed, f"opcheck failed the correct op {name}: {torch_failed}"
        else:
            assert not report["passed"] and expected in failed, (name, failed)
            if torch.__version__.startswith("2.15."):
                want = OPCHECK_ON_PINNED_TORCH[name]
                assert torch_failed == ([want] if want else []), (name, torch_failed)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'op':{width}}  {'twin of':12}  {'customop.gradcheck':20}  opcheck")
    for op, twin, ours, theirs in rows:
        print(f"{op:{width}}  {twin:12}  {ours:20}  {theirs}")


def test_shape_lock_names_argument_dim_and_guard():
    report, _ = _ours("pad_row_locks_size")
    lock = report["shape_lock"]
    assert lock["locked"] == [{"argument": "x", "dim": 0, "size": 3,
                               "where": lock["locked"][0]["where"]}]
    assert "Eq(" in lock["locked"][0]["where"] and "guard_int" in lock["locked"][0]["where"]
    assert "locks 1 of 2 symbolic sizes" in gc.format_failure(report)


def test_shape_lock_allows_relations_between_sizes():
    # tall_copy's fake branches on n > m: a guard that fixes neither size.
    report, _ = _ours("tall_copy")
    assert report["shape_lock"]["passed"] and report["shape_lock"]["guards"]


def test_shape_lock_python_fake_names_the_line():
    lib = torch.library.Library("schema_corpus_py", "FRAGMENT")  # noqa: F841 -- kept alive
    torch.library.define("schema_corpus_py::rows", "(Tensor x) -> Tensor", lib=lib)
    torch.library.impl("schema_corpus_py::rows", "cpu", lambda x: x * 2, lib=lib)

    @torch.library.register_fake("schema_corpus_py::rows", lib=lib)
    def _(x):
        rows = int(x.shape[0])  # the planted lock
        return x.new_empty((rows, x.shape[1]))

    x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    # The op has no autograd kernel, so the gradient checks fail too; the lock is what we test.
    report = gc.check("schema_corpus_py::rows", [(x,)])[0]
    lock = report.get("shape_lock")
    assert lock is not None and not lock["passed"], report
    assert "test_schema_corpus.py" in lock["locked"][0]["where"]


def _tile_rows_fake(lock: bool):
    def fake(x, n):
        rows = int(n) if lock else n  # int(n): the planted lock of a SymInt argument
        return x.new_empty((rows * x.shape[0], x.shape[1]))
    return fake


def test_shape_lock_covers_symint_arguments():
    lib = torch.library.Library("schema_corpus_py", "FRAGMENT")  # noqa: F841 -- kept alive
    for name, lock in (("tile_rows", False), ("tile_rows_locked", True)):
        torch.library.define(f"schema_corpus_py::{name}", "(Tensor x, SymInt n) -> Tensor", lib=lib)
        torch.library.impl(f"schema_corpus_py::{name}", "cpu", lambda x, n: x.repeat(n, 1), lib=lib)
        torch.library.register_fake(f"schema_corpus_py::{name}", _tile_rows_fake(lock), lib=lib)
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    # No autograd kernels: the gradient checks fail; the lock is what this tests.
    ok = gc.check("schema_corpus_py::tile_rows", [(x, 3)], check_compiled=False)[0]
    assert ok["shape_lock"]["passed"] and ok["shape_lock"]["symbols"] == 3, ok["shape_lock"]
    bad = gc.check("schema_corpus_py::tile_rows_locked", [(x, 3)], check_compiled=False)[0]
    lock = bad["shape_lock"]
    assert [(lk["argument"], lk["dim"], lk["size"]) for lk in lock["locked"]] == [("n", None, 3)]
    assert "test_schema_corpus.py" in lock["locked"][0]["where"]
    assert "argument 'n' (SymInt, 3 in the sample)" in gc.format_failure(bad)


def test_shape_lock_names_a_user_file_under_a_folder_named_torch(tmp_path):
    # Found by a hostile-input probe: a fake in <anything>/torch/fk.py was taken for torch's own
    # code ("recorded inside the op's kernel").
    import importlib.util
    (tmp_path / "torch").mkdir()
    path = tmp_path / "torch" / "fk.py"
    path.write_text("def fake(x, n):\n    return x.new_empty((int(n) * x.shape[0], x.shape[1]))\n")
    spec = importlib.util.spec_from_file_location("customop_probe_fk", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lib = torch.library.Library("schema_corpus_py", "FRAGMENT")  # noqa: F841 -- kept alive
    torch.library.define("schema_corpus_py::tile_rows_torch_dir", "(Tensor x, SymInt n) -> Tensor",
                         lib=lib)
    torch.library.impl("schema_corpus_py::tile_rows_torch_dir", "cpu", lambda x, n: x.repeat(n, 1),
                       lib=lib)
    torch.library.register_fake("schema_corpus_py::tile_rows_torch_dir", module.fake, lib=lib)
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    report = gc.check("schema_corpus_py::tile_rows_torch_dir", [(x, 3)], check_compiled=False)[0]
    where = report["shape_lock"]["locked"][0]["where"]
    assert str(path) in where and "inside the op's kernel" not in where, where


def test_shape_lock_can_be_turned_off():
    report = gc.check(torch.ops.customop_mutants.pad_row_locks_size, [_sample("pad_row")],
                      check_shape_lock=False)[0]
    assert report["passed"] and "shape_lock" not in report


def _define_scaled(lib, name: str, out_offset: float):
    """ns::<name>(Tensor x) -> Tensor (3 x, a CPU kernel and a fake kernel) and its hand-written
    out= overload, tagged torch.Tag.out, off by `out_offset`."""
    torch.library.define(f"schema_corpus_py::{name}", "(Tensor x) -> Tensor", lib=lib)
    torch.library.define(f"schema_corpus_py::{name}.out", "(Tensor x, *, Tensor(a!) out) -> "
                         "Tensor(a!)", tags=(torch.Tag.out,), lib=lib)
    torch.library.impl(f"schema_corpus_py::{name}", "cpu", lambda x: x * 3, lib=lib)
    torch.library.register_fake(f"schema_corpus_py::{name}", lambda x: torch.empty_like(x),
                                lib=lib)
    torch.library.register_autograd(f"schema_corpus_py::{name}", lambda ctx, g: g * 3, lib=lib)

    def out_kernel(x, out):
        return out.copy_(x * 3 + out_offset)

    torch.library.impl(f"schema_corpus_py::{name}.out", "cpu", out_kernel, lib=lib)


@pytest.mark.filterwarnings("ignore")
def test_compiled_check_catches_an_out_overload_inductor_takes():
    # With check_out_variant off, only the compiled run can see the out= overload: Inductor
    # lowers the functional op to it (Tag.out), and the compiled answer differs from eager.
    lib = torch.library.Library("schema_corpus_py", "FRAGMENT")  # noqa: F841 -- kept alive
    _define_scaled(lib, "scaled", 0.0)
    _define_scaled(lib, "scaled_out_off", 0.5)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    good = gc.check("schema_corpus_py::scaled", [(x,)], check_out_variant=False)[0]
    assert good["passed"] and good["compiled"]["lowered"], gc.format_failure(good)
    bad = gc.check("schema_corpus_py::scaled_out_off", [(x,)], check_out_variant=False)[0]
    compiled = bad["compiled"]
    assert not bad["passed"] and not compiled["passed"] and compiled["lowered"], compiled
    assert compiled["mismatches"][0]["what"] == "output 0"
    assert "Greatest absolute difference: 0.5" in compiled["mismatches"][0]["detail"]
    text = gc.format_failure(bad)
    assert "compiled result differs from eager" in text and "scaled_out_off.out" in text


@pytest.mark.filterwarnings("ignore")
def test_compiled_check_turns_the_out_lowering_on_for_the_check_only():
    from torch._library import _out_variant

    op = torch.ops.customop.masked_softmax.default
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    report = gc.check(op, [(x, None, 1)])[0]
    compiled = report["compiled"]
    assert report["passed"], gc.format_failure(report)
    # customop's .out overload is untagged (AOTInductor), so the check registers it...
    assert compiled["lowered"] and "registered for this check" in compiled["out_lowering"]
    # ...and takes it off again: an AOTI package of the op must not see the lowering.
    assert op not in _out_variant._manual_out_variant_registry
    assert any(n.startswith("compiled: 1 tensor(s) equal") and n.endswith(", taken")
               for n in report["notes"])
    off = gc.check(op, [(x, None, 1)], check_compiled=False)[0]
    assert "compiled" not in off
    with pytest.raises(ValueError, match="check_compiled' must be a bool"):
        gc.check(op, [(x, None, 1)], check_compiled="yes")


@pytest.mark.filterwarnings("ignore")
def test_compiled_check_compares_without_a_lowering_torch_cannot_compile():
    # torch 2.15's Inductor passes a defaulted argument (rms_norm's eps) twice to the out=
    # overload: only this check would take the overload, so it compares without it.
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    report = gc.check(torch.ops.customop.rms_norm, [(x, w)])[0]
    compiled = report["compiled"]
    assert report["passed"], gc.format_failure(report)
    if not compiled["lowered"]:
        assert compiled["out_lowering"].startswith("not taken: Inductor's call of the untagged "
                                                   "out= overload failed"), compiled


@pytest.mark.filterwarnings("ignore")
def test_compiled_check_compares_written_arguments():
    # A mutating op: no out= overload; the caches written eagerly and compiled must agree.
    key, value = torch.randn(2, 2, 3), torch.randn(2, 2, 3)
    caches = torch.zeros(2, 2, 2, 3), torch.zeros(2, 2, 2, 3)
    report = gc.check(torch.ops.customop.paged_kv_write,
                      [(key, value, *caches, torch.tensor([3, 0]))])[0]
    compiled = report["compiled"]
    assert report["passed"], gc.format_failure(report)
    assert compiled["compared"] == 2 and compiled["out_overload"] is None, compiled
    assert caches[0].abs().sum() == 0, "the check must run on clones"
