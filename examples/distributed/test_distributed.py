"""examples/distributed/train.py under torchrun (2 CPU processes, gloo on the loopback device,
--standalone: a free local port): each mode ends with the parameters of a one-process run
(train.py's own check, exit 0), read back from its JSON; with --plant-bug (rank 1 on another
lr) the same check fails and train.py exits 1. tp skips while `import customop` registers no
DTensor sharding rules for the ops.

customop must be importable by the workers: under ctest (python.distributed) from the package
in the build tree (PYTHONPATH=CUSTOMOP_PYTHON_DEV_DIR) where the build makes one, otherwise
assembled here in a temporary folder from the source tree (CUSTOMOP_PACKAGE_SOURCE,
python/customop) and the built libraries (CUSTOMOP_OPS_LIB, CUSTOMOP_CORE_LIB), as
`pip install .` lays it out; run by hand, the customop this python imports (an installed
wheel, or PYTHONPATH), or the same assembly when CUSTOMOP_OPS_LIB is set.
"""

import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
TRAIN = HERE / "train.py"
STEPS = 5
TIMEOUT_S = 240  # one torchrun: ~25 s on a loaded 2-core machine, mostly importing torch
NO_RULES = "does not have a sharding strategy registered"
MODES = ("ddp", "fsdp2", "fsdp2-bf16", "tp")
# tp: where each op's output lies (train.py checks the same).
TP_PLACEMENTS = {
    "rms_norm": "(Shard(dim=1),)",
    "masked_softmax": "(Shard(dim=1),)",
    "bias_gelu (mix)": "(Shard(dim=1),)",
    "bias_gelu (mlp)": "(Shard(dim=2),)",
}


def _staged_package(root: pathlib.Path) -> pathlib.Path:
    """A `customop` package under root, laid out as the wheel's: the Python sources, lib/ with
    links to the built op library and the core library (CUSTOMOP_CORE_LIB, optional: a
    build-tree RUNPATH finds it anyway, a wheel's $ORIGIN needs it beside), and _build_info.py
    naming the torch the op library recorded (so the import's torch check is the wheel's)."""
    source = pathlib.Path(os.environ["CUSTOMOP_PACKAGE_SOURCE"])
    ops_lib = pathlib.Path(os.environ["CUSTOMOP_OPS_LIB"])
    libs = [ops_lib] + [pathlib.Path(p) for p in [os.environ.get("CUSTOMOP_CORE_LIB")] if p]
    for path in [source / "__init__.py", *libs]:
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (CUSTOMOP_PACKAGE_SOURCE, "
                                    f"CUSTOMOP_OPS_LIB, CUSTOMOP_CORE_LIB)")
    pkg = root / "customop"
    shutil.copytree(source, pkg, ignore=shutil.ignore_patterns("__pycache__", "lib", "_build_info.py"))
    (pkg / "lib").mkdir()
    for lib in libs:
        (pkg / "lib" / lib.name).symlink_to(lib)
    # _torch_check imports only torch and struct: load it alone to read the library's stamp.
    spec = importlib.util.spec_from_file_location("_customop_torch_check", source / "_torch_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    import torch
    built = check.recorded_torch_version(ops_lib) or torch.__version__
    (pkg / "_build_info.py").write_text(
        f'VERSION = "0.0.dev"\nTORCH_VERSION = "{built}"\n'
        f'TORCH_CUDA = "{torch.version.cuda or ""}"\nWITH_CUDA_KERNELS = False\n')
    return root


@pytest.fixture(scope="session")
def worker_env(tmp_path_factory):
    env = dict(os.environ)
    if "CUSTOMOP_OPS_LIB" in env:
        site = _staged_package(tmp_path_factory.mktemp("site"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    elif importlib.util.find_spec("customop") is None:
        pytest.skip("customop is not importable and CUSTOMOP_OPS_LIB is not set "
                    "(ctest sets it; or pip install the package, or set PYTHONPATH)")
    env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on the loopback device only
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for 2 processes, said aloud
    return env


def torchrun(mode: str, out: pathlib.Path, env: dict, *extra: str):
    """Runs train.py in `mode` on 2 processes; returns (exit code, output, figures or None,
    seconds). On timeout kills the whole process group (torchrun and its workers)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(TRAIN), "--mode", mode, "--steps", str(STEPS), "--json", str(out), *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} ran past {TIMEOUT_S} s:\n{output[-6000:]}")
    seconds = time.perf_counter() - t0
    figures = json.loads(out.read_text()) if out.exists() else None
    print(f"{mode}{' ' + ' '.join(extra) if extra else ''}: exit {proc.returncode}, "
          f"{seconds:.1f} s wall, max|diff| {figures and figures['max_abs_diff']}")
    return proc.returncode, output, figures, seconds


def skip_without_rules(mode: str, rc: int, output: str):
    if mode == "tp" and rc != 0 and NO_RULES in output:
        line = next(l for l in output.splitlines() if NO_RULES in l)
        pytest.skip(f"tp: the customop ops have no DTensor sharding rules yet: {line.strip()}")


@pytest.mark.parametrize("mode", MODES)
def test_two_processes_end_with_the_parameters_of_one(mode, worker_env, tmp_path):
    rc, output, figures, _ = torchrun(mode, tmp_path / "figures.json", worker_env)
    skip_without_rules(mode, rc, output)
    assert rc == 0, output[-6000:]
    assert figures["passed"] and figures["steps"] == STEPS and figures["world_size"] == 2
    for name, row in figures["parameters"].items():
        assert row["max_abs_diff"] <= row["bound"], (name, row)
        # Training moved every parameter far beyond the tolerance, so the match means something.
        assert row["max_abs_update"] > 100 * row["bound"], (name, row)
    assert len(figures["parameters"]) == 15
    assert figures["losses"] == pytest.approx(figures["reference_losses"], rel=1e-6)
    if mode == "tp":
        assert figures["op_placements"] == TP_PLACEMENTS
    if mode == "fsdp2-bf16":
        # The ops did run in bfloat16: the float64 run is further away than the tolerance.
        assert figures["context"]["float64"]["max_abs_diff"] > 10 * figures["max_abs_diff"] + 1e-5


@pytest.mark.parametrize("mode", ("ddp", "fsdp2-bf16", "tp"))
def test_a_rank_on_another_lr_fails_the_comparison(mode, worker_env, tmp_path):
    rc, output, figures, _ = torchrun(mode, tmp_path / "figures.json", worker_env, "--plant-bug")
    skip_without_rules(mode, rc, output)
    assert rc != 0, output[-6000:]
    assert "MISMATCH" in output and "FAIL" in output, output[-6000:]
    assert figures is not None and not figures["passed"] and figures["plant_bug"]
    worst = max(r["max_abs_diff"] / r["bound"] for r in figures["parameters"].values())
    assert worst > 5, worst
