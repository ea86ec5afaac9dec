"""The compiled model is read at every `fit` (issue 42), as Keras's `fit` reads it.

Each case runs the same program with `model.fit` (the reference, in the same strategy's
scope) and with `Experiment.fit`: keras.io's two-phase fine-tuning (a recompile rebuilds
kdist's step), a `trainable` change without a recompile, a recompile with another loss
and metrics, `compile(steps_per_execution=4, jit_compile=True)`, `compile(run_eagerly=
True)`, `fit` without `batch_size` (32, as in Keras), the Keras optimizer's
`gradient_accumulation_steps` and kdist's `trainer.accumulate_steps` on arrays.
Cost: ~2-4 s a case on one device.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

import kdist
from kdist.config.errors import ConfigError

BASE = ["trainer.verbose=0", "callbacks=minimal", "strategy=one_device"]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(72, 8)).astype("float32")  # 2 full batches of 32 and one of 8
Y = RNG.integers(0, 3, 72)
SPARSE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _experiment(tmp_path: Path, *overrides: str) -> kdist.Experiment:
    return kdist.Experiment(kdist.compose([*BASE, *overrides]), run_dir=tmp_path)


def _max_diff(a: keras.Model, b: keras.Model) -> float:
    pairs = zip(a.get_weights(), b.get_weights(), strict=True)
    return max(float(np.abs(i - j).max()) for i, j in pairs)


def _transfer_model() -> tuple[keras.Model, keras.Model]:
    """keras.io's transfer-learning shape: a frozen base, a new head."""
    keras.utils.set_random_seed(1)
    base = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(8, activation="relu"),
        ],
        name="base",
    )
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(3)(base(inputs)))
    base.trainable = False
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SPARSE, metrics=["accuracy"])
    return model, base


def _pair(exp: kdist.Experiment, make: Any) -> tuple[Any, Any]:
    with exp.strategy.scope():
        return make(), make()


def test_two_phase_fine_tuning_equals_fit(tmp_path: Path):
    exp = _experiment(tmp_path)
    (reference, reference_base), (model, base) = _pair(exp, _transfer_model)
    exp.build_model(model=model)
    frozen = [w.copy() for w in reference_base.get_weights()]
    reference.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=2, shuffle=False)
    with exp.strategy.scope():  # Keras needs the new optimizer in the scope too
        for whole, inner in ((reference, reference_base), (model, base)):
            inner.trainable = True
            whole.compile(optimizer=keras.optimizers.Adam(1e-5), loss=SPARSE, metrics=["accuracy"])
    reference.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=2, shuffle=False)
    moved = max(
        float(np.abs(a - b).max())
        for a, b in zip(frozen, reference_base.get_weights(), strict=True)
    )
    assert moved > 1e-7  # phase 2 trains the base in Keras: the case means something
    assert _max_diff(exp.model, reference) <= 1e-6
    assert exp.model.optimizer is model.optimizer


def test_a_trainable_change_without_recompile_does_what_fit_does(tmp_path: Path):
    # Keras's step keeps the variables it was traced with until `compile` drops it.
    exp = _experiment(tmp_path)
    (reference, reference_base), (model, base) = _pair(exp, _transfer_model)
    exp.build_model(model=model)
    reference.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=1, shuffle=False)
    reference_base.trainable = base.trainable = True
    reference.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=1, shuffle=False)
    assert _max_diff(exp.model, reference) <= 1e-6
    # New data of the same shapes: Keras's step is not traced again, still the head only
    # (kdist built a new step on today's trainable set: "Unknown variable" in the optimizer).
    x_new, y_new = X[::-1].copy(), Y[::-1].copy()
    reference.fit(x_new, y_new, batch_size=32, epochs=1, shuffle=False, verbose=0)
    exp.fit(x_new, y_new, batch_size=32, epochs=1, shuffle=False)
    assert _max_diff(exp.model, reference) <= 1e-6


def test_a_recompile_with_another_loss_and_metrics_logs_the_new_keys(tmp_path: Path):
    exp = _experiment(tmp_path)
    (reference, _), (model, _) = _pair(exp, _transfer_model)
    exp.build_model(model=model)
    reference.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=1, shuffle=False)

    def recompile(whole: keras.Model) -> None:
        whole.compile(
            optimizer=keras.optimizers.SGD(0.05),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[
                keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2"),
                keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent"),
            ],
        )

    with exp.strategy.scope():
        recompile(reference)
        recompile(model)
    # The same data as the first fit: only the compile tells kdist to build its step anew.
    expected = reference.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    history = exp.fit(X, Y, batch_size=32, epochs=2, shuffle=False)
    assert set(history.history) == set(expected.history)
    for key, values in expected.history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-5, atol=1e-6)
    assert _max_diff(exp.model, reference) <= 1e-6


class _Batches(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ends: list[int] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.ends.append(batch)


def _plain_model(**compile_args: Any) -> keras.Model:
    keras.utils.set_random_seed(2)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=SPARSE, **compile_args)
    return model


def test_steps_per_execution_and_jit_compile_are_the_models(tmp_path: Path):
    exp = _experiment(tmp_path, "trainer.steps_per_execution=8")
    compile_args = {"steps_per_execution": 4, "jit_compile": True, "metrics": ["accuracy"]}
    reference, model = _pair(exp, lambda: _plain_model(**compile_args))
    exp.build_model(model=model)
    seen, expected = _Batches(), _Batches()
    # 8 steps an epoch: whole calls of 4 (for a last call of fewer steps, Keras's
    # `EpochIterator` names the batch `begin + steps_per_execution - 1`: the loop's part).
    reference.fit(
        X[:64], Y[:64], batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[expected]
    )
    exp.fit(X[:64], Y[:64], batch_size=8, epochs=2, shuffle=False, callbacks=[seen])
    assert len(expected.ends) == 4  # hooks every 4 steps
    assert seen.ends == expected.ends
    assert exp.controller is not None and exp.controller.schedule.steps_per_execution == 4
    assert _max_diff(exp.model, reference) <= 1e-5


class EagerModel(keras.Model):
    """A `train_step` that reads a tensor's value with `.numpy()` (eager only)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(3)
        self.seen_losses: list[float] = []

    def call(self, x: Any) -> Any:
        return self.out(self.hidden(x))

    def train_step(self, data: Any) -> Any:
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x))
        self.seen_losses.append(float(loss.numpy()))
        variables = self.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return {"loss": loss}


def _eager_model() -> keras.Model:
    keras.utils.set_random_seed(3)
    model = EagerModel()
    model(np.zeros((1, 8), "float32"))  # its variables, made in the caller's scope
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=SPARSE, run_eagerly=True)
    return model


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_run_eagerly_runs_the_step_eagerly(tmp_path: Path, strategy: str):
    overrides = [f"strategy={strategy}"]
    if strategy == "mirrored":  # Keras's own fit runs eagerly under MirroredStrategy too
        overrides.append("runtime.logical_devices=2")
    exp = _experiment(tmp_path, *overrides)
    reference, model = _pair(exp, _eager_model)
    exp.build_model(model=model)
    reference.fit(X[:64], Y[:64], batch_size=32, epochs=2, shuffle=False, verbose=0)
    exp.fit(X[:64], Y[:64], batch_size=32, epochs=2, shuffle=False)
    # 4 steps, each replica's train_step reading its loss with `.numpy()`.
    replicas = exp.strategy.num_replicas_in_sync
    assert len(exp.model.seen_losses) == len(reference.seen_losses) == 4 * replicas
    np.testing.assert_allclose(exp.model.seen_losses, reference.seen_losses, rtol=1e-6)
    assert _max_diff(exp.model, reference) <= 1e-6
    assert not tf.config.functions_run_eagerly()  # only during the fit


def test_fit_without_batch_size_batches_by_32_as_keras(tmp_path: Path):
    exp = _experiment(tmp_path, "trainer.global_batch_size=64")
    reference, model = _pair(exp, lambda: _plain_model(metrics=["accuracy"]))
    exp.build_model(model=model)
    seen, expected = _Batches(), _Batches()
    reference.fit(X, Y, epochs=2, shuffle=False, verbose=0, callbacks=[expected])
    exp.fit(X, Y, epochs=2, shuffle=False, callbacks=[seen])
    assert exp.steps_per_epoch == 3  # ceil(72 / 32), the config's 64 would make 2
    assert seen.ends == expected.ends == [0, 1, 2] * 2  # steps_per_execution 1
    assert _max_diff(exp.model, reference) <= 1e-6


def test_kdists_own_model_keeps_the_configs_batch(tmp_path: Path):
    exp = _experiment(tmp_path, "trainer.global_batch_size=24", "model=mlp", "trainer.epochs=1")
    exp.fit(X, Y)
    assert exp.steps_per_epoch == 3  # 72 / 24


def _accumulating_model() -> keras.Model:
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), loss=SPARSE)
    return model


def test_gradient_accumulation_steps_over_replicas_is_refused_in_one_line(tmp_path: Path):
    exp = kdist.Experiment(
        kdist.compose([*BASE[:2], "strategy=mirrored", "runtime.logical_devices=2"]),
        run_dir=tmp_path,
    )
    with exp.strategy.scope():
        model = _accumulating_model()
    exp.build_model(model=model)
    with pytest.raises(ConfigError, match="gradient_accumulation_steps") as error:
        exp.fit(X[:64], Y[:64], batch_size=32, epochs=1)
    assert "\n" not in str(error.value)
    assert "trainer.accumulate_steps=2" in str(error.value)
    assert int(exp.model.optimizer.iterations.numpy()) == 0  # before any training


def test_gradient_accumulation_steps_on_one_device_equals_fit(tmp_path: Path):
    exp = _experiment(tmp_path)
    reference, model = _pair(exp, _accumulating_model)
    exp.build_model(model=model)
    reference.fit(X[:64], Y[:64], batch_size=16, epochs=2, shuffle=False, verbose=0)
    exp.fit(X[:64], Y[:64], batch_size=16, epochs=2, shuffle=False)
    assert _max_diff(exp.model, reference) <= 1e-6


def test_accumulate_steps_takes_arrays_without_a_partial_batch(tmp_path: Path):
    exp = _experiment(tmp_path, "trainer.accumulate_steps=2")
    reference, model = _pair(exp, lambda: _plain_model(metrics=["accuracy"]))
    exp.build_model(model=model)
    reference.fit(X[:64], Y[:64], batch_size=32, epochs=2, shuffle=False, verbose=0)
    exp.fit(X[:64], Y[:64], batch_size=32, epochs=2, shuffle=False)
    assert int(exp.model.optimizer.iterations.numpy()) == 4  # 2 updates an epoch
    assert _max_diff(exp.model, reference) <= 1e-5
    # A partial batch cannot be cut into micro-batches: still refused, in one line.
    other = _experiment(tmp_path / "partial", "trainer.accumulate_steps=2")
    with other.strategy.scope():
        other.build_model(model=_plain_model())
    with pytest.raises(ConfigError, match=r"trainer\.accumulate_steps"):
        other.fit(X, Y, batch_size=32, epochs=1)


def test_a_parameter_server_refuses_jit_and_eager_compiles_in_one_line(caplog: Any):
    from kdist.experiment.binding import step_settings  # new in issue 42

    strategy = mock.Mock(spec=tf.distribute.ParameterServerStrategy)
    cfg = kdist.compose(BASE)
    for name in ("jit_compile", "run_eagerly"):
        model = _plain_model(**{name: True})
        with pytest.raises(ConfigError, match=name) as error:
            step_settings(model, cfg, own_compile=True, strategy=strategy)
        assert "\n" not in str(error.value)
    with caplog.at_level(logging.INFO, logger="kdist.experiment.binding"):
        settings = step_settings(
            _plain_model(), cfg, own_compile=True, strategy=tf.distribute.get_strategy()
        )
    assert settings.steps_per_execution == 1
    conflicts = [r for r in caplog.records if "own compile wins" in r.getMessage()]
    assert len(conflicts) == 1
    assert "trainer.steps_per_execution=" in conflicts[0].getMessage()


def test_same_args_tells_dicts_of_arrays_apart_without_numpys_ambiguous_truth():
    """A second `fit` given a new dict `x` crashed in `same_args` (`==` on arrays; found by
    the corpus generator)."""
    from kdist.experiment.fit_arguments import same_args

    a = {"left": np.zeros((4, 2)), "right": np.ones((4, 3))}
    b = {"left": np.zeros((4, 2)), "right": np.ones((4, 3))}
    assert same_args((a, None), (a, None))
    assert not same_args((a, None), (b, None))  # equal values, other objects: new data
    assert not same_args(({"left": a["left"]},), (a,))
    assert same_args(([a["left"]], 3), ([a["left"]], 3))


def test_a_later_experiment_without_determinism_turns_it_off(tmp_path: Path):
    """`runtime.deterministic=true` turns TensorFlow's op determinism on for the process; a
    later Experiment with the default (false) left it on, and with it Keras's
    `model_supports_jit` answered False for every model (`compile(jit_compile=True)` warned
    and trained without XLA: two tests failed after a slow test's deterministic run)."""
    from tensorflow.python.framework import config

    _experiment(tmp_path / "a", "runtime.deterministic=true")
    assert config.is_op_determinism_enabled()
    _experiment(tmp_path / "b")
    assert not config.is_op_determinism_enabled()
    model = _plain_model(jit_compile=True)
    assert model.jit_compile
