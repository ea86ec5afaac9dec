"""Cases Keras's own tests found (issue 50, `tests/keras_suite/`), each against `model.fit`.

Each runs the same program with Keras's own `fit`/`evaluate`/`predict` (the expected
value) and with a fresh `kdist.Experiment` (`strategy=one_device`) handed the model, as a
new user routes Keras's calls through kdist. Cost: ~1-3 s a case on one device.
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import kdist
from kdist.config.errors import ConfigError

BASE = ["trainer.verbose=0", "callbacks=minimal", "strategy=one_device"]
RNG = np.random.default_rng(0)


def _experiment(tmp_path: Path, *overrides: str) -> kdist.Experiment:
    return kdist.Experiment(kdist.compose([*BASE, *overrides]), run_dir=tmp_path)


def _pair(make: object) -> tuple[keras.Model, keras.Model]:
    """Two equal models (same weights), one for Keras and one for kdist."""
    keras.utils.set_random_seed(3)
    first = make()  # type: ignore[operator]
    keras.utils.set_random_seed(3)
    second = make()  # type: ignore[operator]
    return first, second


def _dropout_model() -> keras.Model:
    """keras/src/models/model_test.py's shape: inputs that are not the config's data."""
    model = keras.Sequential(
        [keras.Input((4, 2)), keras.layers.Dropout(0.5), keras.layers.Dense(3)]
    )
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    return model


def test_evaluate_and_predict_on_a_model_not_fitted_use_only_the_data_given(tmp_path):
    x = RNG.normal(size=(10, 4, 2)).astype("float32")
    y = RNG.normal(size=(10, 4, 3)).astype("float32")
    theirs, ours = _pair(_dropout_model)
    expected = theirs.evaluate(x, y, verbose=0)
    exp = _experiment(tmp_path / "evaluate")
    exp.build_model(model=ours)
    np.testing.assert_allclose(exp.evaluate(x, y), expected, rtol=1e-6)
    exp = _experiment(tmp_path / "predict")
    exp.build_model(model=ours)
    np.testing.assert_allclose(exp.predict(x), theirs.predict(x, verbose=0), rtol=1e-6)


def _dense_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mse"])
    return model


def _evaluate_both(tmp_path: Path, make: object, *, return_dict: bool) -> tuple[object, object]:
    """kdist's and Keras's `evaluate` of two equal models from `make`, on the same 40
    rows in batches of 16."""
    x = RNG.normal(size=(40, 4)).astype("float32")
    y = RNG.normal(size=(40, 3)).astype("float32")
    theirs, ours = _pair(make)
    expected = theirs.evaluate(x, y, batch_size=16, return_dict=return_dict, verbose=0)
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    return exp.evaluate(x, y, batch_size=16, return_dict=return_dict), expected


def _max_diff(a: keras.Model, b: keras.Model) -> float:
    pairs = zip(a.get_weights(), b.get_weights(), strict=True)
    return max(float(np.abs(i - j).max()) for i, j in pairs)


def test_steps_per_epoch_beyond_the_data_ends_each_epoch_where_the_data_ends(tmp_path):
    # keras/src/trainers/trainer_test.py's test_fit_flow: 5 batches, steps_per_epoch=7.
    x = RNG.normal(size=(100, 4)).astype("float32")
    y = RNG.normal(size=(100, 3)).astype("float32")
    theirs, ours = _pair(_dense_model)
    args = dict(batch_size=20, steps_per_epoch=7, epochs=3, shuffle=False)
    with pytest.warns(UserWarning, match="ran out of data"):
        expected = theirs.fit(x, y, verbose=0, **args).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    history = exp.fit(x, y, **args).history
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-5)
    assert _max_diff(theirs, exp.model) < 1e-5


def _layer_model() -> keras.Model:
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    class LayerModel(TensorFlowTrainer, keras.layers.Dense):  # keras's trainer_test shape
        def __init__(self) -> None:
            keras.layers.Dense.__init__(self, units=3, use_bias=False)
            TensorFlowTrainer.__init__(self)

    model = LayerModel()
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    return model  # type: ignore[return-value]


def test_a_layer_with_keras_trainer_trains_as_fit_on_one_device(tmp_path, caplog):
    x = RNG.normal(size=(40, 4)).astype("float32")
    y = RNG.normal(size=(40, 3)).astype("float32")
    theirs, ours = _pair(_layer_model)
    theirs.build((None, 4))
    ours.build((None, 4))
    ours.set_weights(theirs.get_weights())
    expected = theirs.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path, "callbacks.save_model=true")
    assert exp.build_model(model=ours) is ours
    history = exp.fit(x, y, epochs=2, batch_size=8, shuffle=False).history
    assert history == expected
    assert _max_diff(theirs, ours) == 0
    assert not (tmp_path / "model.keras").exists()
    assert "not a keras.Model: no model.keras written" in caplog.text


def test_a_layer_with_keras_trainer_is_refused_in_one_line_under_mirrored(tmp_path):
    exp = _experiment(tmp_path, "strategy=mirrored", "runtime.logical_devices=2")
    with pytest.raises(ConfigError, match=r"not a keras\.Model"):
        exp.build_model(model=_layer_model())


def test_a_model_made_outside_the_scope_is_trained_as_it_is_on_one_device(tmp_path):
    # keras/src/models/model_test.py: a loss Keras cannot deserialize, a class not
    # registered; `fit` trains the user's own object, and so does kdist on one device.
    def loss_fn(y_true, y_pred):
        return keras.ops.mean(keras.ops.square(y_true - y_pred))

    def make() -> keras.Model:
        model = _dense_model()
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss_fn)
        return model

    x = RNG.normal(size=(40, 4)).astype("float32")
    y = RNG.normal(size=(40, 3)).astype("float32")
    theirs, ours = _pair(make)
    expected = theirs.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path)
    assert exp.build_model(model=ours) is ours
    history = exp.fit(x, y, epochs=2, batch_size=8, shuffle=False).history
    assert history == expected
    assert _max_diff(theirs, ours) == 0
    assert int(ours.optimizer.iterations.numpy()) == 10


def test_a_metric_with_several_values_is_logged_as_an_array_as_in_fit(tmp_path):
    # keras/src/callbacks/early_stopping_test.py: F1Score() gives one value per class.
    def make() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, "softmax")])
        model.compile(
            optimizer=keras.optimizers.SGD(2.0),
            loss="categorical_crossentropy",
            metrics=[keras.metrics.F1Score()],
        )
        return model

    x = RNG.normal(size=(48, 4)).astype("float32")
    y = keras.utils.to_categorical(RNG.integers(0, 3, 48), 3)
    theirs, ours = _pair(make)
    args = dict(epochs=2, batch_size=16, shuffle=False, validation_data=(x[:16], y[:16]))
    expected = theirs.fit(x, y, verbose=0, **args).history
    exp = _experiment(tmp_path, "callbacks=default")
    exp.build_model(model=ours)
    history = exp.fit(x, y, **args).history
    assert sorted(history) == sorted(expected)
    for name, values in expected.items():
        assert len(history[name]) == len(values)
        for ours_value, theirs_value in zip(history[name], values, strict=True):
            np.testing.assert_array_equal(ours_value, theirs_value)
    assert np.asarray(history["f1_score"][0]).shape == (3,)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["validation"]["f1_score"] == [float(v) for v in expected["val_f1_score"][-1]]


def test_a_model_without_trainable_weights_trains_as_fit_does(tmp_path):
    # keras/src/trainers/trainer_test.py: Keras warns and trains nothing (metrics still run).
    def frozen() -> keras.Model:
        model = _dense_model()
        model.trainable = False
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        return model

    x = RNG.normal(size=(40, 4)).astype("float32")
    y = RNG.normal(size=(40, 3)).astype("float32")
    theirs, ours = _pair(frozen)
    with pytest.warns(UserWarning, match="trainable weights"):
        expected = theirs.fit(x, y, epochs=2, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    history = exp.fit(x, y, epochs=2, shuffle=False).history
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-6)
    np.testing.assert_allclose(history["mae"], expected["mae"], rtol=1e-6)
    assert _max_diff(theirs, exp.model) == 0


def test_a_generator_without_steps_per_epoch_is_read_to_its_end(tmp_path):
    x = RNG.normal(size=(50, 4)).astype("float32")
    y = RNG.normal(size=(50, 3)).astype("float32")

    def batches():
        for start in range(0, 50, 16):  # 4 batches, the last one of 2
            yield x[start : start + 16], y[start : start + 16]

    theirs, ours = _pair(_dense_model)
    with pytest.warns(UserWarning, match="ran out of data"):  # Keras's, at the end
        expected = theirs.fit(batches(), epochs=1, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    history = exp.fit(batches(), epochs=1, shuffle=False).history
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-5)
    assert _max_diff(theirs, exp.model) < 1e-5


class _NumBatches(keras.utils.PyDataset):
    """keras/src/trainers/trainer_test.py's PyDataset: `num_batches`, no `__len__`."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        super().__init__()
        self.x, self.y = x, y

    @property
    def num_batches(self) -> int:
        return 3

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.x[index * 10 : index * 10 + 10], self.y[index * 10 : index * 10 + 10]


def test_a_pydataset_with_num_batches_and_no_len_trains_as_fit_does(tmp_path):
    x = RNG.normal(size=(30, 4)).astype("float32")
    y = RNG.normal(size=(30, 3)).astype("float32")
    theirs, ours = _pair(_dense_model)
    expected = theirs.fit(_NumBatches(x, y), epochs=2, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    history = exp.fit(_NumBatches(x, y), epochs=2, shuffle=False).history
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-5)
    assert _max_diff(theirs, exp.model) < 1e-5


def test_terminate_on_nan_acts_before_kdist_guard_as_in_fit(tmp_path):
    # keras/src/callbacks/terminate_on_nan_test.py: infinite targets, a graceful stop.
    def small() -> keras.Model:
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    x = np.array([[1.0], [2.0]])
    y = np.array([[np.inf], [np.inf]])
    args = dict(epochs=2, batch_size=1, shuffle=False)
    theirs, ours = _pair(small)
    expected = theirs.fit(
        x, y, callbacks=[keras.callbacks.TerminateOnNaN()], verbose=0, **args
    ).history
    for overrides in (["callbacks=minimal"], ["callbacks=default"]):  # the default: backups
        exp = _experiment(tmp_path / overrides[0], *overrides)
        exp.build_model(model=_pair(small)[1])
        history = exp.fit(x, y, callbacks=[keras.callbacks.TerminateOnNaN()], **args).history
        assert len(history["loss"]) == len(expected["loss"])
        assert not np.isfinite(history["loss"]).any()
    # Without a TerminateOnNaN, kdist's refusal of non-finite data stays.
    exp = _experiment(tmp_path / "refused")
    exp.build_model(model=ours)
    with pytest.raises(ConfigError, match="NaN or infinite"):
        exp.fit(x, y, **args)


class ExtraLog(keras.Sequential):
    """keras/src/trainers/trainer_test.py's CustomTrainTestStepModel: one more log."""

    def train_step(self, data):
        logs = super().train_step(data)
        logs["my_custom_metric"] = 10.0
        return logs


class OwnLoss(keras.Sequential):
    """A `train_step` that logs `{"my_loss": loss}` and keeps no metric tracker."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(self(x, training=True) - y))
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        return {"my_loss": loss}


@pytest.mark.parametrize("kind", [ExtraLog, OwnLoss])
def test_a_custom_train_step_logs_what_it_returns_as_in_fit(tmp_path, kind):
    def make() -> keras.Model:
        model = kind([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    x = RNG.normal(size=(40, 4)).astype("float32")
    y = RNG.normal(size=(40, 3)).astype("float32")
    theirs, ours = _pair(make)
    expected = theirs.fit(x, y, epochs=2, shuffle=False, verbose=0).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    history = exp.fit(x, y, epochs=2, shuffle=False).history
    assert sorted(history) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(history[name], values, rtol=1e-5)


def test_keras_max_epochs_and_max_steps_per_epoch_limit_fit(tmp_path):
    # keras/src/trainers/trainer_test.py: keras.config.set_max_epochs(2) and
    # set_max_steps_per_epoch(3) cap a fit of 5 epochs of 10 batches.
    x = RNG.normal(size=(80, 4)).astype("float32")
    y = RNG.normal(size=(80, 3)).astype("float32")
    theirs, ours = _pair(_dense_model)
    keras.config.set_max_epochs(2)
    keras.config.set_max_steps_per_epoch(3)
    try:
        with pytest.warns(UserWarning, match="Limiting"):
            expected = theirs.fit(x, y, batch_size=8, epochs=5, shuffle=False, verbose=0)
        exp = _experiment(tmp_path)
        exp.build_model(model=ours)
        with pytest.warns(UserWarning, match="Limiting"):
            history = exp.fit(x, y, batch_size=8, epochs=5, shuffle=False)
    finally:
        keras.config.set_max_epochs(None)
        keras.config.set_max_steps_per_epoch(None)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-5)
    assert int(exp.model.optimizer.iterations) == 6
    assert _max_diff(theirs, exp.model) < 1e-5


def test_predict_and_evaluate_read_a_generator_to_its_end_and_a_pydataset_by_num_batches(
    tmp_path,
):
    # keras/src/trainers/trainer_test.py: test_predict_generator (no `steps`).
    x = RNG.normal(size=(30, 4)).astype("float32")
    y = RNG.normal(size=(30, 3)).astype("float32")
    theirs, ours = _pair(_dense_model)
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)

    def features():
        for start in range(0, 30, 8):
            yield (x[start : start + 8],)

    with pytest.warns(UserWarning, match="ran out of data"):  # Keras's, at the end
        expected = theirs.predict(features(), verbose=0)
    np.testing.assert_allclose(exp.predict(features()), expected, rtol=1e-6)
    np.testing.assert_allclose(
        exp.evaluate(_NumBatches(x, y)), theirs.evaluate(_NumBatches(x, y), verbose=0), rtol=1e-6
    )


class _FailOnce(keras.callbacks.Callback):
    """Raises once, after the 4th batch of epoch 2 (an interrupted `fit`)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.epoch = True, 0

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if self.armed and self.epoch == 2 and batch == 3:
            self.armed = False
            raise RuntimeError("interrupted")


def test_a_second_fit_after_an_interrupted_one_restores_backup_and_restore_as_fit(tmp_path):
    # A user's own keras.callbacks.BackupAndRestore across two `fit` calls of one
    # Experiment: the second starts the restored epoch at its data's start, as Keras's
    # `fit` does (kdist started it 4 batches late: 1.2e-3 from Keras's weights).
    x = RNG.normal(size=(80, 4)).astype("float32")
    y = RNG.normal(size=(80, 3)).astype("float32")
    args = dict(epochs=4, batch_size=8, shuffle=False)

    def twice(fit: object, folder: Path) -> object:
        fail = _FailOnce()
        callbacks = lambda: [keras.callbacks.BackupAndRestore(str(folder)), fail]  # noqa: E731
        with pytest.raises(RuntimeError, match="interrupted"):
            fit(x, y, callbacks=callbacks(), **args)  # type: ignore[operator]
        return fit(x, y, callbacks=callbacks(), **args).history  # type: ignore[operator]

    theirs, ours = _pair(_dense_model)
    expected = twice(functools.partial(theirs.fit, verbose=0), tmp_path / "keras")
    exp = _experiment(tmp_path / "run")
    exp.build_model(model=ours)
    history = twice(exp.fit, tmp_path / "kdist")
    assert history == expected
    assert _max_diff(theirs, ours) == 0


def test_a_model_made_in_a_mirrored_scope_trains_under_that_strategy_as_fit(tmp_path):
    # Keras's `fit` trains a model under the strategy it was made in; kdist does the same
    # where that strategy is the config's kind on the same devices: a layer Keras cannot
    # deserialize trains with no rebuild, and the user's own object learns.
    class Unregistered(keras.layers.Layer):
        def __init__(self, units: int) -> None:  # no get_config for `units`
            super().__init__()
            self.dense = keras.layers.Dense(units)

        def call(self, inputs: tf.Tensor) -> tf.Tensor:
            return self.dense(inputs)

    exp = _experiment(tmp_path / "run", "strategy=mirrored", "runtime.logical_devices=2")
    strategy = tf.distribute.MirroredStrategy(list(exp.strategy.extended.worker_devices))
    x = RNG.normal(size=(64, 4)).astype("float32")
    y = RNG.normal(size=(64, 1)).astype("float32")

    def make() -> keras.Model:
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), Unregistered(3), keras.layers.Dense(1)])
            model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return model

    theirs, ours = _pair(make)
    args = dict(epochs=2, batch_size=16, shuffle=False)
    expected = theirs.fit(x, y, verbose=0, **args).history
    assert exp.build_model(model=ours) is ours
    assert exp.strategy is strategy
    history = exp.fit(x, y, **args).history
    assert history == expected
    assert _max_diff(theirs, ours) == 0


def _optional_input_model() -> keras.Model:
    # keras/src/models/model_test.py's `_get_model_optional_inputs`
    class OptionalInput(keras.layers.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x: tf.Tensor, o: tf.Tensor | None = None) -> tf.Tensor:
            return self.dense(x if o is None else x + o)

    x = keras.Input((2,), name="x")
    o = keras.Input((2,), name="o", optional=True)
    model = keras.Model({"x": x, "o": o}, OptionalInput()(x, o))
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_an_optional_input_given_as_none_trains_as_in_fit(tmp_path):
    x = {"x": RNG.normal(size=(12, 2)).astype("float32"), "o": None}
    y = RNG.normal(size=(12, 2)).astype("float32")
    theirs, ours = _pair(_optional_input_model)
    args = dict(epochs=2, batch_size=4, shuffle=False, validation_split=0.25)
    expected = theirs.fit(x, y, verbose=0, **args).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    assert exp.fit(x, y, **args).history == expected
    assert _max_diff(theirs, ours) == 0
    np.testing.assert_array_equal(exp.predict(x), theirs.predict(x, verbose=0))
    assert exp.evaluate(x, y) == theirs.evaluate(x, y, verbose=0)


def test_a_required_input_given_as_none_is_refused_as_in_fit(tmp_path):
    # keras/src/models/functional_test.py's test_required_none_raises_in_fit
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="not optional"), warnings.catch_warnings():
        # Keras warns first ("The structure of `inputs` doesn't match"), as Keras's own
        # pytest settings ignore (UserWarning)
        warnings.simplefilter("ignore", UserWarning)
        model.fit([None], np.ones((4, 1)), epochs=1, verbose=0)
    exp = _experiment(tmp_path)
    exp.build_model(model=model)
    with pytest.raises(ValueError, match="not optional"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras's own, as above
        exp.fit([None], np.ones((4, 1)), epochs=1)


def test_an_uncompiled_model_made_outside_the_scope_is_compiled_from_the_config(tmp_path):
    # Its variables were made outside the scope: kdist's optimizer is made and built
    # there too (in the scope: "colocate_vars_with must only be passed a variable
    # created in this tf.distribute.Strategy.scope()").
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    before = [np.array(w) for w in model.get_weights()]
    exp = _experiment(tmp_path, "optimizer=adam")
    assert exp.build_model(model=model) is model
    x = RNG.normal(size=(64, 4)).astype("float32")
    history = exp.fit(x, RNG.integers(0, 3, 64), epochs=2, batch_size=16).history
    assert len(history["loss"]) == 2
    assert int(model.optimizer.iterations.numpy()) == 8
    assert (
        max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), before, strict=True))
        > 0
    )


def test_a_callbacks_verbose_lines_reach_the_log_when_interactive_logging_is_off(tmp_path, caplog):
    # keras/src/callbacks/learning_rate_scheduler_test.py's test_verbose_logging: Keras's
    # `print_msg` logs through absl, whose logger kdist had set to WARNING.
    from keras.src.utils import io_utils

    model = _dense_model()
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch: 0.5, verbose=1)
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    io_utils.disable_interactive_logging()
    io_utils.set_logging_verbosity("INFO")  # as Keras's test does, before the Experiment
    try:
        exp = _experiment(tmp_path)
        exp.build_model(model=model)
        with caplog.at_level(logging.INFO):
            x = RNG.normal(size=(8, 4)).astype("float32")
            exp.fit(x, RNG.normal(size=(8, 3)).astype("float32"), callbacks=[scheduler])
    finally:
        io_utils.enable_interactive_logging()
        absl_logging.set_verbosity(verbosity)
    assert "LearningRateScheduler setting learning rate to 0.5" in caplog.text
    # TensorFlow's own INFO lines through absl stay below kdist's level (runtime.tf_log_level)
    path = "/site-packages/tensorflow/python/checkpoint/checkpoint.py"
    record = logging.LogRecord("absl", logging.INFO, path, 1, "Sharding callback", None, None)
    assert not logging.getLogger("absl").filter(record)


@pytest.mark.parametrize("return_dict", [False, True])
def test_evaluate_returns_a_custom_test_steps_logs_as_evaluate(tmp_path, return_dict):
    # keras/src/trainers/trainer_test.py's test_evaluate_with_custom_test_step
    class CustomTestStep(keras.Sequential):
        def test_step(self, data: object) -> dict[str, object]:
            logs = super().test_step(data)
            logs["my_custom_metric"] = 5.0
            return logs

    def make() -> keras.Model:
        model = CustomTestStep([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss="mse", metrics=[keras.metrics.MeanSquaredError()])
        return model

    got, expected = _evaluate_both(tmp_path, make, return_dict=return_dict)
    assert got == expected
    assert len(got) == 3


def test_evaluate_of_a_model_compiled_with_jit_runs_it_through_xla_as_evaluate(tmp_path):
    # keras/src/callbacks/swap_ema_weights_test.py: fit's last validation (XLA, the
    # model's jit_compile=True) equals a later evaluate only if evaluate runs XLA too.
    x = RNG.normal(size=(10, 3)).astype("float32")
    y = keras.utils.to_categorical(RNG.integers(0, 2, 10), 2)

    def make() -> keras.Model:
        model = keras.Sequential([keras.layers.Dense(2, kernel_initializer="ones")])
        model.compile(
            optimizer=keras.optimizers.SGD(use_ema=True, ema_momentum=0.9),
            loss="mse",
            metrics=[keras.metrics.MeanSquaredError()],
            jit_compile=True,
        )
        return model

    args = dict(epochs=2, callbacks=[keras.callbacks.SwapEMAWeights()], validation_data=(x, y))
    theirs, ours = _pair(make)
    expected = theirs.fit(x, y, verbose=0, **args).history["val_mean_squared_error"][-1]
    assert theirs.evaluate(x, y, verbose=0, return_dict=True)["mean_squared_error"] == expected
    exp = _experiment(tmp_path / "fit")
    exp.build_model(model=ours)
    assert exp.fit(x, y, **args).history["val_mean_squared_error"][-1] == expected
    exp = _experiment(tmp_path / "evaluate")  # a new Experiment: the model is not bound
    exp.build_model(model=ours)
    assert exp.evaluate(x, y, return_dict=True)["mean_squared_error"] == expected


class _BatchHooks(keras.callbacks.Callback):
    """Records the test- and predict-batch hooks: (hook, batch, log keys or shapes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int, object]] = []

    def on_test_batch_begin(self, batch: int, logs: object = None) -> None:
        self.seen.append(("test_begin", batch, None))

    def on_test_batch_end(self, batch: int, logs: object = None) -> None:
        self.seen.append(("test_end", batch, sorted(logs or {})))  # type: ignore[call-overload]

    def on_predict_batch_begin(self, batch: int, logs: object = None) -> None:
        self.seen.append(("predict_begin", batch, None))

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        shape = tuple(np.shape((logs or {})["outputs"]))
        self.seen.append(("predict_end", batch, shape))


def test_evaluate_and_predict_call_the_batch_hooks_per_steps_per_execution_as_keras(tmp_path):
    # keras/src/trainers/trainer_test.py's test_steps_per_execution_steps_count_without_training
    def make() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(loss="mse", metrics=["mae"], steps_per_execution=3)
        return model

    x = RNG.normal(size=(100, 4)).astype("float32")
    y = RNG.normal(size=(100, 1)).astype("float32")
    theirs, ours = _pair(make)
    expected = _BatchHooks()
    want_predict = theirs.predict(x, batch_size=16, callbacks=[expected], verbose=0)
    want_evaluate = theirs.evaluate(x, y, batch_size=16, callbacks=[expected], verbose=0)
    got = _BatchHooks()
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    np.testing.assert_array_equal(exp.predict(x, batch_size=16, callbacks=[got]), want_predict)
    assert exp.evaluate(x, y, batch_size=16, callbacks=[got]) == want_evaluate
    assert got.seen == expected.seen
    assert [b for h, b, _ in got.seen if h == "predict_begin"] == [0, 3, 6]


def test_an_unbuilt_subclassed_model_with_variables_made_outside_trains_as_fit(tmp_path):
    # keras/src/trainers/trainer_test.py's test_callbacks_can_update_state_at_batch_boundary:
    # weights made in __init__, a layer built on the first call. kdist built the optimizer
    # on the first ones only ("No gradients provided for any variable").
    class CounterModel(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.counter = self.add_weight(shape=(), initializer="zeros")
            self.dense = keras.layers.Dense(3)

        def call(self, x: tf.Tensor) -> tf.Tensor:
            return self.dense(x)

    def make() -> keras.Model:
        model = CounterModel()
        model.compile(optimizer="sgd", loss="mse")
        return model

    x = RNG.normal(size=(8, 3)).astype("float32")
    y = RNG.normal(size=(8, 3)).astype("float32")
    theirs, ours = _pair(make)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: no gradient for `counter`
        expected = theirs.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0).history
        exp = _experiment(tmp_path)
        exp.build_model(model=ours)
        assert exp.fit(x, y, epochs=2, batch_size=4, shuffle=False).history == expected
    assert _max_diff(theirs, ours) == 0


def test_a_list_for_a_dict_of_inputs_is_taken_in_name_order_with_keras_warning(tmp_path):
    # keras/src/models/functional_test.py's test_warning_for_mismatched_inputs_structure
    i1, i2 = keras.Input((2,), name="i1"), keras.Input((2,), name="i2")
    model = keras.Model({"i1": i1, "i2": i2}, keras.layers.Concatenate()([i1, i2]))
    x = [RNG.normal(size=(3, 2)).astype("float32"), RNG.normal(size=(3, 2)).astype("float32")]

    def predicting(predict: object) -> tuple[np.ndarray, list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outputs = predict(x)  # type: ignore[operator]
        said = [str(w.message) for w in caught if "structure of `inputs`" in str(w.message)]
        return outputs, said

    expected, keras_said = predicting(functools.partial(model.predict, verbose=0))
    exp = _experiment(tmp_path)
    exp.build_model(model=model)
    outputs, said = predicting(exp.predict)
    np.testing.assert_array_equal(outputs, expected)
    assert len(said) == len(keras_said) == 1


def test_ragged_tensors_train_and_predict_as_in_fit(tmp_path):
    # keras/src/trainers/trainer_test.py's test_trainer_with_raggeds
    def loss_fn(y: object, y_pred: object, sample_weight: object = None) -> float:
        return 0.0

    def make() -> keras.Model:
        ragged = keras.Input(shape=[None], ragged=True)
        model = keras.Model(ragged, keras.layers.Lambda(lambda t: t * 2)(ragged))
        model.compile(optimizer="adam", loss=loss_fn)
        return model

    x = tf.ragged.constant([[1.0], [2.0, 3.0], [4.0, 5.0, 6.0]])
    theirs, ours = _pair(make)
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: no trainable weights
        expected = theirs.fit(x, x, epochs=2, verbose=0).history
        assert exp.fit(x, x, epochs=2).history == expected
    outputs = exp.predict(x, batch_size=2)
    assert isinstance(outputs, tf.RaggedTensor)
    assert outputs.to_list() == theirs.predict(x, batch_size=2, verbose=0).to_list()
    with pytest.raises(ConfigError, match="validation_split"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        exp.fit(x, x, validation_split=0.5)


@pytest.mark.parametrize("kind", ["tf", "scipy"])
def test_a_generator_of_sparse_batches_trains_as_in_fit(tmp_path, kind):
    # keras/src/trainers/trainer_test.py's test_fit_sparse: tf.SparseTensor or SciPy
    # sparse batches stay sparse (kdist read them as NumPy: "found ndim=1").
    scipy_sparse = pytest.importorskip("scipy.sparse")

    def batches() -> object:
        rng = np.random.default_rng(0)
        for _ in range(4):
            dense = (rng.random((2, 4)) * (rng.random((2, 4)) > 0.5)).astype("float32")
            x = scipy_sparse.csr_matrix(dense) if kind == "scipy" else tf.sparse.from_dense(dense)
            yield x, rng.random((2, 3)).astype("float32")

    def make() -> keras.Model:
        model = keras.Sequential([keras.Input((4,), sparse=True), keras.layers.Dense(3)])
        model.compile(optimizer="adagrad", loss="mse")
        return model

    theirs, ours = _pair(make)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: shuffle ignored, ran out
        expected = theirs.fit(batches(), verbose=0).history
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    assert exp.fit(batches(), epochs=1).history == expected
    assert _max_diff(theirs, ours) == 0


def test_a_model_made_in_another_single_host_strategy_trains_under_it_as_fit(tmp_path, caplog):
    # keras/src/callbacks/swap_ema_weights_test.py's ..._with_tf_distribute: a model made
    # in a MirroredStrategy's scope, routed with strategy=one_device ("Mixing different
    # tf.distribute.Strategy objects").
    exp = _experiment(tmp_path)
    strategy = tf.distribute.MirroredStrategy([exp.strategy.extended.worker_devices[0]])

    def make() -> keras.Model:
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            model.compile(optimizer="sgd", loss="mse")
        return model

    x = RNG.normal(size=(16, 4)).astype("float32")
    y = RNG.normal(size=(16, 3)).astype("float32")
    theirs, ours = _pair(make)
    expected = theirs.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0).history
    exp.build_model(model=ours)
    assert exp.strategy is strategy
    assert "trained under it, as Keras's fit trains it" in caplog.text
    assert exp.fit(x, y, epochs=2, batch_size=4, shuffle=False).history == expected
    assert _max_diff(theirs, ours) == 0


@pytest.mark.parametrize("method", ["evaluate", "predict"])
def test_a_callback_stops_evaluate_or_predict_on_an_endless_generator_as_in_keras(tmp_path, method):
    # keras/src/trainers/trainer_test.py's test_stop_loop (evaluate, predict)
    gerund, hook = {"evaluate": ("evaluating", "test"), "predict": ("predicting", "predict")}[
        method
    ]

    class Stopper(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.counter = 0
            setattr(self, f"on_{hook}_batch_end", self.batch_end)

        def batch_end(self, *args: object, **kwargs: object) -> None:
            self.counter += 1
            if self.counter == 5:
                setattr(self.model, f"stop_{gerund}", True)

    def endless() -> object:
        while True:
            x = np.ones((2, 2), "float32")
            yield (x,) if method == "predict" else (x, np.ones((2, 3), "float32"))

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mse"])
    expected = Stopper()
    getattr(model, method)(endless(), callbacks=[expected], verbose=0)
    got = Stopper()
    exp = _experiment(tmp_path)
    exp.build_model(model=model)
    getattr(exp, method)(endless(), callbacks=[got])
    assert got.counter == expected.counter == 5


def test_a_generator_with_an_optional_input_left_out_trains_as_in_fit(tmp_path):
    # keras/src/models/model_test.py's test_functional_optional_inputs_generator
    def batches(with_y: bool = True) -> object:
        for i in range(4):
            x = {"x": np.full((2, 2), i, "float32"), "o": None}
            yield (x, np.ones((2, 2), "float32")) if with_y else (x,)

    theirs, ours = _pair(_optional_input_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: shuffle ignored
        expected = theirs.fit(batches(), verbose=0).history
        want_evaluate = theirs.evaluate(batches(), verbose=0)
        want_predict = theirs.predict(batches(False), verbose=0)
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    assert exp.fit(batches(), epochs=1).history == expected
    assert exp.evaluate(batches()) == want_evaluate
    np.testing.assert_array_equal(exp.predict(batches(False)), want_predict)


class _Calls(keras.callbacks.Callback):
    """Records each epoch's train-batch hooks: (epoch, begin batch, end batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, str, int]] = []
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        self.seen.append((self.epoch, "begin", batch))

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.seen.append((self.epoch, "end", batch))


@pytest.mark.parametrize("per_epoch, per_call", [(8, 2), (5, 2), (8, 1)])
def test_steps_per_epoch_below_the_data_makes_keras_epochs(tmp_path, per_epoch, per_call):
    # keras/src/trainers/trainer_test.py's test_steps_per_execution_steps_per_epoch: 10
    # batches; an epoch stops where a pass of the data ends, the next reads it afresh.
    def make() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=per_call)
        return model

    x = RNG.normal(size=(80, 4)).astype("float32")
    y = RNG.normal(size=(80, 1)).astype("float32")
    args = dict(batch_size=8, epochs=3, steps_per_epoch=per_epoch, shuffle=False)
    theirs, ours = _pair(make)
    expected = _Calls()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras: "ran out of data"
        history = theirs.fit(x, y, callbacks=[expected], verbose=0, **args).history
    got = _Calls()
    exp = _experiment(tmp_path)
    exp.build_model(model=ours)
    assert exp.fit(x, y, callbacks=[got], **args).history == history
    assert got.seen == expected.seen
    assert _max_diff(theirs, ours) == 0


def test_evaluate_flattens_a_custom_test_steps_nested_logs_as_evaluate(tmp_path):
    # tests/corpus' custom_train_step: a test_step returning `compile_metrics` nested;
    # Keras's evaluate flattens the logs (`pythonify_logs`).
    class NestedLogs(keras.Sequential):
        def test_step(self, data: object) -> dict[str, object]:
            super().test_step(data)
            return {m.name: m.result() for m in self.metrics}

    def make() -> keras.Model:
        model = NestedLogs([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        return model

    got, expected = _evaluate_both(tmp_path, make, return_dict=True)
    assert got == expected
