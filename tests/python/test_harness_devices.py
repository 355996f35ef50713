"""The gradcheck harness is device-correct: every tensor it makes for a check (random draws,
perturbations, cotangents, masks, copies) is made on the inputs' device, or on the CPU and
moved there. Proved on a machine without a GPU by a simulated device.

The first GPU run failed every bfloat16/float16 CUDA case: the low-precision path drew
at::bernoulli on CUDA tensors with a CPU generator. No CPU test could see it, because every
tensor was on the CPU. Here the inputs are `SimTensor`s: they report another device (meta, the
only non-CPU device a CPU-only torch can run autograd on) and hold their values in a CPU
tensor. `DeviceAudit`, a TorchDispatchMode, sees every ATen and custom op the harness runs and
applies CUDA's rules to it:
  - a tensor of the simulated device may meet another tensor only if that one is of the
    simulated device too, or a 0-dim CPU tensor (a scalar), except in copies (copy_,
    _to_copy), which is how a tensor made on the CPU is moved;
  - a random op on the simulated device may not take a CPU generator;
  - nothing reads a simulated tensor's memory from the host: its data pointer is null, so a
    host read faults (as a host read of device memory does); values are read through a copy
    to the CPU or item().
Each breach is recorded, and raised as CUDA would raise it. The tests run the harness's
float64 checks (Jacobians, layout variants, input subsets) and its low-precision path
(bfloat16) on every built-in op's first registered sample, and the sharding check's sample
preparation, and require zero breaches and passing reports; a negative control shows the
audit catches the old bug.

Run by ctest (python.harness_devices) with PYTHONPATH at the build tree's customop package.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import customop  # noqa: F401  (loads the ops and the harness)
from customop.gradcheck import check, format_failure
from customop._sharding_check import registered_samples

SIM = torch.device("meta")
aten = torch.ops.aten
# Copies move a tensor between devices; they are the one place two devices may meet.
COPIES = {aten._to_copy.default, aten.copy_.default, aten.to.dtype_layout, aten.to.device,
          aten.to.dtype, aten._copy_from.default, aten._copy_from_and_resize.default}
OPS = ["rms_norm", "bias_gelu", "clamp_count", "masked_softmax", "max_along", "weighted_sum"]


class SimTensor(torch.Tensor):
    """A tensor of the simulated device: metadata of its own, values in `cpu` (a CPU tensor
    with the same sizes and strides)."""

    @staticmethod
    def __new__(cls, cpu: torch.Tensor):
        assert not isinstance(cpu, SimTensor) and cpu.device.type == "cpu"
        r = torch.Tensor._make_wrapper_subclass(
            cls, cpu.size(), strides=cpu.stride(), storage_offset=cpu.storage_offset(),
            dtype=cpu.dtype, device=SIM, requires_grad=False)
        r.cpu_values = cpu
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func}: a simulated-device tensor used outside DeviceAudit")


class DeviceAudit(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.breaches: list[str] = []
        self.ops = 0
        self.made_on_device = 0  # factory calls and copies that produced simulated tensors

    def breach(self, message: str):
        self.breaches.append(message)
        raise RuntimeError(f"device audit: {message}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        self.ops += 1
        flat, _ = tree_flatten((args, kwargs))
        sims = [t for t in flat if isinstance(t, SimTensor)]
        device = kwargs.get("device")
        to_sim = device is not None and torch.device(device).type == SIM.type
        to_cpu = device is not None and torch.device(device).type == "cpu"
        if sims and func not in COPIES:
            for t in flat:
                if (isinstance(t, torch.Tensor) and not isinstance(t, SimTensor)
                        and (t.dim() != 0 or t.device.type != "cpu")):
                    self.breach(f"{func}: a {t.device} tensor of shape {list(t.shape)} met a "
                                f"tensor of the inputs' device")
                if isinstance(t, torch.Generator) and t.device.type != SIM.type:
                    self.breach(f"{func}: a {t.device} generator drew on the inputs' device")
        if to_sim:
            kwargs["device"] = torch.device("cpu")
        unwrap = lambda t: t.cpu_values if isinstance(t, SimTensor) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        if not (sims or to_sim) or (func in COPIES and to_cpu):
            return out
        if to_sim:
            self.made_on_device += 1
        inputs = {id(t.cpu_values): t for t in sims}

        def wrap(t):
            if not isinstance(t, torch.Tensor):
                return t
            if id(t) in inputs:  # an in-place op or out= returns its argument
                return inputs[id(t)]
            return SimTensor(t)
        return tree_map(wrap, out)


def simulated(value):
    """A sample's tensors as simulated-device tensors (requires_grad kept)."""
    if isinstance(value, torch.Tensor):
        return SimTensor(value.detach()).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(simulated(v) for v in value)
    return value


def _requiring_grad(value):
    if isinstance(value, torch.Tensor):
        return value.detach().requires_grad_(value.is_floating_point())
    if isinstance(value, (list, tuple)):
        return type(value)(_requiring_grad(v) for v in value)
    return value


def first_sample(op: str, dtype=torch.float64):
    """The op's first registered sample, its floating tensors requiring grad."""
    label, args = registered_samples(f"customop::{op}", dtype)[0]
    return label, [_requiring_grad(a) for a in args]


def test_simulated_device_is_what_the_harness_sees():
    with DeviceAudit() as audit:
        x = simulated(torch.randn(3, 4, dtype=torch.float64))
        assert x.device == SIM and isinstance(x, SimTensor)
        y = (x * 2).sum()
        assert isinstance(y, SimTensor) and y.device == SIM
        assert torch.allclose(x.cpu() * 2, (x * 2).cpu())
        z = torch.zeros(2, device=SIM)  # made on the device
        assert isinstance(z, SimTensor)
        moved = torch.rand(3, 4, dtype=torch.float64).to(SIM)  # made on the CPU, moved
        assert isinstance(x + moved, SimTensor)
    assert audit.breaches == [] and audit.made_on_device >= 2


def test_audit_catches_a_cpu_generator_and_a_cpu_tensor_on_the_device():
    """The negative control: the first GPU run's bug (bernoulli of device tensors with a CPU
    generator), and a CPU tensor mixed into a device op, are both breaches."""
    gen = torch.Generator().manual_seed(0)
    with DeviceAudit() as audit:
        x = simulated(torch.randn(3, 4, dtype=torch.float64))
        with pytest.raises(RuntimeError, match="generator drew on the inputs' device"):
            torch.bernoulli(torch.full_like(x, 0.5), generator=gen)
        with pytest.raises(RuntimeError, match="met a tensor of the inputs' device"):
            x * torch.rand(3, 4, dtype=torch.float64)
        assert x.data_ptr() == 0  # no host memory behind it: a host read faults, as on a GPU
        x * torch.tensor(2.0, dtype=torch.float64)  # a 0-dim CPU tensor is a scalar: allowed
    assert len(audit.breaches) == 2


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_harness_makes_every_tensor_on_the_inputs_device(op, dtype):
    """float64: the Jacobian checks, layout variants and input subsets; bfloat16: the
    low-precision path (its precise float64 run, the ±u perturbations and their signs)."""
    label, args = first_sample(op)
    with DeviceAudit() as audit:
        sim_args = simulated(args)
        # NB: the fake and out= checks make tensors of their own (meta copies, out buffers
        # resized in place), which the simulated device does not model; torch.compile does
        # not take the simulated tensors either.
        reports = check(f"customop::{op}", [sim_args], dtype=dtype, label=label,
                        check_fake_kernel=False, check_out_variant=False,
                        check_compiled=False)
    assert audit.breaches == [], f"{op} {dtype}: the harness made tensors off the device:\n" + \
        "\n".join(audit.breaches[:10])
    report = reports[0]
    assert report["passed"], format_failure(report)
    assert audit.ops > 100  # the harness really ran on the simulated tensors
    if dtype == torch.bfloat16:
        assert report.get("low_precision"), "no low-precision comparison ran"


def test_sharding_check_takes_samples_from_another_device(tmp_path):
    """The sharding check runs on CPU processes over gloo: what it hands its workers is made
    from CPU copies (float64), and can be saved for them (a device tensor could not be), for
    samples of every built-in op."""
    from customop._sharding_check import job_cases

    cases = []
    with DeviceAudit() as audit:
        for op in OPS:
            label, args = first_sample(op)
            cases.append((f"customop::{op}", label, simulated(args)))
        prepared = job_cases(cases)
    assert audit.breaches == []
    tensors = [t for _, _, args in prepared for t in tree_flatten(args)[0]
               if isinstance(t, torch.Tensor)]
    assert tensors and all(type(t) is torch.Tensor and t.device.type == "cpu" for t in tensors)
    assert all(t.dtype == torch.float64 for t in tensors if t.is_floating_point())
    torch.save(prepared, tmp_path / "job.pt")  # what run_cases writes for its workers
    for (_, _, before), (_, _, after) in zip(cases, prepared):
        for b, a in zip(tree_flatten(before)[0], tree_flatten(after)[0]):
            if isinstance(b, SimTensor):
                assert torch.equal(b.cpu_values.to(a.dtype), a)
