"""`model.compile(..., jit_compile=True)` (keras.io's performance tips; many examples set
it): `fit` trains the XLA-compiled step (issue 42 item 6: the model's compile settings are
read at every `fit`)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
# Keras's own fit with jit_compile=True under MirroredStrategy on the 2 logical CPUs fails:
# XLA refuses a replica's variables on another device ("InvalidArgumentError", see
# tensorflow.org/xla/known_issues#tfvariable_on_a_different_device).
KERAS_MIRRORED_FAILS = "jit_compile=True: XLA refuses variables on another device under mirrored"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(96, 8)).astype("float32")
    return {"x": x, "y": (x[:, :2].sum(axis=1) > 0).astype("float32")}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=True,
    )
    return model


def check(reference, ours):
    assert ours.model.jit_compile is True, "kdist's model lost jit_compile=True"
