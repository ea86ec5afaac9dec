"""keras.io's callbacks guide: `EarlyStopping(monitor="val_loss", patience=1,
restore_best_weights=True)` on a run that overfits (a high learning rate on few, noisy
examples): training stops early and the best epoch's weights come back."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 10, "batch_size": 16, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(96, 8)).astype("float32")
    y = rng.integers(0, 3, size=96)  # noise: the validation loss soon rises
    xv = rng.normal(size=(32, 8)).astype("float32")
    return {"x": x, "y": y, "validation_data": (xv, rng.integers(0, 3, size=32))}


def make_callbacks():
    return [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    ]


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(3)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def check(reference, ours):
    epochs = len(reference.history["loss"])
    assert epochs < FIT_KWARGS["epochs"], "the reference did not stop early"
    assert len(ours.history["loss"]) == epochs, (
        f"{len(ours.history['loss'])} epochs, fit stopped after {epochs}"
    )
    stopped = ours.callbacks[0].stopped_epoch
    assert stopped == reference.callbacks[0].stopped_epoch, stopped
