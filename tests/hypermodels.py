"""keras-tuner hypermodels for the tests (`model._target_=hypermodels.<name>`).

Each takes the 8x8x1 digits of the default data (10 classes), as keras-tuner's tutorials
write them: `def build_model(hp)`, hyperparameters declared inline, compiled inside.
"""

from __future__ import annotations

import keras
import keras_tuner

INPUT_SHAPE = (8, 8, 1)
CLASSES = 10


def _compile(model: keras.Model, learning_rate: float = 1e-2) -> keras.Model:
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def build_model(hp: keras_tuner.HyperParameters) -> keras.Model:
    """An `hp.Int` and an `hp.Choice`, compiled inside (keras-tuner's getting started)."""
    units = hp.Int("units", min_value=8, max_value=32, step=8)
    activation = hp.Choice("activation", ["relu", "tanh"])
    model = keras.Sequential(
        [
            keras.Input(INPUT_SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(units, activation=activation),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    return _compile(model)


def build_conditional(hp: keras_tuner.HyperParameters) -> keras.Model:
    """A conditional scope: `width` exists only for the `dense` kind."""
    kind = hp.Choice("kind", ["dense", "linear"])
    layers: list[keras.layers.Layer] = [keras.Input(INPUT_SHAPE), keras.layers.Flatten()]
    with hp.conditional_scope("kind", ["dense"]):
        if kind == "dense":
            layers.append(keras.layers.Dense(hp.Int("width", 4, 16, step=4), activation="relu"))
    layers.append(keras.layers.Dense(CLASSES, activation="softmax"))
    return _compile(keras.Sequential(layers))


def build_uncompiled(hp: keras_tuner.HyperParameters, input_shape, num_classes) -> keras.Model:
    """Not compiled: the config's loss, metrics and optimizer apply; the data's shapes are
    passed as to any `model._target_`."""
    units = hp.Int("units", 4, 12, step=4, default=8)
    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Flatten(),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(num_classes, activation="softmax"),
        ]
    )


def build_without_accuracy(hp: keras_tuner.HyperParameters) -> keras.Model:
    """Compiled with a loss and no accuracy (keras.io's regression habit): `objective:
    auto` is then the loss, whatever the config's metrics say."""
    model = build_model(hp)
    model.compile(
        optimizer="adam",
        loss="sparse_categorical_crossentropy",
        metrics=[keras.metrics.SparseTopKCategoricalAccuracy(k=3, name="top3")],
    )
    return model


def build_failing(hp: keras_tuner.HyperParameters) -> keras.Model:
    """Raises for `units=16`, trains for the other values."""
    units = hp.Choice("units", [8, 16])
    if units == 16:
        raise ValueError("16 units are not supported here")
    return build_model(hp)


def build_not_a_model(hp: keras_tuner.HyperParameters) -> str:
    hp.Int("units", 8, 32)
    return "a string"


def build_bad_name(hp: keras_tuner.HyperParameters) -> keras.Model:
    with hp.name_scope("block"):
        hp.Int("units", 8, 32)
    return build_model(hp)


class DigitsHyperModel(keras_tuner.HyperModel):
    """keras-tuner's class form; `width` is a constructor argument from the config."""

    def __init__(self, width: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.width = width

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input(INPUT_SHAPE),
                keras.layers.Flatten(),
                keras.layers.Dense(self.width * hp.Int("factor", 1, 3), activation="relu"),
                keras.layers.Dense(CLASSES, activation="softmax"),
            ]
        )
        return _compile(model, hp.Float("learning_rate", 1e-3, 1e-1, sampling="log"))


# keras-tuner's instance form: `model._target_=hypermodels.digits_hypermodel`.
digits_hypermodel = DigitsHyperModel(width=4)


class BatchSizeHyperModel(keras_tuner.HyperModel):
    """keras-tuner's guide to tuning `fit`: `batch_size` is declared in `fit` (`build`
    declares nothing, so the search's two trials take both batch sizes)."""

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input(INPUT_SHAPE),
                keras.layers.Flatten(),
                keras.layers.Dense(CLASSES, activation="softmax"),
            ]
        )
        return _compile(model)

    def fit(self, hp: keras_tuner.HyperParameters, model: keras.Model, *args, **kwargs):
        return model.fit(*args, batch_size=hp.Choice("batch_size", [16, 32]), **kwargs)


class FitReturnsFloat(keras_tuner.HyperModel):
    """`fit` returns the objective's value itself (keras-tuner: a float is the objective)."""

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        return build_model(hp)

    def fit(self, hp: keras_tuner.HyperParameters, model: keras.Model, *args, **kwargs):
        model.fit(*args, **kwargs)
        return -1.0 - hp.get("units")  # lower is better: the most units win


class FitWithoutModelFit(keras_tuner.HyperModel):
    """A `fit` with a loop of its own, which never calls `model.fit`: refused."""

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        return build_model(hp)

    def fit(self, hp: keras_tuner.HyperParameters, model: keras.Model, *args, **kwargs):
        hp.Int("rounds", 1, 3)
        return 0.5


class FitRaises(keras_tuner.HyperModel):
    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        return build_model(hp)

    def fit(self, hp: keras_tuner.HyperParameters, model: keras.Model, *args, **kwargs):
        raise RuntimeError("no fit today")


def build_slow(hp: keras_tuner.HyperParameters) -> keras.Model:
    """Sleeps `delay` seconds before building (a slow `build_model`); `delay` is its one
    hyperparameter, so a search's two trials take both values."""
    import time

    time.sleep(hp.Choice("delay", [0, 600]))
    return BatchSizeHyperModel().build(hp)
