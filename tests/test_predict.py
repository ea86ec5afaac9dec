"""Prediction under the strategy: `Experiment.predict` and `python -m kdist.predict`."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import REPO, compose, run_module

import kdist


def _house(path: Path, count: int = 200) -> Path:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(count, 8)).astype("float32")
    y = (x @ rng.normal(size=8) + 0.1 * rng.normal(size=count)).astype("float32")
    np.savez(path, x=x, y=y)
    return path


def test_regression_from_the_command_line_then_predict(tmp_path: Path):
    data = _house(tmp_path / "house.npz")
    env = {"PYTHONPATH": str(REPO / "tests")}
    trained = run_module(
        "kdist.train",
        [
            "data=npz",
            f"data.source.path={data}",
            "model=custom",
            "model._target_=conformance_models.regressor",
            "trainer.loss=mse",
            "trainer.metrics=[mae]",
            "trainer.epochs=3",
            "trainer.verbose=0",
            "callbacks.tensorboard.enabled=false",
            "hydra.run.dir=run",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(summary["validation"]) == {"loss", "mae"}
    assert summary["objective"]["name"] == "val_loss"
    assert summary["objective"]["direction"] == "min"

    refused = run_module("kdist.predict", ["run_dir=run"], cwd=tmp_path, env=env)
    # The run names a model outside kdist and Keras: reading it needs the user's word.
    assert refused.returncode == 2 and "trust_run_dir=true" in refused.stderr
    predicted = run_module(
        "kdist.predict", ["run_dir=run", "trust_run_dir=true"], cwd=tmp_path, env=env
    )
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert "predictions: run/predictions.npz" in predicted.stdout
    with np.load(tmp_path / "run" / "predictions.npz") as archive:
        ours = archive["predictions"]
    # The validation split, in order, as the run's source reads it.
    exp = kdist.Experiment(
        compose(
            [
                "data=npz",
                f"data.source.path={data}",
                "trainer.loss=mse",
                f"run_dir={tmp_path / 'check'}",
            ]
        )
    )
    x_val = exp.source.arrays("validation")[0]
    model = keras.models.load_model(tmp_path / "run" / "model.keras", compile=False)
    expected = model.predict(x_val, verbose=0)
    assert ours.shape == expected.shape == (len(x_val), 1)
    np.testing.assert_allclose(ours, expected, atol=1e-6, rtol=0)


def test_predict_under_mirrored_matches_one_device(tmp_path: Path):
    base = ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal"]
    one = kdist.Experiment(compose([*base, f"run_dir={tmp_path / 'one'}"]))
    one.build_model()
    mirrored = kdist.Experiment(
        compose([*base, "strategy=mirrored", f"run_dir={tmp_path / 'two'}"])
    )
    mirrored.build_model()
    mirrored.model.set_weights(one.model.get_weights())
    a = one.predict()
    b = mirrored.predict()
    # 360 validation examples in batches of 64: the last batch splits unevenly.
    assert a.shape == (one.source.size("validation"), 10)
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    x = one.source.arrays("validation")[0][:5]
    np.testing.assert_allclose(one.predict(x=x), a[:5], atol=1e-6, rtol=0)


def test_predict_needs_a_model_file(tmp_path: Path):
    from kdist.config import ConfigError
    from kdist.predict import predict_run

    exp = kdist.Experiment(
        compose(
            ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal", f"run_dir={tmp_path}"]
        )
    )
    exp.fit()
    with pytest.raises(ConfigError, match=r"run_dir.*model\.keras"):
        predict_run(tmp_path)
