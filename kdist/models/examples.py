"""Models as Keras users write them: a regressor, a two-output model, a custom `train_step`.

They back the recipes `regression`, `multi_output` and `custom_train_step`, and show
what kdist runs: any model that trains with `fit` (README, "Bring your own Keras model").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

__all__ = ["ClippedClassifier", "clipped_classifier", "regression_mlp", "two_headed"]


def regression_mlp(*, input_shape: Sequence[int], units: Sequence[int] = (64,)) -> keras.Model:
    """An MLP with one linear output, for a float target (`trainer.loss=mse`).

    Args:
        input_shape: shape of one example.
        units: hidden layer widths. Defaults to `(64,)`.
    """
    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    for width in units:
        x = keras.layers.Dense(int(width), activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(1, dtype="float32", name="value")(x))


def two_headed(*, input_shape: Sequence[int], num_classes: int, units: int = 64) -> keras.Model:
    """A shared trunk with two outputs: `class` (logits) and `value` (a float).

    Train it with a loss per output name, e.g. `trainer.loss={class:
    sparse_categorical_crossentropy, value: mse}` (recipe `multi_output`).

    Args:
        input_shape: shape of one example.
        num_classes: classes of the `class` output.
        units: width of the trunk. Defaults to `64`.
    """
    inputs = keras.Input(tuple(input_shape))
    trunk = keras.layers.Dense(int(units), activation="relu")(keras.layers.Flatten()(inputs))
    return keras.Model(
        inputs,
        {
            "class": keras.layers.Dense(num_classes, dtype="float32", name="class")(trunk),
            "value": keras.layers.Dense(1, dtype="float32", name="value")(trunk),
        },
    )


@keras.saving.register_keras_serializable(package="kdist")
class ClippedClassifier(keras.Model):
    """A subclassed classifier with its own `train_step`: gradients clipped by global norm.

    Layers are made in `__init__` without an input shape (kdist builds them from the
    data); the step tracks the gradient norm as a metric, `grad_norm`.

    Args:
        num_classes: output logits.
        units: hidden width. Defaults to `64`.
        clip_norm: the global norm gradients are clipped to. Defaults to `1.0`.
    """

    def __init__(self, num_classes: int, units: int = 64, clip_norm: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.num_classes, self.units, self.clip_norm = num_classes, units, clip_norm
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.logits = keras.layers.Dense(num_classes, dtype="float32")
        self.grad_norm = keras.metrics.Mean(name="grad_norm")

    def call(self, inputs: Any) -> Any:
        return self.logits(self.hidden(self.flatten(inputs)))

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
            scaled = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, self.trainable_variables)
        gradients, norm = tf.clip_by_global_norm(gradients, self.clip_norm)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        self.grad_norm.update_state(norm)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "units": self.units,
            "clip_norm": self.clip_norm,
        }


def clipped_classifier(
    *, num_classes: int, units: int = 64, clip_norm: float = 1.0
) -> ClippedClassifier:
    """`ClippedClassifier(num_classes, units, clip_norm)`, as a `model._target_`."""
    return ClippedClassifier(num_classes, units=units, clip_norm=clip_norm)
