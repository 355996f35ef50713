"""The sharding rules from the installed package: registered with DTensor once
torch.distributed.tensor is imported, and the sharding check's worker processes start from the
installed layout (python -m customop._sharding_check)."""

import subprocess
import sys

import torch

import customop
from customop import gradcheck


def test_rules_register_when_dtensor_is_imported():
    script = ("import sys, torch, customop\n"
              "assert 'torch.distributed.tensor' not in sys.modules\n"
              "from torch.distributed.tensor import DTensor\n"
              "table = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs\n"
              "print(sorted(str(op) for op in table if str(op).startswith('customop.')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "customop.rms_norm.default" in out.stdout and "customop.max_along.default" in out.stdout


def test_sharding_check_of_a_built_in_op():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, generator=g, dtype=torch.float64)
    (report,) = gradcheck.check_sharding("customop::rms_norm", [("[4, 6]", [x, w, 1e-6])])
    assert report["passed"], gradcheck.format_sharding_failure(report)
    assert report["rule"] == "reduction" and report["combinations"] == 6
    assert customop.__version__
