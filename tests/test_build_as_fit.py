"""Issue 37, the model half: kdist builds, checks and compiles the user's model as `fit` does.

- A model is built on the first batch of the data `fit` is given, inside the strategy's
  scope, never on the config's data before (cases 1, 2), and a model with no `call` whose
  layers build on their first call (a SimSiam-style model with augmentation layers) is
  built through its own `train_step` (case 5), also from arrays with no targets.
- The compiled model is the source of truth: the targets are checked against the loss the
  user compiled with (case 3); kdist's default metrics apply only where Keras can take them
  (case 9); a label outside the model's classes names the model's class count (issue 38).

Each case runs on one device and under mirrored (2 logical CPUs); where it is
deterministic, the weights equal Keras's `model.fit` from the same initial weights.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import compose

import kdist
from kdist.config import ConfigError
from kdist.engine.building import optimizer_steps

EXAMPLES, BATCH, EPOCHS = 64, 16, 2
STRATEGIES = ["one_device", "mirrored"]


class _Initial(keras.callbacks.Callback):
    """The weights the model starts training from (it may be built by `fit` itself)."""

    weights: list[np.ndarray]

    def on_train_begin(self, logs: Any = None) -> None:
        self.weights = [np.array(w) for w in self.model.get_weights()]


def _experiment(tmp_path: Path, strategy: str, extra: list[str] = ()) -> kdist.Experiment:
    return kdist.Experiment(
        compose(
            [
                f"strategy={strategy}",
                "trainer.verbose=0",
                "trainer.validation=false",
                "trainer.steps_per_execution=2",
                "callbacks=minimal",
                "optimizer=adam",
                "optimizer.learning_rate=0.01",
                f"run_dir={tmp_path / strategy}",
                *extra,
            ]
        )
    )


def _fit_reference(
    make: Callable[[], keras.Model],
    compile_kwargs: dict[str, Any],
    initial: list[np.ndarray],
    x: Any,
    y: Any,
) -> keras.Model:
    """The same model trained by Keras's `fit` on one device, from `initial`."""
    model = make()
    model.compile(**compile_kwargs)
    model(x[:1])
    model.set_weights(initial)
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def _assert_same(ours: list[np.ndarray], theirs: list[np.ndarray], initial: list[np.ndarray]):
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, initial, strict=True))
    assert moved > 1e-3, "training did not change the weights"
    assert [w.shape for w in ours] == [w.shape for w in theirs]
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def _classes(seed: int = 0, shape: tuple[int, ...] = (8,)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(EXAMPLES, *shape)).astype("float32")
    flat = x.reshape(EXAMPLES, -1)
    y = (flat[:, 0] > 0).astype("int64") + (flat[:, 1] > 0.5).astype("int64")
    return x, y


# -- case 1: a subclassed model with its own train_step, made by `model.build(shape)` -------


class OwnStep(keras.Model):
    """No `build()`: `model.build(shape)` marks it built, its layers are not (Keras warns)."""

    def __init__(self) -> None:
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.head = keras.layers.Dense(3)

    def call(self, x: Any) -> Any:
        return self.head(self.hidden(self.flatten(x)))

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        return self.compute_metrics(x, y, self(x), None)


def _own_step() -> keras.Model:
    model = OwnStep()
    with pytest.warns(UserWarning, match="does not have a `build\\(\\)` method"):
        model.build((None, 6, 6, 1))
    return model


_OWN_COMPILE = {
    "loss": "sparse_categorical_crossentropy",
    "metrics": ["accuracy"],
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_model_built_by_shape_with_unbuilt_layers_trains_as_fit(tmp_path: Path, strategy: str):
    x, y = _classes(shape=(6, 6, 1))
    exp = _experiment(tmp_path, strategy)
    keras.utils.set_random_seed(1)
    with exp.strategy.scope():
        model = _own_step()
        model.compile(optimizer=keras.optimizers.Adam(0.01), **_OWN_COMPILE)
    exp.build_model(model=model)  # the regression: "colocate_vars_with must only be passed..."
    initial = _Initial()
    exp.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, callbacks=[initial])
    assert exp.num_replicas == (2 if strategy == "mirrored" else 1)
    assert optimizer_steps(exp.model) == EPOCHS * EXAMPLES // BATCH
    reference = _fit_reference(
        _own_step, {"optimizer": keras.optimizers.Adam(0.01), **_OWN_COMPILE}, initial.weights, x, y
    )
    _assert_same(exp.model.get_weights(), reference.get_weights(), initial.weights)


# -- case 2: an unbuilt model is built on the data given to fit, not on the config's ------


class OneDense(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(4)

    def call(self, x: Any) -> Any:
        return self.dense(x)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_unbuilt_model_is_built_on_the_data_given_to_fit(tmp_path: Path, strategy: str):
    x, y = _classes()
    exp = _experiment(tmp_path, strategy)  # the config's data: 8x8x1 digits
    keras.utils.set_random_seed(1)
    with exp.strategy.scope():
        model = OneDense()
    exp.build_model(model=model)
    assert not model.dense.built  # not on the digits: fit has not been given its data
    initial = _Initial()
    exp.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, callbacks=[initial])
    assert tuple(exp.model.dense.kernel.shape) == (8, 4)
    reference = _fit_reference(
        OneDense,
        {
            "optimizer": keras.optimizers.Adam(0.01),
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "metrics": ["accuracy"],
        },
        initial.weights,
        x,
        y,
    )
    _assert_same(exp.model.get_weights(), reference.get_weights(), initial.weights)


# -- case 3: the targets are checked against the loss the model was compiled with ---------


def _binary() -> keras.Model:
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_compiled_loss_not_the_configs_decides_the_targets(tmp_path: Path, strategy: str):
    x, labels = _classes()
    y = (labels > 0).astype("float32")  # float 0/1 labels: binary_crossentropy's
    exp = _experiment(tmp_path, strategy)  # trainer.loss is the default sparse one
    keras.utils.set_random_seed(1)
    # Made and compiled outside the scope, as keras.io's notebooks do: rebuilt in the
    # scope of a distributed strategy; on one device trained as it is, as `model.fit`
    # trains it (the test's own model object is the one that learns).
    model = _binary()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"]
    )
    built = exp.build_model(model=model)
    assert (built is model) == (strategy == "one_device")
    initial = _Initial()
    history = exp.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, callbacks=[initial])
    assert "accuracy" in history.history
    reference = _fit_reference(
        _binary,
        {
            "optimizer": keras.optimizers.Adam(0.01),
            "loss": "binary_crossentropy",
            "metrics": ["accuracy"],
        },
        initial.weights,
        x,
        y,
    )
    _assert_same(exp.model.get_weights(), reference.get_weights(), initial.weights)


def test_float_targets_for_a_compiled_sparse_loss_name_the_compile(tmp_path: Path):
    x, labels = _classes()
    exp = _experiment(tmp_path, "one_device")
    with exp.strategy.scope():
        model = _binary()
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy())
    exp.build_model(model=model)
    with pytest.raises(ConfigError, match=r"compiled loss.*integer class ids.*float32"):
        exp.fit(x, labels.astype("float32"), batch_size=BATCH)


def test_a_label_outside_the_models_classes_states_its_class_count(tmp_path: Path):
    x, labels = _classes()
    labels[:3] = -1  # the data's own count would say 0..1 (its largest label is 1)
    labels[labels == 2] = 1
    exp = _experiment(tmp_path, "one_device")
    with exp.strategy.scope():
        inputs = keras.Input((8,))
        model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    exp.build_model(model=model)
    with pytest.raises(ConfigError, match=r"y: has 3 label\(s\) outside \[0, 3\): -1.*0\.\.2"):
        exp.fit(x, labels, batch_size=BATCH)


# -- case 5: no `call`, layers built on their first call (SimSiam-style) -------------------


class SimSiam(keras.Model):
    """keras.io's SimSiam in small: augmentation layers and its own train_step, no `call`."""

    def __init__(self) -> None:
        super().__init__()
        self.augment = keras.Sequential(
            [keras.layers.RandomFlip("horizontal"), keras.layers.RandomTranslation(0.1, 0.1)]
        )
        self.encoder = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(8)])
        self.predictor = keras.Sequential([keras.layers.Dense(8)])
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.loss_tracker]

    def train_step(self, data: Any) -> dict[str, Any]:
        images = data[0] if isinstance(data, tuple) else data
        one, two = self.augment(images, training=True), self.augment(images, training=True)
        with tf.GradientTape() as tape:
            z1, z2 = self.encoder(one), self.encoder(two)
            p1, p2 = self.predictor(z1), self.predictor(z2)
            loss = 0.5 * (
                tf.reduce_mean(keras.losses.cosine_similarity(p1, tf.stop_gradient(z2)))
                + tf.reduce_mean(keras.losses.cosine_similarity(p2, tf.stop_gradient(z1)))
            )
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_model_without_call_is_built_through_its_train_step(tmp_path: Path, strategy: str):
    images = np.random.default_rng(0).uniform(size=(EXAMPLES, 6, 6, 1)).astype("float32")
    exp = _experiment(tmp_path, strategy)
    with exp.strategy.scope():
        model = SimSiam()
        model.compile(optimizer=keras.optimizers.Adam(0.01))
    exp.build_model(model=model)
    history = exp.fit(images, batch_size=BATCH, epochs=EPOCHS)  # arrays, no y
    assert tuple(exp.model.encoder.layers[-1].kernel.shape) == (36, 8)
    assert optimizer_steps(exp.model) == EPOCHS * EXAMPLES // BATCH
    losses = history.history["loss"]
    assert len(losses) == EPOCHS and all(np.isfinite(losses))
    assert losses[-1] < losses[0]  # the negative cosine similarity falls


class ProbeAfterUpdate(keras.Model):
    """keras.io's semi-supervised SimCLR in small: its step updates the encoder with one
    optimizer, then builds and updates a linear probe with a second one (no `call`)."""

    def __init__(self) -> None:
        super().__init__()
        # As there: the encoder is made on an Input (built), the probe is not.
        self.encoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        self.probe = keras.Sequential([keras.layers.Dense(3)])
        self.probe_loss = keras.metrics.Mean(name="probe_loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.probe_loss]

    def compile(self, encoder_optimizer: Any, probe_optimizer: Any) -> None:
        super().compile()
        self.encoder_optimizer, self.probe_optimizer = encoder_optimizer, probe_optimizer

    def train_step(self, data: Any) -> dict[str, Any]:
        images, labels = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.encoder(images)))
        variables = self.encoder.trainable_variables
        gradients = tape.gradient(loss, variables)
        self.encoder_optimizer.apply_gradients(zip(gradients, variables, strict=True))
        with tf.GradientTape() as tape:
            logits = self.probe(tf.stop_gradient(self.encoder(images)))
            probe_loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            )
        variables = self.probe.trainable_variables
        gradients = tape.gradient(probe_loss, variables)
        self.probe_optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self.probe_loss.update_state(probe_loss)
        return {"probe_loss": self.probe_loss.result()}


def test_a_model_without_call_whose_step_builds_a_layer_after_an_update(tmp_path: Path):
    # The build traces the step with the optimizers' updates skipped (an update needs a
    # replica context the symbolic trace has not): the probe after the first update is
    # built too. Under mirrored such a step is still refused in one line (see the corpus's
    # simclr).
    x, y = _classes()
    exp = _experiment(tmp_path, "one_device")
    with exp.strategy.scope():
        model = ProbeAfterUpdate()
        model.compile(keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01))
    exp.build_model(model=model)
    history = exp.fit(x, y, batch_size=BATCH, epochs=EPOCHS)
    assert tuple(exp.model.probe.layers[-1].kernel.shape) == (4, 3)
    assert optimizer_steps(exp.model) == EPOCHS * EXAMPLES // BATCH
    assert all(np.isfinite(history.history["probe_loss"]))


# -- case 9: kdist's default metrics where Keras cannot take them --------------------------


def _dict_outputs() -> keras.Model:
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(
        inputs, {"cls": keras.layers.Dense(3)(hidden), "aux": keras.layers.Dense(1)(hidden)}
    )


_NO_GRADIENT = pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")


@_NO_GRADIENT
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_default_metric_a_dict_output_cannot_take_is_left_out(
    tmp_path: Path, strategy: str, caplog: pytest.LogCaptureFixture
):
    x, y = _classes()
    loss = "{_target_: keras.losses.SparseCategoricalCrossentropy, from_logits: true}"
    exp = _experiment(tmp_path, strategy, [f"trainer.loss={{cls: {loss}, aux: null}}"])
    keras.utils.set_random_seed(1)
    with exp.strategy.scope():
        model = _dict_outputs()
    with caplog.at_level(logging.INFO, logger="kdist"):
        exp.build_model(model=model)
    left_out = [r.getMessage() for r in caplog.records if "is left out" in r.getMessage()]
    assert len(left_out) == 1 and "trainer.metrics" in left_out[0]
    initial = _Initial()
    history = exp.fit(
        x, {"cls": y}, batch_size=BATCH, epochs=EPOCHS, shuffle=False, callbacks=[initial]
    )
    assert set(history.history) == {"loss"}
    reference = _fit_reference(
        _dict_outputs,
        {
            "optimizer": keras.optimizers.Adam(0.01),
            "loss": {
                "cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                "aux": None,
            },
        },
        initial.weights,
        x,
        {"cls": y},
    )
    _assert_same(exp.model.get_weights(), reference.get_weights(), initial.weights)


class Denoiser(keras.Model):
    """keras.io's diffusion pattern: `compile(loss=...)`, used by its own `train_step` on
    targets it makes itself (noise), no `call`, `fit(images)` with no `y`."""

    def __init__(self) -> None:
        super().__init__()
        self.network = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(36)])
        self.noise_loss = keras.metrics.Mean(name="n_loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.noise_loss]

    def train_step(self, data: Any) -> dict[str, Any]:
        images = keras.layers.Flatten()(data[0] if isinstance(data, tuple) else data)
        noises = tf.random.stateless_normal(tf.shape(images), seed=(1, 2))
        with tf.GradientTape() as tape:
            loss = self.loss(noises, self.network(images + noises))
        grads = tape.gradient(loss, self.network.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.network.trainable_variables, strict=True))
        self.noise_loss.update_state(loss)
        return {"n_loss": self.noise_loss.result()}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_model_with_its_own_step_and_a_compiled_loss_trains_without_y(
    tmp_path: Path, strategy: str
):
    images = np.random.default_rng(0).uniform(size=(EXAMPLES, 6, 6, 1)).astype("float32")
    exp = _experiment(tmp_path, strategy)
    with exp.strategy.scope():
        model = Denoiser()
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.mean_absolute_error)
    exp.build_model(model=model)
    history = exp.fit(images, batch_size=BATCH, epochs=EPOCHS)
    assert optimizer_steps(exp.model) == EPOCHS * EXAMPLES // BATCH
    losses = history.history["n_loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_a_default_metric_is_keyed_to_the_outputs_with_a_classification_loss(tmp_path: Path):
    x, y = _classes()
    loss = "{_target_: keras.losses.SparseCategoricalCrossentropy, from_logits: true}"
    exp = _experiment(tmp_path, "one_device", [f"trainer.loss={{cls: {loss}, aux: mse}}"])
    with exp.strategy.scope():
        model = _dict_outputs()
    exp.build_model(model=model)
    history = exp.fit(x, {"cls": y, "aux": x[:, :1]}, batch_size=BATCH, epochs=1)
    assert "cls_accuracy" in history.history
    assert not any(name.startswith("aux_") and "accuracy" in name for name in history.history)
