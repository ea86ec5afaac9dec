"""`model.compile(..., run_eagerly=True)` (keras.io's debugging advice: step through
`train_step` in Python): a subclassed model whose `train_step` checks it runs eagerly
(`tf.executing_eagerly()`), which `fit` honours (issue 42 item 6)."""

import keras
import numpy as np
import tensorflow as tf

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EAGER: list[bool] = []


class DebugModel(keras.Model):
    def train_step(self, data):
        EAGER.append(tf.executing_eagerly())
        return super().train_step(data)


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 6)).astype("float32")
    return {"x": x, "y": (x @ rng.normal(size=(6, 1))).astype("float32")}


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((6,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(inputs))
    model = DebugModel(inputs, outputs)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"], run_eagerly=True)
    EAGER.clear()
    return model


def check(reference, ours):
    # make_model clears EAGER: it holds the steps of kdist's side, each must run eagerly.
    assert EAGER and all(EAGER), f"steps traced as a graph: {EAGER.count(False)} of {len(EAGER)}"
