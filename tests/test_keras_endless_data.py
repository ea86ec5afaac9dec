"""Data without end given to `fit`, and two cases under mirrored (issue 50: Keras's own
tests found them), each against Keras's own `fit` on an equal model: an endless generator with no
`steps_per_epoch` stopped by a callback, a `PyDataset` without end (`num_batches` is
`None`), an endless validation generator with `validation_steps`, and a generator longer
than kdist reads ahead, which ends its one epoch; under a `MirroredStrategy` scope,
`predict` of an unbuilt model and a model made outside the scope. Cost: ~2-5 s a case on one device.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow.trainer import TensorFlowTrainer as Trainer

import kdist

RNG = np.random.default_rng(5)
X = RNG.normal(size=(64, 2)).astype("float32")
Y = RNG.normal(size=(64, 3)).astype("float32")


def _experiment(tmp_path: Path, model: keras.Model) -> kdist.Experiment:
    """A new user's route: an Experiment handed the model Keras trains the twin of."""
    overrides = ["trainer.verbose=0", "callbacks=minimal", "strategy=one_device"]
    exp = kdist.Experiment(kdist.compose(overrides), run_dir=tmp_path)
    exp.build_model(model=model)
    return exp


def _pair() -> tuple[keras.Model, keras.Model]:
    """Two equal compiled models: one for Keras's `fit`, one for kdist's."""
    models = []
    for _ in range(2):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        models.append(model)
    return models[0], models[1]


def _batches(start: int = 0, stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of 4 rows cycling through X and Y, from batch `start` to `stop` (or
    without end)."""
    for index in itertools.count(start) if stop is None else range(start, stop):
        rows = slice(4 * (index % 16), 4 * (index % 16) + 4)
        yield X[rows], Y[rows]


class _Recorder(keras.callbacks.Callback):
    """Counts the batch hooks, stops training after `stop_at` train batches, keeps the
    epochs' logs."""

    def __init__(self, stop_at: int = 0):
        super().__init__()
        self.stop_at, self.train, self.test, self.epochs = stop_at, 0, 0, []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.train += 1
        if self.train == self.stop_at:
            self.model.stop_training = True

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self.test += 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append((epoch, dict(logs or {})))


def _assert_same(theirs: keras.Model, ours: keras.Model) -> None:
    # Both run the same float32 ops on the same batches in the same order: exact.
    for a, b in zip(theirs.get_weights(), ours.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_generator_without_end_trains_until_a_callback_stops_it(tmp_path):
    # trainer_test.py's test_stop_loop_fit: no steps_per_epoch, an endless generator.
    theirs, ours = _pair()
    expected = _Recorder(stop_at=5)
    history = theirs.fit(_batches(), epochs=3, callbacks=[expected], shuffle=False, verbose=0)
    got = _Recorder(stop_at=5)
    ours_history = _experiment(tmp_path, ours).fit(_batches(), epochs=3, callbacks=[got], verbose=0)
    assert (got.train, got.epochs) == (expected.train, expected.epochs) == (5, got.epochs)
    assert ours_history.history == history.history
    assert ours_history.params["steps"] is None  # an epoch of unknown length, as in Keras
    _assert_same(theirs, ours)


def test_a_generator_longer_than_kdist_reads_ahead_is_one_epoch_that_ends_with_it(tmp_path):
    # 10,050 batches, over the 10,000 kdist reads before training: one epoch until the
    # generator ends. Keras's epoch 2 then finds it empty; kdist's training ends there.
    theirs, ours = _pair()
    with pytest.warns(UserWarning, match="ran out of data"):  # the call finding the end
        theirs.fit(_batches(stop=10_050), epochs=1, shuffle=False, verbose=0)
    history = _experiment(tmp_path, ours).fit(_batches(stop=10_050), epochs=2)
    assert len(history.history["loss"]) == 1
    _assert_same(theirs, ours)


class _Endless(keras.utils.PyDataset):
    """trainer_test.py's TestPyDataset(infinite=True): `num_batches` is `None`."""

    @property
    def num_batches(self) -> int | None:
        return None

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return next(_batches(index))


def test_a_py_dataset_without_end_is_read_by_index_for_steps_per_epoch(tmp_path):
    # trainer_test.py's test_fit_with_data_adapter_py_dataset_infinite (steps_per_epoch=20).
    theirs, ours = _pair()
    history = theirs.fit(_Endless(), epochs=2, steps_per_epoch=20, shuffle=False, verbose=0)
    exp = _experiment(tmp_path, ours)
    assert exp.fit(_Endless(), epochs=2, steps_per_epoch=20).history == history.history
    _assert_same(theirs, ours)
    # evaluate reads it by index too, `steps` batches.
    assert exp.evaluate(_Endless(), steps=3) == theirs.evaluate(_Endless(), steps=3, verbose=0)


class _ValidationAsRead(keras.callbacks.Callback):
    """At each epoch's end, the validation loss of the batches a validation reading on
    from the last one reads: epoch `e`, batches `7 + 4e` to `10 + 4e` of `_batches`."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        read = list(_batches(7 + 4 * epoch, 11 + 4 * epoch))
        x, y = (np.concatenate(part) for part in zip(*read, strict=True))
        self.losses.append(float(np.mean((self.model(x, training=False).numpy() - y) ** 2)))


def test_a_validation_generator_with_validation_steps_reads_on_each_validation(tmp_path):
    # trainer_test.py's test_validation_data_infinite_generator, over 3 epochs: each
    # validation reads the next 4 batches. Keras's own run reads the same 12 batches,
    # but its validation losses after the first epoch vary from one process to the next
    # (measured: [1.808, 2.212, 2.477] and [1.808, 2.272, 2.080]), so the losses are
    # checked against the batches each validation reads; the counts against Keras's.
    theirs, ours = _pair()
    expected, got, as_read = _Recorder(), _Recorder(), _ValidationAsRead()
    args = dict(epochs=3, steps_per_epoch=3, validation_steps=4, shuffle=False)
    history = theirs.fit(
        _batches(), validation_data=_batches(7), callbacks=[expected], verbose=0, **args
    )
    ours_history = _experiment(tmp_path, ours).fit(
        _batches(), validation_data=_batches(7), callbacks=[got, as_read], **args
    )
    assert (got.train, got.test) == (expected.train, expected.test) == (9, 12)
    assert ours_history.history["loss"] == history.history["loss"]
    _assert_same(theirs, ours)
    assert ours_history.history["val_loss"] == as_read.losses  # measured: equal to the bit
    assert len(set(as_read.losses)) == 3


# -- under mirrored (Keras's suite inside one MirroredStrategy scope found these) ---------


class DenseTrainer(Trainer, keras.layers.Dense):  # type: ignore[misc]
    """trainer_test.py's ExampleModel: a Keras `Trainer` on a `Dense` layer, unbuilt."""

    def __init__(self) -> None:
        keras.layers.Dense.__init__(self, 3, use_bias=False, kernel_initializer="ones")
        Trainer.__init__(self)


def _mirrored_experiment(tmp_path: Path) -> kdist.Experiment:
    overrides = ["trainer.verbose=0", "callbacks=minimal", "strategy=mirrored"]
    return kdist.Experiment(
        kdist.compose([*overrides, "runtime.logical_devices=2"]), run_dir=tmp_path
    )


def test_predict_under_mirrored_builds_an_unbuilt_model_before_the_replicas_step(tmp_path):
    # trainer_test.py's test_predict_flow under a MirroredStrategy scope: the layer's
    # kernel made inside the replicas' step failed ("cond/Placeholder"). Both models are
    # made in kdist's own strategy (a second two-device MirroredStrategy in this process
    # would reuse its collectives' keys).
    exp = _mirrored_experiment(tmp_path)
    x = np.ones((100, 4), "float32")
    with exp.strategy.scope():
        theirs, ours = DenseTrainer(), DenseTrainer()
    expected = theirs.predict(x, batch_size=16, verbose=0)
    exp.build_model(model=ours)
    np.testing.assert_array_equal(exp.predict(x, batch_size=16), expected)  # 4.0 everywhere


def test_a_model_made_outside_a_scope_trains_under_the_scope_it_is_handed_in(tmp_path):
    # learning_rate_scheduler_test.py under a MirroredStrategy scope: a model made (and
    # compiled) outside it, compiled again inside with an optimizer made there. Keras's
    # fit trains it under the strategy in scope; kdist's own mirrored strategy mixed
    # the two ("Mixing different tf.distribute.Strategy objects"). One device in the
    # scope's strategy: no collectives.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model = keras.Sequential([keras.layers.Dense(5), keras.layers.Dense(2)])
    model.compile(loss="mse", optimizer="sgd")
    with strategy.scope():
        schedule = keras.optimizers.schedules.PolynomialDecay(0.1, decay_steps=10)
        model.compile(loss="mse", optimizer=keras.optimizers.Adam(schedule))
        exp = _mirrored_experiment(tmp_path)
        exp.build_model(model=model)
        assert exp.strategy is strategy
        scheduler = keras.callbacks.LearningRateScheduler(lambda step, lr: lr / 2)
        with pytest.raises(TypeError, match="created with a `LearningRateSchedule`"):
            exp.fit(X[:10, :2], Y[:10, :2], callbacks=[scheduler], epochs=2)


def test_calls_on_data_in_hand_never_build_the_config_data(tmp_path, monkeypatch):
    # Keras's model_test.py's evaluate/predict on a model fit has not trained: the
    # config's digits were built and checked against the model ("data.source: does not
    # have the shape of the model's inputs"). Neither evaluate, predict nor fit with
    # their own data may build it.
    def refuse(node: Any) -> None:
        raise AssertionError("the config's data.source was built")

    monkeypatch.setattr("kdist.experiment.run_data.build_source", refuse)
    theirs, ours = _pair()
    exp = _experiment(tmp_path, ours)
    x, y = X[:10, :2], Y[:10]
    assert exp.evaluate(x, y) == theirs.evaluate(x, y, verbose=0)
    np.testing.assert_array_equal(exp.predict(x), theirs.predict(x, verbose=0))
    history = exp.fit(x, y, epochs=2, batch_size=4, shuffle=False)
    assert (
        history.history
        == theirs.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0).history
    )
