"""keras.io's getting-started habit: `fit(x, y, epochs=3, batch_size=32)` with the default
`shuffle=True`. The two sides need not draw the same order, so the loss per epoch is
compared: within 0.05 (the loss starts near 1.1; a different order moves an epoch's mean
by about 0.01 here)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 32}
COMPARE = "loss"
TOLERANCE = 0.05
# The two sides shuffle with their own seeds: the batch hooks are compared by hook, index
# and keys, the epoch logs by value within TOLERANCE.
TRACE_BATCH_VALUES = False


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 10)).astype("float32")
    return {"x": x, "y": (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0)}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((10,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
