"""The downstream op library as a wheel (ci/matrix wheel leg, from a fresh venv): import loads it
through customop, the op runs with named arguments, and customop.gradcheck checks its backward."""

import pathlib

import torch

import customop
import downstream_ops


def test_imported_from_the_wheel_and_the_op_is_registered():
    assert "site-packages" in pathlib.Path(downstream_ops.__file__).parts
    assert customop.recorded_torch_version(downstream_ops.LIBRARY) == torch.__version__.split("+")[0]
    y = torch.ops.downstream.smooth_abs(torch.tensor([-3.0, 4.0], dtype=torch.float64), eps=1e-4)
    torch.testing.assert_close(y, torch.tensor([3.0, 4.0], dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_gradcheck_of_its_backward():
    x = torch.randn(3, 4, dtype=torch.float64).requires_grad_()
    customop.gradcheck.assert_gradcheck(torch.ops.downstream.smooth_abs, [(x, 0.5)])
