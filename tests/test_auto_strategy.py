"""`strategy=auto`: mirrored over the GPUs when there are several, else one device.

On this CPU machine auto is one device; these tests run what the per-strategy table
lists under it (the default callbacks and curves, export and `kdist.evaluate`, the Python
API, a multirun), and check the GPU branch with faked GPUs. The NaN guard, SIGKILL and
SIGTERM resumes and keras-tuner under auto are parametrized in test_checkpoints and
test_tune.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import REPO, compose, only_run_dir, run_module

import kdist
import kdist.strategies.single_host as single_host

SHORT = [
    "strategy=auto",
    "trainer.epochs=2",
    "trainer.steps_per_epoch=6",
    "trainer.global_batch_size=32",
]


def test_auto_is_mirrored_over_several_gpus_and_one_device_otherwise(monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(single_host, "mirrored", lambda: made.append("mirrored") or "M")
    monkeypatch.setattr(single_host, "one_device", lambda: made.append("one_device") or "O")
    for count, expected in [(0, "O"), (1, "O"), (2, "M"), (4, "M")]:
        gpus = [tf.config.LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(count)]
        monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None, g=gpus: g)
        assert single_host.auto() == expected
    assert made == ["one_device", "one_device", "mirrored", "mirrored"]


def test_auto_on_the_command_line_with_the_default_callbacks_then_evaluate(tmp_path: Path):
    trained = run_module("kdist.train", SHORT, cwd=tmp_path, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = trained.stdout + trained.stderr
    assert re.search(r"[\d,.]+ steps/s, [\d,.]+ examples/s", out), out[-2000:]
    run_dir = only_run_dir(tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["strategy"] == "OneDeviceStrategy" and metrics["num_replicas"] == 1
    with open(run_dir / "history.csv", newline="") as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == [0, 1]
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # saved_model/ is off by default (callbacks.saved_model=true writes it).
    assert (run_dir / "model.keras").is_file() and not (run_dir / "saved_model").exists()
    evaluated = run_module("kdist.evaluate", [f"run_dir={run_dir}"], cwd=REPO, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    printed = dict(re.findall(r"^validation (\w+): (\S+)$", evaluated.stdout, re.M))
    for name, value in metrics["validation"].items():
        assert abs(float(printed[name]) - value) <= 1e-6, name


def test_auto_through_the_python_api(tmp_path: Path):
    exp = kdist.Experiment(compose([*SHORT, "callbacks=minimal"]), run_dir=tmp_path)
    assert isinstance(exp.strategy, tf.distribute.OneDeviceStrategy)
    history = exp.fit(verbose=0)
    assert len(history.history["loss"]) == 2
    assert int(exp.model.optimizer.iterations.numpy()) == 12
    scores = exp.evaluate()
    recorded = json.loads((tmp_path / "metrics.json").read_text())["validation"]
    assert scores["accuracy"] == pytest.approx(recorded["accuracy"], abs=1e-6)
    logits = exp.predict()
    assert logits.shape[1] == 10 and np.all(np.isfinite(logits))


@pytest.mark.slow
def test_a_multirun_under_auto(tmp_path: Path):
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-m",
            "optimizer.learning_rate=1e-3,3e-3",
            *SHORT,
            "trainer.verbose=0",
            "callbacks=minimal",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    for row in rows:
        metrics = json.loads((sweep / row["run_dir"] / "metrics.json").read_text())
        assert metrics["strategy"] == "OneDeviceStrategy" and metrics["steps"] == 12
