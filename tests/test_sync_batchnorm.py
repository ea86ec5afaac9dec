"""`trainer.sync_batchnorm=true`: batch norm over the global batch under mirrored and MWMS."""

from __future__ import annotations

import io
from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import REPO, compose

import kdist
from kdist.config import ConfigError
from kdist.launch import run

BASE = [
    "trainer.epochs=1",
    "trainer.steps_per_epoch=3",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=0",
    "callbacks=minimal",
    "data.shuffle=false",
    # SGD: Adam divides by the root of tiny second moments, which magnifies float noise.
    "optimizer=sgd",
    "optimizer.learning_rate=0.05",
]


def batchnorm_model() -> keras.Model:
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(16)(x)
    # Momentum 0.5: one step moves the moving statistics a lot, so a difference shows.
    x = keras.layers.BatchNormalization(momentum=0.5)(x)
    x = keras.layers.Activation("relu")(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def _train(tmp_path: Path, name: str, extra: list[str]) -> kdist.Experiment:
    exp = kdist.Experiment(compose([*BASE, *extra]), run_dir=tmp_path / name)
    keras.utils.set_random_seed(3)
    with exp.strategy.scope():
        model = batchnorm_model()
    exp.build_model(model=model)
    exp.fit()
    return exp


def _moving(exp: kdist.Experiment) -> list[np.ndarray]:
    layer = next(
        layer
        for layer in exp.model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization)
    )
    return [np.asarray(layer.moving_mean), np.asarray(layer.moving_variance)]


def test_two_replicas_with_sync_batchnorm_match_one_device(tmp_path: Path):
    one = _train(tmp_path, "one", [])
    synced = _train(tmp_path, "synced", ["strategy=mirrored", "trainer.sync_batchnorm=true"])
    local = _train(tmp_path, "local", ["strategy=mirrored"])
    for a, b in zip(_moving(one), _moving(synced), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    for a, b in zip(one.model.get_weights(), synced.model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    # Without it each replica normalises with its own half batch: the statistics differ.
    worst = max(
        float(np.max(np.abs(a - b))) for a, b in zip(_moving(one), _moving(local), strict=True)
    )
    assert worst > 1e-4


def test_sync_batchnorm_under_parameter_servers_is_refused():
    from unittest import mock

    import tensorflow as tf

    from kdist.experiment.build import synchronize

    strategy = mock.Mock(spec=tf.distribute.ParameterServerStrategy)
    with pytest.raises(ConfigError, match=r"^trainer\.sync_batchnorm=True: cannot work"):
        synchronize(batchnorm_model(), strategy)


@pytest.mark.slow
@pytest.mark.multiworker
def test_two_workers_with_sync_batchnorm_match_one_device(tmp_path: Path, monkeypatch):
    # Across processes the statistics go through the collective all-reduce.
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests"))
    job = [
        *BASE,
        "callbacks.save_model=true",
        "model=custom",
        "model._target_=helpers.norm_model",
        "runtime.seed=7",
    ]
    weights = {}
    for name, workers, extra in (
        ("one", 1, ["strategy=one_device"]),
        ("synced", 2, ["strategy=multi_worker_mirrored", "trainer.sync_batchnorm=true"]),
        ("local", 2, ["strategy=multi_worker_mirrored"]),
    ):
        log = io.StringIO()
        code = run(workers, [*job, *extra], run_dir=tmp_path / name, timeout=300, output=log)
        assert code == 0, log.getvalue()[-3000:]
        model = keras.models.load_model(tmp_path / name / "model.keras")
        weights[name] = [np.asarray(w) for w in model.get_weights()]
    for a, b in zip(weights["one"], weights["synced"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    # Without it each worker normalises with its own half batch.
    worst = max(
        float(np.max(np.abs(a - b))) for a, b in zip(weights["one"], weights["local"], strict=True)
    )
    assert worst > 1e-4
