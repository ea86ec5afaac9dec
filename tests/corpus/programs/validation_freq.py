"""`fit(epochs=3, validation_data=..., validation_freq=2)`: Keras validates after epoch 2
only (index 1), not after the last epoch (issue 42 item 3: kdist added the last epoch)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 16, "shuffle": False, "validation_freq": 2}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(8, 1))
    x = rng.normal(size=(64, 8)).astype("float32")
    xv = rng.normal(size=(32, 8)).astype("float32")
    return {
        "x": x,
        "y": (x @ w).astype("float32"),
        "validation_data": (xv, (xv @ w).astype("float32")),
    }


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


def check(reference, ours):
    assert len(reference.history["val_loss"]) == 1, reference.history
    assert len(ours.history.get("val_loss", [])) == 1, (
        f"kdist validated {len(ours.history.get('val_loss', []))} times, fit once"
    )
