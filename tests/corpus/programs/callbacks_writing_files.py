"""keras.io's callbacks guide and API docs, as a user writes them: `ModelCheckpoint`
with `{epoch:02d}` in the file name (weights only), `CSVLogger`, and `BackupAndRestore`
(its backup is removed when training ends). Each side runs in its own folder; the files
written must be the same names, the CSV rows the same epochs and values."""

import csv
from pathlib import Path

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 16, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(80, 8)).astype("float32")
    xv = rng.normal(size=(24, 8)).astype("float32")
    return {
        "x": x,
        "y": (x[:, 0] > 0).astype("int64"),
        "validation_data": (xv, (xv[:, 0] > 0).astype("int64")),
    }


def make_callbacks():
    return [
        keras.callbacks.ModelCheckpoint(
            "checkpoints/model_{epoch:02d}.weights.h5", save_weights_only=True
        ),
        keras.callbacks.CSVLogger("training.csv"),
        keras.callbacks.BackupAndRestore("backup"),
    ]


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def check(reference, ours):
    theirs, mine = reference.extra["folder"], ours.extra["folder"]
    wanted = [f for f in _written(theirs) if not f.startswith("run/")]
    got = [f for f in _written(mine) if not f.startswith("run/")]
    assert got == wanted, f"kdist's side wrote {got}, fit's {wanted}"
    rows = [
        list(csv.DictReader((d / "training.csv").read_text().splitlines())) for d in (mine, theirs)
    ]
    assert [r["epoch"] for r in rows[0]] == [r["epoch"] for r in rows[1]], rows
    for a, b in zip(*rows, strict=True):
        assert a.keys() == b.keys(), (sorted(a), sorted(b))
        for key in a:
            assert abs(float(a[key]) - float(b[key])) < 1e-4, (key, a[key], b[key])
