"""Models that report their own metrics (keras.io's VAE and GAN) train through kdist.

Everything that names a metric works with what the built model logs: `objective: auto`
picks from it, an explicit objective and the callbacks' monitors are checked against it
once the model is built (a one-line error naming the key and what the model logs),
`metrics.json`, `history.csv` and `curves.png` hold its metrics. The GAN, with two
optimizers and a `SeedGenerator`, resumes step-exactly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from conformance_models import FEATURES, gan, vae
from helpers import LOGICAL, REPO, compose, run_module

import kdist
from kdist.config import ConfigError
from kdist.runs.fileio import read_csv

EXAMPLES, BATCH = 64, 16


def _data(path: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(EXAMPLES, FEATURES)).astype("float32")
    np.savez(path, x=x, y=(x[:, 0] > 0.5).astype("int64"))
    return path


def _cfg(tmp_path: Path, extra: list[str] = (), *, run: str = "run") -> Any:
    data = tmp_path / "data.npz"
    if not data.exists():
        _data(data)
    return compose(
        [
            "data=npz",
            f"data.source.path={data}",
            "data.source.validation_fraction=0.25",
            "data.cache=false",
            f"trainer.global_batch_size={BATCH}",
            "trainer.epochs=2",
            "trainer.steps_per_execution=2",
            "trainer.verbose=0",
            # keras.io's VAE and GAN have no `test_step`: they train without validation.
            "trainer.validation=false",
            "callbacks=minimal",
            f"run_dir={tmp_path / run}",
            *extra,
        ]
    )


def _experiment(cfg: Any, make: Any) -> kdist.Experiment:
    exp = kdist.Experiment(cfg)
    keras.utils.set_random_seed(1)
    with exp.strategy.scope():
        model = make()
    exp.build_model(model=model)
    return exp


def test_vae_logs_its_own_metrics_everywhere(tmp_path: Path):
    cfg = _cfg(
        tmp_path,
        [
            "callbacks.csv.enabled=true",
            "callbacks.curves=true",
            "callbacks.save_model=true",
            "callbacks.best_model.monitor=kl_loss",
        ],
    )
    exp = _experiment(cfg, vae)
    history = exp.fit()
    # `auto`: no `loss` or `accuracy` logged, so the model's first metric, a loss: min.
    assert (exp.cfg.objective.name, exp.cfg.objective.direction) == ("total_loss", "min")
    assert set(history.history) == {"total_loss", "reconstruction_loss", "kl_loss"}
    run = tmp_path / "run"
    summary = json.loads((run / "metrics.json").read_text())
    assert set(summary["train"]) == {"total_loss", "reconstruction_loss", "kl_loss"}
    assert summary["objective"]["value"] == pytest.approx(history.history["total_loss"][-1])
    assert summary["steps"] == 2 * exp.steps_per_epoch
    assert summary["best_model"]["monitor"] == "kl_loss"
    with (run / "history.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 and float(rows[1]["kl_loss"]) == pytest.approx(
        history.history["kl_loss"][1]
    )
    from kdist.callbacks.curves import wait_for_writes

    assert wait_for_writes(60)
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Keras cannot save a subclassed model without `get_config` whole: its weights.
    assert (run / "model.weights.h5").is_file()
    assert (run / "config.yaml").read_text().count("name: total_loss") == 1


def test_an_explicit_objective_of_the_models_metrics_is_accepted(tmp_path: Path):
    # Refused in `Experiment(cfg)` before the model existed, against `trainer.metrics`.
    exp = _experiment(_cfg(tmp_path, ["objective.name=kl_loss"]), vae)
    exp.fit()
    assert exp.cfg.objective.direction == "min"
    assert exp.objective() == pytest.approx(exp.result.history.history["kl_loss"][-1])


def test_an_objective_the_model_does_not_log_is_refused_before_training(tmp_path: Path):
    exp = kdist.Experiment(_cfg(tmp_path, ["objective.name=val_accuracy"]))
    with exp.strategy.scope():
        model = vae()
    with pytest.raises(ConfigError) as caught:
        exp.build_model(model=model)
        exp.fit()
    message = str(caught.value)
    assert caught.value.key == "objective.name" and "\n" not in message
    assert "total_loss, reconstruction_loss, kl_loss" in message
    assert int(model.optimizer.iterations.numpy()) == 0


def test_a_monitor_the_model_does_not_log_is_refused(tmp_path: Path):
    cfg = _cfg(tmp_path, ["callbacks.early_stopping.enabled=true"])  # monitor: val_loss
    exp = kdist.Experiment(cfg)
    with exp.strategy.scope():
        model = gan()
    with pytest.raises(ConfigError, match=r"^callbacks.early_stopping.monitor='val_loss'.*d_loss"):
        exp.build_model(model=model)
        exp.fit()


def test_early_stopping_monitors_a_model_metric(tmp_path: Path):
    cfg = _cfg(
        tmp_path,
        [
            "trainer.epochs=6",
            "callbacks.early_stopping.enabled=true",
            "callbacks.early_stopping.monitor=g_loss",
            "callbacks.early_stopping.patience=0",
            "callbacks.early_stopping.mode=max",  # the generator's loss falls: stop at once
        ],
    )
    exp = _experiment(cfg, gan)
    history = exp.fit()
    assert 1 < len(history.history["g_loss"]) < 6


class Scored(keras.Model):
    """Its own step logs `score` first, which says nothing of its direction."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1)
        self.score = keras.metrics.Mean(name="score")
        self.error = keras.metrics.Mean(name="error_loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.score, self.error]

    def call(self, x: Any) -> Any:
        return self.dense(x)

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x)[:, 0] - keras.ops.cast(y, "float32")))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        self.score.update_state(-loss)
        self.error.update_state(loss)
        return {m.name: m.result() for m in self.metrics}


def _scored() -> keras.Model:
    model = Scored()
    model.compile(optimizer="sgd")
    return model


def test_auto_objective_without_a_loss_asks_for_the_direction(tmp_path: Path):
    exp = kdist.Experiment(_cfg(tmp_path))
    with exp.strategy.scope():
        model = _scored()
    with pytest.raises(ConfigError, match=r"^objective.direction='auto'.*score.*max or min"):
        exp.build_model(model=model)
        exp.fit()
    assert int(model.optimizer.iterations.numpy()) == 0
    exp = kdist.Experiment(_cfg(tmp_path, ["objective.direction=max"], run="run2"))
    with exp.strategy.scope():
        model = _scored()
    exp.build_model(model=model)
    exp.fit()
    assert (exp.cfg.objective.name, exp.cfg.objective.direction) == ("score", "max")


# -- step-exact resume of the GAN: both optimizers and the noise seed -----------------------


def _gan_state(exp: kdist.Experiment) -> dict[str, Any]:
    model = exp.model
    return {
        "weights": [np.array(w) for w in model.get_weights()],
        "d_iterations": int(model.d_optimizer.iterations.numpy()),
        "g_iterations": int(model.g_optimizer.iterations.numpy()),
        "d_slots": [v.numpy() for v in model.d_optimizer.variables],
        "g_slots": [v.numpy() for v in model.g_optimizer.variables],
        "seed": model.seed_generator.state.numpy(),
    }


@pytest.mark.slow  # 15-80 s on 2 cores: make test-all runs it
def test_gan_resumes_step_exactly(tmp_path: Path):
    extra = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=0"]
    straight = _experiment(_cfg(tmp_path, ["trainer.epochs=4", *extra], run="straight"), gan)
    straight.fit()
    first = _experiment(_cfg(tmp_path, ["trainer.epochs=2", *extra], run="split"), gan)
    first.fit()
    after_two = _gan_state(first)
    # A new Experiment on the same folder, as a restarted process makes it.
    second = _experiment(_cfg(tmp_path, ["trainer.epochs=4", *extra], run="split"), gan)
    second.restore()
    restored = _gan_state(second)
    assert restored["d_iterations"] == restored["g_iterations"] == 2 * second.steps_per_epoch
    np.testing.assert_array_equal(restored["seed"], after_two["seed"])
    second.fit()
    ours, theirs = _gan_state(second), _gan_state(straight)
    assert ours["d_iterations"] == ours["g_iterations"] == 4 * second.steps_per_epoch
    assert theirs["d_iterations"] == ours["d_iterations"]
    assert theirs["g_iterations"] == ours["g_iterations"]
    np.testing.assert_array_equal(ours["seed"], theirs["seed"])
    for key in ("weights", "d_slots", "g_slots"):
        for a, b in zip(ours[key], theirs[key], strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.slow  # a process of its own: about 10 s
def test_an_objective_the_model_does_not_log_exits_2_from_the_command_line(tmp_path: Path):
    data = _data(tmp_path / "data.npz")
    result = run_module(
        "kdist.train",
        [
            "model=custom",
            "model._target_=conformance_models.vae",
            "objective.name=accuracy",
            "data=npz",
            f"data.source.path={data}",
            "trainer.validation=false",
            "trainer.epochs=1",
            f"trainer.global_batch_size={BATCH}",
            "hydra.run.dir=run",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(lines) == 1, result.stderr[-2000:]
    assert "objective.name='accuracy'" in lines[0]
    assert "total_loss, reconstruction_loss, kl_loss" in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.slow  # two trials: about 20 s
def test_the_tuner_searches_on_a_metric_the_model_logs(tmp_path: Path):
    from kdist.tuning import run as run_search

    data = _data(tmp_path / "data.npz")
    overrides = [
        "trainer.verbose=0",
        "callbacks=minimal",
        "tuner.verbose=0",
        "tuner.max_trials=2",
        "model=custom",
        "model._target_=conformance_models.vae",
        "objective.name=kl_loss",  # refused in `Experiment(cfg)` before the model existed
        "data=npz",
        f"data.source.path={data}",
        "trainer.validation=false",
        "trainer.epochs=1",
        "tuner.space.optimizer.learning_rate=null",
        "tuner.space.model.units=null",
        "tuner.space.model.dropout=null",
        "+tuner.space.trainer.global_batch_size='choice(8,16)'",
    ]
    cfg = compose(overrides, config_name="tune")
    result = run_search(cfg, run_dir=tmp_path / "search", overrides=[LOGICAL, *overrides])
    rows = read_csv(result.run_dir / "trials.csv")
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert {r["objective_name"] for r in rows} == {"kl_loss"}
    assert all(float(r["objective"]) == float(r["kl_loss"]) for r in rows)
