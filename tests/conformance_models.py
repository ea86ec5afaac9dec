"""Models as Keras users write them, for the conformance suite (tests/test_keras_conformance.py).

Each builder takes no argument (kdist passes `input_shape`/`num_classes` only to callables
that accept them), so they also serve as `model._target_` in subprocess runs.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

FEATURES, CLASSES = 8, 3


def functional() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


def sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


class Subclassed(keras.Model):
    """Layers made in `__init__`, no input shape: no variables until the first call."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(CLASSES)

    def call(self, inputs: Any) -> Any:
        return self.out(self.hidden(inputs))


class OwnTrainStep(Subclassed):
    """A `train_step` of its own: clips the gradients and tracks the gradient norm."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.norm_tracker = keras.metrics.Mean(name="grad_norm")
        # As in Keras's guide to custom train steps: the step tracks its own loss.
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, self.trainable_variables)
        gradients, norm = tf.clip_by_global_norm(gradients, 0.5)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        self.norm_tracker.update_state(norm)
        self.loss_tracker.update_state(loss)
        return self.compute_metrics(x, y, y_pred)


class OwnComputeLoss(Subclassed):
    """A `compute_loss` of its own: the compiled loss plus an activity penalty."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        # Keras scales each replica's loss by the replica count: so must a penalty.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss + 0.01 * keras.ops.mean(keras.ops.square(y_pred)) / replicas


def two_outputs() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    cls = keras.layers.Dense(CLASSES, name="cls")(hidden)
    aux = keras.layers.Dense(1, name="aux")(hidden)
    return keras.Model(inputs, {"cls": cls, "aux": aux})


def regressor() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


def dict_inputs() -> keras.Model:
    a = keras.Input((FEATURES,), name="a")
    b = keras.Input((4,), name="b")
    joined = keras.layers.Concatenate()([keras.layers.Dense(8)(a), b])
    hidden = keras.layers.Dense(16, activation="relu")(joined)
    return keras.Model({"a": a, "b": b}, keras.layers.Dense(CLASSES)(hidden))


def batchnorm_dropout() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16)(inputs)
    hidden = keras.layers.BatchNormalization()(hidden)
    hidden = keras.layers.Activation("relu")(hidden)
    hidden = keras.layers.Dropout(0.3, seed=7)(hidden)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


def l2_regularised() -> keras.Model:
    l2 = keras.regularizers.L2(0.01)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu", kernel_regularizer=l2)(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, kernel_regularizer=l2)(hidden))


def subclassed() -> keras.Model:
    return Subclassed()


def own_train_step() -> keras.Model:
    return OwnTrainStep()


def own_compute_loss() -> keras.Model:
    return OwnComputeLoss()
