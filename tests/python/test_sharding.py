"""Sharding rules declared in C++ on DTensor: every built-in op's rule against the op on whole
tensors (forward and backward, every placement combination of its samples, redistributing ones
included); the planted wrong rules of libcustomop_sharding_mutants.so caught, naming the op,
the placements, the output and the element; an op without a rule refused naming op.sharding;
the rules registered by `import customop` and `customop.load_library`.

Environment (set by ctest): PYTHONPATH with the build tree's package (customop_python_dev),
CUSTOMOP_SHARDING_MUTANTS_LIB (the mutants' library).
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import customop
import customop._sharding_check
from customop import gradcheck

MUTANTS = os.environ.get("CUSTOMOP_SHARDING_MUTANTS_LIB", "")
needs_mutants = pytest.mark.skipif(not os.path.exists(MUTANTS),
                                   reason="CUSTOMOP_SHARDING_MUTANTS_LIB is not set")


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=_g(seed), dtype=torch.float64)


# Samples of every built-in op in float64: shapes with dims of size >= 2 to shard.
BUILT_IN = {
    "customop::bias_gelu": [("[4, 6] + [6]", [_randn(4, 6), _randn(6, seed=1), "none"]),
                            ("[2, 4, 6] + [6], tanh", [_randn(2, 4, 6), _randn(6, seed=1), "tanh"])],
    "customop::rms_norm": [("[4, 6]", [_randn(4, 6), _randn(6, seed=1), 1e-6]),
                           # float32 in: checked in float64 (no false alarm from reordered sums)
                           ("[5, 6] float32", [_randn(5, 6).float(), _randn(6, seed=1).float(),
                                               1e-6]),
                           ("[2, 4, 6]", [_randn(2, 4, 6), _randn(6, seed=1), 1e-6])],
    "customop::masked_softmax": [
        ("[4, 6] dim 1, mask [4, 6]", [_randn(4, 6), _randn(4, 6, seed=1) > -0.5, 1]),
        ("[4, 6] dim 0, mask [6]", [_randn(4, 6), _randn(6, seed=1) > -0.5, 0]),
        ("[4, 6] dim -1, no mask", [_randn(4, 6), None, -1])],
    "customop::max_along": [("0-d dim 0", [_randn(), 0, False]),
                            ("[4, 6] dim 1", [_randn(4, 6), 1, False]),
                            ("[4, 6] dim 0 keepdim", [_randn(4, 6), 0, True]),
                            ("[2, 4, 6] dim 1", [_randn(2, 4, 6), 1, False])],
    "customop::clamp_count": [("[4, 6]", [_randn(4, 6), -0.5, 0.5])],
    "customop::weighted_sum": [("3 x [4, 6]", [[_randn(4, 6, seed=k) for k in range(3)],
                                              [0.5, -1.0, 2.0]])],
}


def test_every_built_in_op_declares_a_rule():
    rules = customop._sharding.declared_rules()
    kinds = {name: rules[name]["kind"] for name in BUILT_IN}
    assert kinds == {"customop::bias_gelu": "pointwise", "customop::rms_norm": "reduction",
                     "customop::masked_softmax": "reduction", "customop::max_along": "reduction",
                     "customop::clamp_count": "pointwise", "customop::weighted_sum": "pointwise"}
    assert rules["customop::clamp_count"]["partial_sum"] == [1]
    assert rules["customop::max_along"]["keepdim_argument"] == "keepdim"


def test_strategies_of_a_reduction_rule():
    """What rms_norm's rule lists for input [2, 4, 6], weight [6]: dims 0 and 1 of input
    (weight replicated: it aligns with the normalized dim), never dim 2."""
    rule = customop._sharding.declared_rules()["customop::rms_norm"]
    spec = lambda *s: type("Spec", (), {"shape": s})()  # noqa: E731
    schema = torch.ops.customop.rms_norm.default._schema
    got = [([str(p) for p in outs], [str(p) for p in ins]) for outs, ins in
           customop._sharding.strategies(rule, schema, (spec(2, 4, 6), spec(6)), {"eps": 1e-6})]
    assert got == [(["R"], ["R", "R"]), (["S(0)"], ["S(0)", "R"]), (["S(1)"], ["S(1)", "R"])]


@pytest.fixture(scope="module")
def built_in_reports():
    """Every built-in op's samples in one pair of workers (two torch imports, not twelve)."""
    cases = [(name, label, args) for name, samples in BUILT_IN.items() for label, args in samples]
    reports = customop._sharding_check.run_cases(cases)
    return {name: [r for r in reports if r["op"] == name] for name in BUILT_IN}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_built_in_rule_matches_the_op_on_whole_tensors(name, built_in_reports):
    reports = built_in_reports[name]
    assert [r["label"] for r in reports] == [label for label, _ in BUILT_IN[name]]
    for rep in reports:
        assert rep["passed"], gradcheck.format_sharding_failure(rep)
        # everything replicated, and a sharded case (a 0-d sample has only the first)
        assert rep["listed_by_rule"] >= min(2, rep["combinations"]), rep
    # Combinations the rule does not list make DTensor redistribute; clamp_count's one input
    # is pointwise, so its rule lists all of them.
    redistributed = sum(r["redistributed"] for r in reports)
    assert (redistributed == 0) == (name == "customop::clamp_count"), reports


@needs_mutants
def test_planted_wrong_rules_are_caught():
    customop.load_library(MUTANTS)
    x = _randn(4, 6)
    reduced, partial, unplaced, control, none = customop._sharding_check.run_cases([
        ("sharding_mutants::row_norm", "[4, 6]", [x]),
        ("sharding_mutants::clamp_count", "[4, 6]", [x, -0.5, 0.5]),
        ("sharding_mutants::clamp_count_pointwise", "[4, 6]", [x, -0.5, 0.5]),
        ("sharding_mutants::row_norm_ok", "[4, 6]", [x]),
        ("sharding_mutants::no_rule", "[4, 6]", [x])])  # no backward either: forward only
    assert not none["passed"] and none["rule"] is None
    assert "no sharding rule is declared" in none["failures"][0]["message"]
    assert not reduced["passed"]
    text = gradcheck.format_sharding_failure(reduced)
    assert "sharding_mutants::row_norm" in text and "x: S1" in text
    assert "output '0' differs from the op on whole tensors" in text
    assert all("x: S1" in f["placements"] for f in reduced["failures"])  # S0 is right
    assert not partial["passed"]
    assert {f["what"] for f in partial["failures"]} == {"output 'clamped'"}
    assert {f["placements"] for f in partial["failures"]} == {"input: S0", "input: S1"}
    assert partial["failures"][0]["index"] == []  # the 0-d count
    # Declared pointwise, the count cannot be placed: a clear error at the call, not a value.
    assert not unplaced["passed"]
    assert "output 'clamped' has 0: declare it .partial_sum(\"clamped\")" in \
        unplaced["failures"][0]["message"]
    assert control["passed"], gradcheck.format_sharding_failure(control)


@needs_mutants
def test_an_op_without_a_rule_is_refused_naming_op_sharding():
    script = textwrap.dedent(f"""
        import os, torch, customop
        import torch.distributed as dist
        from torch.distributed.tensor import distribute_tensor, Replicate
        from torch.distributed.device_mesh import init_device_mesh
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
        dist.init_process_group("gloo", rank=0, world_size=1,
                                store=dist.HashStore())
        customop.load_library({MUTANTS!r})
        mesh = init_device_mesh("cpu", (1,))
        x = distribute_tensor(torch.randn(2, 3), mesh, [Replicate()])
        try:
            torch.ops.sharding_mutants.no_rule(x)
        except Exception as e:
            print("ERROR:", e)
        print("ROW_NORM_OK:", torch.ops.sharding_mutants.row_norm_ok(x).full_tensor().shape)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert "ROW_NORM_OK: torch.Size([2, 3])" in out.stdout, out.stdout + out.stderr
    assert "sharding_mutants::no_rule: no sharding rule is declared" in out.stdout
    assert "op.sharding(customop::Sharding::...)" in out.stdout


def test_rules_are_registered_once_dtensor_is_imported():
    """import customop does not import torch.distributed.tensor (half a torch import); the
    rules are registered when it is imported."""
    script = ("import sys, customop; print('before', 'torch.distributed.tensor' in sys.modules);"
              "import torch.distributed.tensor as t, torch; "
              "p = t.DTensor._op_dispatcher.sharding_propagator; "
              "print('after', torch.ops.customop.rms_norm.default in p.op_strategy_funcs)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert "before False" in out.stdout and "after True" in out.stdout, out.stdout + out.stderr


@needs_mutants
def test_check_with_sharding_fails_the_report_of_a_wrong_rule():
    """customop.gradcheck.check(..., sharding=True): the gradcheck passes (the backward is
    right), the rule does not, and the report says which placement broke it."""
    customop.load_library(MUTANTS)
    x = _randn(4, 6).requires_grad_()
    (report,) = gradcheck.check(torch.ops.sharding_mutants.row_norm, [(x,)], sharding=True)
    assert not report["passed"]
    assert [f["check"] for f in report["failures"]] == ["sharding"]
    assert "[x: S1] output '0' differs" in gradcheck.format_failure(report)
    assert report["sharding"]["combinations"] == 3


CLI = os.environ.get("CUSTOMOP_GRADCHECK_CLI", "")


@pytest.mark.skipif(not os.path.exists(CLI), reason="CUSTOMOP_GRADCHECK_CLI is not set")
def test_cli_sharding_checks_registered_samples(tmp_path):
    env = dict(os.environ, CUSTOMOP_PYTHON=sys.executable)
    out = subprocess.run([CLI, "--op", "customop::rms_norm", "--dtype", "float64", "--sharding",
                          "--json", str(tmp_path / "r.json"), "-q"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sharding: 1 of 1 ops passed" in out.stdout, out.stdout
    assert (tmp_path / "r.json.sharding.json").exists()
    bad = subprocess.run([CLI, "--op", "customop::nothing*", "--sharding"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    # A Python that cannot run the check is bad usage (exit 2), said in a line of ours.
    broken = subprocess.run([CLI, "--op", "customop::rms_norm", "--dtype", "float64",
                             "--sharding", "-q"], capture_output=True, text=True, timeout=600,
                            env=dict(env, CUSTOMOP_PYTHON="/bin/false"))
    assert broken.returncode == 2, broken.stdout + broken.stderr
    assert "the sharding check could not run" in broken.stderr


def test_malformed_checks_are_refused_before_any_worker_starts():
    x = _randn(4, 6)
    with pytest.raises(TypeError, match=r"sample 0 must be \(label, \[one value per"):
        gradcheck.check_sharding("customop::rms_norm", [(x, _randn(6), 1e-6)])
    with pytest.raises(ValueError, match="world_size must be at least 2"):
        gradcheck.check_sharding("customop::rms_norm", [("s", [x, _randn(6), 1e-6])],
                                 world_size=1)
    with pytest.raises(ValueError, match='ops are named "ns::name"'):
        gradcheck.check_sharding("nope", [("s", [x])])
    # The op on whole tensors failing is a check that could not run, not a wrong rule.
    (report,) = gradcheck.check(torch.ops.customop.rms_norm, [(x.clone().requires_grad_(), _randn(5), 1e-6)],
                                sharding=True)
    sharding_failures = [f for f in report["failures"] if f["check"] == "sharding"]
    assert sharding_failures[0]["headline"].endswith("could not run: the op failed on whole "
                                                     "tensors")
