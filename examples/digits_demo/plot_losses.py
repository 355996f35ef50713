"""Plots every losses_<trainer>.csv in a folder (epoch, train_loss, test_accuracy) into
loss_curve.png there.   python plot_losses.py DIR"""

import csv
import pathlib
import sys

LABELS = {"torchscript": "TorchScript (trained from Python)", "frontend": "C++ frontend"}
# NB: with one seed both trainers start from the same weights and see the same batches, so
# their curves nearly coincide; the C++ one is dashed to stay visible.
STYLES = {"torchscript": {"lw": 2.5, "alpha": 0.6}, "frontend": {"ls": "--", "color": "black", "lw": 1}}


def plot(folder) -> pathlib.Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = pathlib.Path(folder)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for path in sorted(folder.glob("losses_*.csv")):
        trainer = path.stem.removeprefix("losses_")
        with open(path) as f:
            rows = [(int(r["epoch"]), float(r["train_loss"]), float(r["test_accuracy"]))
                    for r in csv.DictReader(f)]
        label = LABELS.get(trainer, trainer)
        style = STYLES.get(trainer, {})
        ax_loss.plot([r[0] for r in rows], [r[1] for r in rows], label=label, **style)
        ax_acc.plot([r[0] for r in rows], [r[2] for r in rows], label=label, **style)
    ax_loss.set(xlabel="epoch", ylabel="mean training loss (NLL)", yscale="log",
                title="Training loss, UCI digits")
    ax_acc.set(xlabel="epoch", ylabel="held-out accuracy", ylim=(0.8, 1.0),
               title="Held-out accuracy (360 images)")
    ax_acc.axhline(0.95, color="grey", lw=0.8, ls="--")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png = folder / "loss_curve.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(plot(sys.argv[1]))
