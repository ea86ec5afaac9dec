"""Keras's optimizer argument `gradient_accumulation_steps=2` (the optimizer applies the
mean of 2 batches' gradients every second step): on one device kdist must train as `fit`.
Keras's own `fit` cannot run it under `MirroredStrategy` (keras#20582, issue 42 item 7)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
KERAS_MIRRORED_FAILS = (
    "Keras's optimizer accumulates gradients with a cross-replica update inside the replica "
    "step (a merge_call in a replica context it cannot make; keras#20582)"
)
# kdist refuses it over several replicas, before training, and names trainer.accumulate_steps
# (Keras counts every micro-batch as a step: its hooks and schedules could not be kept).
KDIST_MIRRORED_REFUSAL = r"gradient_accumulation_steps"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(128, 8)).astype("float32")
    return {"x": x, "y": (x @ rng.normal(size=(8, 1))).astype("float32")}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2, gradient_accumulation_steps=2),
        loss="mse",
        metrics=["mae"],
    )
    return model
