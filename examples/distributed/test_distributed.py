"""examples/distributed/train.py under torchrun (2 CPU processes, gloo on the loopback device,
--standalone: a free local port), launched twice, since starting 3 Pythons that import torch
is what a launch costs (~20 s on a loaded 2-core machine; the training under 1 s a mode):
every mode in one launch, each ending with the parameters of a one-process run (train.py's
own check, exit 0), read back from its JSON section; and every mode again with --plant-bug
(rank 1 on another lr), where each mode's check must fail and train.py exit 1.

customop must be importable by the workers: under ctest (python.distributed) from the package
in the build tree (PYTHONPATH=CUSTOMOP_PYTHON_DEV_DIR, cmake/python_dev_package.cmake); run by
hand, the customop this python imports (an installed wheel, or PYTHONPATH). tp needs the ops'
DTensor sharding rules, which `import customop` registers.
"""

import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
TRAIN = HERE / "train.py"
STEPS = 5
TIMEOUT_S = 240  # one torchrun of every mode: ~25 s on a loaded 2-core machine
MODES = ("ddp", "fsdp2", "fsdp2-bf16", "tp")
# tp: where each op's output lies (train.py checks the same).
TP_PLACEMENTS = {
    "rms_norm": "(Shard(dim=1),)",
    "masked_softmax": "(Shard(dim=1),)",
    "bias_gelu (mix)": "(Shard(dim=1),)",
    "bias_gelu (mlp)": "(Shard(dim=2),)",
}


@pytest.fixture(scope="module")
def worker_env():
    # A failure, not a skip: a misconfigured run must not pass.
    assert importlib.util.find_spec("customop") is not None, (
        "customop is not importable (ctest puts CUSTOMOP_PYTHON_DEV_DIR on PYTHONPATH; or pip "
        "install the package, or set PYTHONPATH)")
    env = dict(os.environ)
    env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on the loopback device only
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for 2 processes, said aloud
    return env


def torchrun(modes, out: pathlib.Path, env: dict, *extra: str):
    """Runs train.py on 2 processes over `modes` in one launch; returns (exit code, output,
    figures or None). On timeout kills the whole process group (torchrun and its workers)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(TRAIN), "--mode", ",".join(modes), "--steps", str(STEPS), "--json", str(out), *extra]
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
    diffs = figures and {m: s["max_abs_diff"] for m, s in figures["modes"].items()}
    print(f"{','.join(modes)}{' ' + ' '.join(extra) if extra else ''}: exit {proc.returncode}, "
          f"{seconds:.1f} s wall, max|diff| {diffs}")
    return proc.returncode, output, figures


@pytest.fixture(scope="module")
def every_mode(worker_env, tmp_path_factory):
    """One launch of every mode: (exit code, output, figures)."""
    return torchrun(MODES, tmp_path_factory.mktemp("modes") / "figures.json", worker_env)


@pytest.fixture(scope="module")
def every_mode_with_bug(worker_env, tmp_path_factory):
    """One launch of every mode with --plant-bug: (exit code, output, figures)."""
    return torchrun(MODES, tmp_path_factory.mktemp("bug") / "figures.json", worker_env,
                    "--plant-bug")


def test_one_launch_runs_every_mode(every_mode):
    rc, output, figures = every_mode
    assert rc == 0, output[-6000:]
    assert figures["passed"] and figures["failed"] == [], output[-6000:]
    assert list(figures["modes"]) == list(MODES)
    assert figures["steps"] == STEPS and figures["world_size"] == 2 and not figures["plant_bug"]


@pytest.mark.parametrize("mode", MODES)
def test_two_processes_end_with_the_parameters_of_one(mode, every_mode):
    rc, output, figures = every_mode
    assert figures is not None and mode in figures["modes"], output[-6000:]
    section = figures["modes"][mode]
    assert section["passed"], (mode, output[-6000:])
    for name, row in section["parameters"].items():
        assert row["max_abs_diff"] <= row["bound"], (name, row)
        # Training moved every parameter far beyond the tolerance, so the match means something.
        assert row["max_abs_update"] > 100 * row["bound"], (name, row)
    assert len(section["parameters"]) == 15
    assert section["losses"] == pytest.approx(section["reference_losses"], rel=1e-6)
    if mode == "tp":
        assert section["op_placements"] == TP_PLACEMENTS
    else:
        assert section["op_placements"] == {}  # no DTensor outputs: nothing left over from tp
    if mode == "fsdp2-bf16":
        # The ops did run in bfloat16: the float64 run is further away than the tolerance.
        assert section["context"]["float64"]["max_abs_diff"] > 10 * section["max_abs_diff"] + 1e-5


def test_a_rank_on_another_lr_fails_every_mode(every_mode_with_bug):
    rc, output, figures = every_mode_with_bug
    assert rc != 0, output[-6000:]
    assert figures is not None and figures["plant_bug"] and not figures["passed"], output[-6000:]
    assert figures["failed"] == list(MODES), output[-6000:]
    assert f"mismatched: {', '.join(MODES)}" in output, output[-6000:]
    for mode in MODES:
        section = figures["modes"][mode]
        assert not section["passed"], mode
        worst = max(r["max_abs_diff"] / r["bound"] for r in section["parameters"].values())
        assert worst > 5, (mode, worst)
