"""Trains a small classifier built from the customop ops on the UCI handwritten digits, as a
TorchScript module, and exports what the C++ programs need.

    python train.py --ops-library build/release/plugin/ops/libcustomop_ops.so --out DIR

Writes to DIR: digits_model.pt (the trained scripted model), digits_model.pt2 (the same
weights through torch.export with a dynamic batch dim and AOTInductor, for aoti_eval),
digits_model_autocast.pt2 (the model trained again under torch.autocast("cpu", bfloat16),
exported with its autocast region), losses_autocast.csv,
digits_data.pt (the train/test split, the model's held-out probabilities (TorchScript and
AOTI) and one batch's gradients, for load_and_eval, aoti_eval and frontend_train),
losses_torchscript.csv, train_torchscript.json and loss_curve.png.

    python train.py --ops-library ... --out DIR --device cuda

trains and evaluates both models on that device instead (autocast: torch.autocast("cuda",
bfloat16)) and writes the loss curves (losses_*.csv), digits_model.pt and
train_torchscript.json only: the AOTI packages and digits_data.pt are the CPU C++ programs'
inputs, and the plot needs matplotlib, which a GPU machine may lack.
"""

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_OPS_LIB = ROOT / "build" / "release" / "plugin" / "ops" / "libcustomop_ops.so"

# The recipe frontend_train.cpp repeats; change both together.
SEED = 0
TEST_FRACTION = 0.2
EPOCHS = 40
BATCH = 64
LR = 3e-3
GRAD_BATCH = 64  # the first GRAD_BATCH training images: the batch whose grads C++ compares


class DigitsNet(torch.nn.Module):
    """8x8 digit -> 10 class probabilities, through four of the customop ops.

    x [N, 64] -> Linear(64, 128, no bias) -> bias_gelu(tanh) -> rms_norm -> Linear(128, 64*2)
      -> maxout over pairs (max_along) -> Linear(64, 10) -> masked_softmax (optional class mask)
    Maxout: Goodfellow et al. 2013, "Maxout Networks". RMSNorm: Zhang & Sennrich 2019.
    """

    def __init__(self, hidden: int = 128, features: int = 64, pieces: int = 2, classes: int = 10):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, hidden, bias=False)  # its bias is bias_gelu's
        self.bias1 = torch.nn.Parameter(torch.zeros(hidden))
        self.norm1 = torch.nn.Parameter(torch.ones(hidden))
        self.fc2 = torch.nn.Linear(hidden, features * pieces)
        self.fc3 = torch.nn.Linear(features, classes)
        self.features = features
        self.pieces = pieces

    def forward(self, x: torch.Tensor, class_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = torch.ops.customop.bias_gelu(self.fc1(x), self.bias1, "tanh")
        h = torch.ops.customop.rms_norm(h, self.norm1, 1e-6)
        h = self.fc2(h).view(x.size(0), self.features, self.pieces)
        h, _ = torch.ops.customop.max_along(h, 2, False)
        return torch.ops.customop.masked_softmax(self.fc3(h), class_mask, 1)

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of labels y [N] (int64)."""
        return F.nll_loss(torch.log(self.forward(x, None).clamp_min(1e-12)), y)


class TensorContainer(torch.nn.Module):
    """Named tensors, saved with torch.jit.save so C++ reads them with torch::jit::load."""

    def __init__(self, tensors: Dict[str, torch.Tensor]):
        super().__init__()
        self.tensors = tensors

    def forward(self) -> int:
        return len(self.tensors)


def load_split():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SEED, stratify=y)
    return tuple(torch.from_numpy(a) for a in (x_tr, y_tr, x_te, y_te))


def train(model, x_tr, y_tr, x_te, y_te, autocast: bool = False):
    """The recipe; `autocast`: forward and loss under torch.autocast(<the data's device>,
    torch.bfloat16) (the linear layers run in bfloat16, each customop op by its declared
    policy), backward and the Adam step outside it, parameters kept in float32."""
    device_type = x_tr.device.type
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(SEED)
    history = []
    for epoch in range(1, EPOCHS + 1):
        model.train()
        perm = torch.randperm(len(x_tr), generator=gen)
        total, n = 0.0, 0
        for i in range(0, len(x_tr), BATCH):
            idx = perm[i:i + BATCH]
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
                loss = model.loss(x_tr[idx], y_tr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            n += len(idx)
        model.eval()
        with torch.no_grad(), torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
            acc = (model(x_te).argmax(1) == y_te).double().mean().item()
        history.append((epoch, total / n, acc))
    return history


class Inference(torch.nn.Module):
    """DigitsNet's forward without the class mask: what torch.export exports."""

    def __init__(self, net: DigitsNet):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x, None)


class AutocastInference(torch.nn.Module):
    """DigitsNet's forward under torch.autocast("cpu", torch.bfloat16), probabilities in
    float32: the mixed-precision model as torch.export captures it (wrap_with_autocast)."""

    def __init__(self, net: DigitsNet):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.net(x, None).float()


def export_aoti(scripted, x_example: torch.Tensor, path: pathlib.Path,
                autocast: bool = False) -> torch.Tensor:
    """torch.export (batch dim dynamic) + AOTInductor package of the trained weights; returns
    the package's held-out probabilities as Python computes them (the C++ loader compares)."""
    net = DigitsNet()
    net.load_state_dict(scripted.state_dict())
    net.eval()
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    wrapper = AutocastInference(net) if autocast else Inference(net)
    with torch.no_grad():
        program = torch.export.export(wrapper, (x_example[:8],),
                                      dynamic_shapes={"x": {0: batch}})
        package = torch._inductor.aoti_compile_and_package(program, package_path=str(path))
        return torch._inductor.aoti_load_package(package)(x_example)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops-library", default=os.environ.get("CUSTOMOP_OPS_LIB", str(DEFAULT_OPS_LIB)),
                   help="libcustomop_ops.so (default: $CUSTOMOP_OPS_LIB or %(default)s)")
    p.add_argument("--out", default=str(HERE / "artifacts"), help="output folder (default: %(default)s)")
    p.add_argument("--device", default="cpu",
                   help="where the models train: cpu (default: everything above) or cuda "
                        "(training and evaluation only, see the top of this file)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if not os.path.exists(args.ops_library):
        sys.exit(f"train.py: op library {args.ops_library} not found; build it with "
                 "`cmake --build --preset release --target customop_ops` or pass --ops-library")
    torch.ops.load_library(args.ops_library)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    x_tr, y_tr, x_te, y_te = (t.to(device) for t in load_split())
    model = torch.jit.script(DigitsNet().to(device))  # the CPU initialisation on any device
    t0 = time.perf_counter()
    history = train(model, x_tr, y_tr, x_te, y_te)
    train_s = time.perf_counter() - t0

    model.eval()
    with torch.no_grad():
        probs = model(x_te)
    acc = (probs.argmax(1) == y_te).double().mean().item()
    model_path = out / "digits_model.pt"
    model.save(str(model_path))
    reloaded = torch.jit.load(str(model_path))
    with torch.no_grad():
        reload_diff = (reloaded(x_te) - probs).abs().max().item()
    on_cpu = device.type == "cpu"  # the exports and the C++ programs' data: CPU only
    if on_cpu:
        t0 = time.perf_counter()
        aoti_path = out / "digits_model.pt2"
        aoti_probs = export_aoti(model, x_te, aoti_path)
        aoti_s = time.perf_counter() - t0
        aoti_acc = (aoti_probs.argmax(1) == y_te).double().mean().item()
        aoti_diff = (aoti_probs - probs).abs().max().item()

    # Mixed precision: the same recipe under torch.autocast(device, torch.bfloat16), an eager
    # module (TorchScript does not script autocast regions), and (CPU) its AOTI package.
    torch.manual_seed(SEED)
    mixed = DigitsNet().to(device)
    t0 = time.perf_counter()
    mixed_history = train(mixed, x_tr, y_tr, x_te, y_te, autocast=True)
    mixed_s = time.perf_counter() - t0
    mixed_acc = mixed_history[-1][2]
    if on_cpu:
        mixed_aoti_path = out / "digits_model_autocast.pt2"
        mixed_aoti_probs = export_aoti(mixed, x_te, mixed_aoti_path, autocast=True)
        mixed_aoti_acc = (mixed_aoti_probs.argmax(1) == y_te).double().mean().item()

        # One batch's gradients, for the C++ loader to compare against.
        model.train()
        model.zero_grad()
        model.loss(x_tr[:GRAD_BATCH], y_tr[:GRAD_BATCH]).backward()
        tensors = {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te,
                   "py_probs_test": probs, "py_aoti_probs_test": aoti_probs,
                   "py_aoti_autocast_probs_test": mixed_aoti_probs, "x_grad": x_tr[:GRAD_BATCH].clone(),
                   "y_grad": y_tr[:GRAD_BATCH].clone()}
        for name, param in model.named_parameters():
            tensors["grad." + name] = param.grad.detach().clone()
        torch.jit.script(TensorContainer(tensors)).save(str(out / "digits_data.pt"))

    with open(out / "losses_torchscript.csv", "w") as f:
        f.write("epoch,train_loss,test_accuracy\n")
        f.writelines(f"{e},{l:.6f},{a:.6f}\n" for e, l, a in history)
    with open(out / "losses_autocast.csv", "w") as f:
        f.write("epoch,train_loss,test_accuracy\n")
        f.writelines(f"{e},{l:.6f},{a:.6f}\n" for e, l, a in mixed_history)
    summary = {"test_accuracy": acc, "n_train": len(x_tr), "n_test": len(x_te), "epochs": EPOCHS,
               "train_seconds": train_s, "final_train_loss": history[-1][1],
               "max_abs_diff_reload": reload_diff}
    if on_cpu:
        summary.update({"aoti_test_accuracy": aoti_acc,
                        "aoti_max_abs_diff_vs_torchscript": aoti_diff,
                        "aoti_export_compile_seconds": aoti_s})
    summary.update({"autocast_test_accuracy": mixed_acc, "autocast_train_seconds": mixed_s,
                    "autocast_final_train_loss": mixed_history[-1][1]})
    if on_cpu:
        summary["autocast_aoti_test_accuracy"] = mixed_aoti_acc
    else:
        summary["device"] = str(device)
    (out / "train_torchscript.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"TorchScript model: held-out accuracy {acc:.4f} ({len(x_te)} images), "
          f"{EPOCHS} epochs in {train_s:.1f} s, final train loss {history[-1][1]:.4f}")
    if not on_cpu:
        print(f"Mixed precision (torch.autocast {device.type} bfloat16, eager): held-out accuracy "
              f"{mixed_acc:.4f} (float32 TorchScript above: {acc:.4f}), {EPOCHS} epochs in "
              f"{mixed_s:.1f} s; trained on {device}")
        print(f"saved {model_path}, {out / 'train_torchscript.json'}")
        return 0
    sys.path.insert(0, str(HERE))
    from plot_losses import plot
    png = plot(out)
    print(f"AOTInductor package (torch.export, dynamic batch): held-out accuracy {aoti_acc:.4f}, "
          f"max |AOTI - TorchScript| {aoti_diff:.2e}, export + compile {aoti_s:.1f} s")
    print(f"Mixed precision (torch.autocast cpu bfloat16, eager): held-out accuracy {mixed_acc:.4f} "
          f"(float32 TorchScript above: {acc:.4f}), {EPOCHS} epochs in {mixed_s:.1f} s; its AOTI "
          f"package: accuracy {mixed_aoti_acc:.4f}")
    print(f"saved {model_path}, {aoti_path}, {mixed_aoti_path}, {out / 'digits_data.pt'}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
