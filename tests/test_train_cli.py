"""`python -m kdist.train`: the default job and its run directory."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers import only_run_dir, run_module


def _scalar_tags(event_dir: Path) -> set[str]:
    import tensorflow as tf

    tags = set()
    for path in event_dir.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.add(value.tag)
    return tags


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> tuple[Path, object]:
    cwd = tmp_path_factory.mktemp("default")
    result = run_module("kdist.train", [], cwd=cwd, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(cwd), result


def test_default_job_reaches_095_on_digits(default_run):
    run_dir, result = default_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["validation"]["accuracy"] >= 0.95
    assert f"validation accuracy: {metrics['validation']['accuracy']:.4f}" in result.stdout
    assert metrics["strategy"] == "OneDeviceStrategy"
    assert metrics["num_replicas"] == 1
    assert metrics["epochs"] == 20
    assert metrics["steps"] == 20 * (1438 // 64)
    assert metrics["examples_per_sec"] > 0 and metrics["wall_seconds"] > 0


def test_run_directory_layout(default_run):
    run_dir, _ = default_run
    for name in ("metrics.json", "history.csv", "model.keras", "train.log", ".hydra/config.yaml"):
        assert (run_dir / name).is_file(), name
    with (run_dir / "history.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 20
    assert {"epoch", "loss", "accuracy", "val_loss", "val_accuracy"} <= set(rows[0])
    assert "trained 440 steps" in (run_dir / "train.log").read_text()


def test_tensorboard_has_train_and_validation_scalars(default_run):
    run_dir, _ = default_run
    assert {"epoch_loss", "epoch_accuracy"} <= _scalar_tags(run_dir / "tensorboard" / "train")
    assert {"epoch_loss", "epoch_accuracy"} <= _scalar_tags(run_dir / "tensorboard" / "validation")


def test_the_default_run_writes_model_keras_only(default_run):
    # saved_model/ costs about a second of a 5-second default run (issue 29): opt-in.
    run_dir, _ = default_run
    assert not (run_dir / "saved_model").exists()


def test_saved_model_reloads_with_the_same_accuracy(default_run):
    import keras
    import numpy as np

    from kdist.data import digits

    run_dir, _ = default_run
    model = keras.models.load_model(run_dir / "model.keras")
    x, y = digits().arrays("validation")
    accuracy = float(np.mean(np.argmax(model.predict(x, verbose=0), axis=1) == y))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert accuracy == pytest.approx(metrics["validation"]["accuracy"], abs=1e-6)


def test_mirrored_cnn_from_the_command_line(tmp_path: Path):
    result = run_module(
        "kdist.train",
        ["strategy=mirrored", "runtime.logical_devices=2", "model=cnn", "trainer.epochs=3"],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    assert metrics["strategy"] == "MirroredStrategy"
    assert metrics["num_replicas"] == 2
    assert metrics["validation"]["accuracy"] >= 0.9
