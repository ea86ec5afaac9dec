"""`model.compile(..., steps_per_execution=4)` (keras.io's "faster training" advice): 11
batches an epoch, so executions of 4, 4 and 3 steps; the batch hooks are called once per
execution with the execution's first and last step (issue 42 item 6: kdist called them
every 8 steps whatever the model said)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
# Keras's own multi-step train function (steps_per_execution=4) under MirroredStrategy fails:
# "You must feed a value for placeholder tensor 'while/.../while/cond/Placeholder_1'".
KERAS_MIRRORED_FAILS = "steps_per_execution=4: Keras's multi-step function fails under mirrored"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(170, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0)
    xv = rng.normal(size=(40, 8)).astype("float32")
    return {
        "x": x,
        "y": y,
        "validation_data": (xv, (xv[:, 0] > 0).astype("int64") + (xv[:, 1] > 0)),
    }


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=4,
    )
    return model
