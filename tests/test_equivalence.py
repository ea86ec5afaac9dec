"""Mirrored over 2 replicas computes the same updates as one device on the global batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import compose

import kdist


def _train(strategy: str, tmp_path: Path, extra=()) -> list[np.ndarray]:
    cfg = compose(
        [
            f"strategy={strategy}",
            "model=cnn",
            "model.dense_units=64",
            "data.shuffle=false",
            "trainer.epochs=2",
            "trainer.steps_per_epoch=6",
            "trainer.global_batch_size=32",
            "trainer.steps_per_execution=3",
            "trainer.verbose=0",
            "optimizer=sgd",
            "optimizer.learning_rate=0.05",
            "runtime.seed=7",
            "callbacks=minimal",
            f"run_dir={tmp_path / strategy}",
            *extra,
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert exp.num_replicas == (2 if strategy == "mirrored" else 1)
    return [np.asarray(w) for w in exp.model.get_weights()]


def test_mirrored_matches_one_device(tmp_path: Path):
    one = _train("one_device", tmp_path)
    two = _train("mirrored", tmp_path)
    initial = _train(
        "one_device", tmp_path, extra=["trainer.epochs=1", "trainer.steps_per_epoch=1"]
    )
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two, strict=True))
    assert worst < 1e-5, worst
    # The comparison is not vacuous: training moved the weights by far more than that.
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(one, initial, strict=True))
    assert moved > 1e-3, moved
